"""Each config key, and each set of values a key may take, is declared once.

A key's help lives in its field's metadata (cogym.core.config_key.key), where `cogym config` and
docs/config.md read it; a set of choices is written in one module and imported wherever else it is
checked; a renamed key (schema.RENAMED) is read as its new key with one warning.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
import typing
import warnings
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

import cogym
from cogym.core.config_key import help_of, SAME_AS
from cogym.envs.arithmetic import HELDOUT_EVALUATORS
from cogym.learners import registry
from cogym.learners.config import LearnerConfig
from cogym.runners.config import schema
from cogym.runners.config.load import load_config
from cogym.runners.config.reference import reference, SECTIONS
from cogym.runners.evaluation.evaluators import kinds
from cogym.runners.rollout import loop

# The packages whose modules declare or check the choices of config keys (envs' tuples are games' seat names).
CHOICE_PACKAGES = ("core", "agents", "learners", "runners")


def config_classes() -> list[type]:
    """Every dataclass a config is made of: the commands' sections, the sections nested in them and each
    registered algorithm's config (its keys are a learner's too)."""
    seen: list[type] = []
    todo = [schema.Config, schema.TournamentConfig, LearnerConfig, *schema.TYPED_MAPS.values(),
            *(cls for sections in SECTIONS.values() for _, cls in sections), *(registry.get(n).Config for n in registry.names())]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        for tp in typing.get_type_hints(cls).values():
            todo += [a for a in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(a)]
    return seen


def test_every_key_declares_its_help() -> None:
    missing = [f"{cls.__name__}.{f.name}" for cls in config_classes() for f in dataclasses.fields(cls) if not help_of(f)]
    assert len(config_classes()) >= 20 and not missing, f"fields without help (key(default, help=...)): {missing}"


def test_a_key_of_two_sections_with_one_meaning_is_declared_once() -> None:
    """Two sections' keys of one name and the same help are one declaration (same_key), not two copies."""
    declared: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cls in config_classes():
        for f in (f for f in dataclasses.fields(cls) if f.name in vars(cls).get("__annotations__", {})):  # its own keys
            if SAME_AS not in f.metadata:
                declared[(f.name, help_of(f))].append(cls.__name__)
            else:
                assert f.metadata[SAME_AS] == f"{declared[(f.name, help_of(f))][0]}.{f.name}"
    copies = sorted(f"{name}: {where}" for (name, _), where in declared.items() if len(where) > 1)
    assert not copies, f"keys whose help is written twice (declare one with same_key): {copies}"


@pytest.mark.parametrize("command", ["train", "tournament"])
def test_each_key_of_a_command_is_listed_once(command: str) -> None:
    keys = [row[0] for row in reference(command)]
    assert len(keys) > 20 and len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def choice_sets(source: str) -> list[tuple[frozenset, int]]:
    """(values, line) of each choice set written in ``source``: a module-level tuple or list of two or more
    strings, or a ``Literal[...]`` of them."""
    found = []
    tree = ast.parse(source)
    literals = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, (ast.Tuple, ast.List))]
    for node in literals:
        found.append((node.value.elts, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            found.append((elts, node.lineno))
    return [(frozenset(e.value for e in elts), line) for elts, line in found
            if len(elts) >= 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts)]


def duplicate_choice_sets(sources: dict[str, str]) -> list[str]:
    """Each choice set written more than once across ``sources`` (name -> module text), with its places."""
    places: dict[frozenset, list[str]] = defaultdict(list)
    for name, text in sources.items():
        for values, line in choice_sets(text):
            places[values].append(f"{name}:{line}")
    return [f"{sorted(values)} at {', '.join(where)}" for values, where in places.items() if len(where) > 1]


def test_each_choice_set_is_declared_once() -> None:
    root = Path(cogym.__file__).parent
    sources = {str(p.relative_to(root)): p.read_text(encoding="utf-8") for package in CHOICE_PACKAGES
               for p in sorted((root / package).rglob("*.py"))}
    assert {"runners/config/schema.py", "runners/tournament/spec.py", "runners/rollout/loop.py"} <= set(sources)
    assert sum(len(choice_sets(text)) for text in sources.values()) >= 20  # the scan sees the sets that are there
    assert duplicate_choice_sets(sources) == []
    assert typing.get_args(typing.get_type_hints(schema.GameConfig)["on_error"]) == loop.ON_ERROR


def test_the_scan_finds_a_set_written_twice() -> None:
    twice = {"a": 'Schedule = Literal["round_robin", "gauntlet", "swiss"]\n',
             "b": 'SCHEDULES = ("gauntlet", "round_robin", "swiss")\nX = ("a",)\n'}
    assert duplicate_choice_sets(twice) == ["['gauntlet', 'round_robin', 'swiss'] at a:1, b:1"]


def schema_has(dotted: str) -> bool:
    """Whether ``dotted`` names a key of a training config (a key inside a mapping key counts as its mapping's)."""
    cls: typing.Any = schema.Config
    for part in dotted.split("."):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            return False
        cls = typing.get_type_hints(cls)[part]
        if not dataclasses.is_dataclass(cls):
            return True
    return True


def test_renamed_keys_name_a_key_that_exists_and_one_that_does_not() -> None:
    heldout = {f.name for f in dataclasses.fields(kinds()[HELDOUT_EVALUATORS["heldout"]["kind"]])}
    for old, new in schema.RENAMED.items():
        assert not schema_has(old), f"{old} is renamed but still a key"
        assert schema_has(new), f"{old} is renamed to {new}, which is no key"
        if new.startswith("eval.evaluators.heldout."):  # a setting of the held-out evaluator the arithmetic games declare
            assert new.rsplit(".", 1)[1] in heldout


def old_config(tmp_path: Path, **eval_keys) -> Path:
    tree = yaml.safe_load(schema.default_config_path().read_text(encoding="utf-8"))
    tree.setdefault("eval", {}).update(eval_keys)
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return path


def loaded_with_warnings(path, overrides=()) -> tuple[schema.Config, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(path, list(overrides))
    return cfg, [w for w in caught if issubclass(w.category, FutureWarning)]


def test_a_renamed_key_in_a_file_loads_as_its_new_key_with_one_warning(tmp_path: Path) -> None:
    path = old_config(tmp_path, heldout=False)
    cfg, caught = loaded_with_warnings(path)
    assert cfg.eval.declared is False
    assert len(caught) == 1 and "eval.heldout" in str(caught[0].message) and "eval.declared" in str(caught[0].message)
    assert caught[0].filename == str(path)  # the warning names the file that holds the old key


def test_a_renamed_key_as_an_override_loads_and_the_later_setting_wins(tmp_path: Path) -> None:
    cfg, caught = loaded_with_warnings(None, ["eval.heldout=false"])
    assert cfg.eval.declared is False and len(caught) == 1 and "eval.declared" in str(caught[0].message)
    cfg, caught = loaded_with_warnings(old_config(tmp_path, heldout=False), ["eval.declared=true"])
    assert cfg.eval.declared is True and len(caught) == 1  # the override is applied after the file
    cfg, caught = loaded_with_warnings(None, ["eval.size=7"])
    assert cfg.eval.evaluators["heldout"]["size"] == 7 and "eval.evaluators.heldout.size" in str(caught[0].message)


def test_the_warning_is_one_line_shown_by_default(tmp_path: Path) -> None:
    """Without any warnings filter set (as `cogym train` runs), the old key prints one line and the load goes on."""
    code = ("from cogym.runners.config.load import load_config; "
            f"print('declared', load_config({str(old_config(tmp_path, heldout=False))!r}).eval.declared)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    err = done.stderr.splitlines()
    at = [i for i, line in enumerate(err) if "eval.heldout" in line]
    assert done.returncode == 0 and done.stdout.strip().endswith("declared False"), done.stderr[-2000:]
    assert len(at) == 1 and "FutureWarning" in err[at[0]] and "eval.declared" in err[at[0]], done.stderr[-2000:]
    assert at[0] + 1 == len(err) or not err[at[0] + 1].startswith("  ")  # no source line printed under it
