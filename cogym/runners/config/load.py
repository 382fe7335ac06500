"""The one config loader every command uses: YAML plus dotted command-line overrides into the typed
sections of :mod:`cogym.runners.config.schema`.

``load_config(path, overrides)`` reads a training config; ``load_tree`` and ``build_section`` read
any command's (a tournament's). Unknown keys name the closest known one ("did you mean"), a value
of the wrong type names its key, and ``seats.<role>=null`` removes a seat. ``load_config(None)``
loads the shipped default (``proposer_solver.yaml``)."""

from __future__ import annotations

import dataclasses
import keyword
import math
import types
import typing
import warnings
from pathlib import Path
from typing import Any

from cogym.core.types import SamplingParams
from cogym.core.errors import ConfigError
from cogym.core.text import brief
from cogym.learners import registry
from cogym.learners.config import LearnerConfig, split_keys, UnknownKey
from cogym.runners.config.modules import import_game_modules
from cogym.runners.config.safe_yaml import parse_yaml, read_yaml_file
from cogym.runners.config.schema import algorithm_choices, Config, config_path, default_config_path, MAP_OWNERS, RENAMED, \
    RunConfig, StageConfig, StageRun, suggest, TYPED_MAPS
from cogym.runners.config.validate import check_choice, validate


INT_BOUND = 2**63  # an integer key's bound (each key may have a tighter one: validate.py)
MESSAGE_CHARS = 1000  # the most of a section's own error message that is passed on
CONFIG_KEYS = tuple(f.name for f in dataclasses.fields(Config))
RUN_KEYS = tuple(f.name.rstrip("_") for f in dataclasses.fields(RunConfig))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], where)
    if origin is typing.Literal:  # the key's choices
        check_choice(value if isinstance(value, str) else brief(value), typing.get_args(tp), where)
        return value
    if dataclasses.is_dataclass(tp):
        return build_section(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false, got {brief(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not -INT_BOUND <= value < INT_BOUND:  # torch and numpy hold 64 bits; no count or seed needs more
                raise ConfigError(f"{where} must be an integer of 64 bits (|x| < 2**63), got {brief(value)}")
            return value
        raise ConfigError(f"{where} must be an integer, got {brief(value)} ({type(value).__name__})")
    if tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str):  # YAML reads 1e-4 (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"{where} must be a number, got {brief(value)} ({type(value).__name__})")
        # Every float key, here rather than key by key: NaN passes every `x > 0` check after it (comparisons
        # with NaN are false) and fails deep inside generation or the optimizer; infinity overflows a timer.
        try:
            number = float(number)
        except OverflowError:  # an integer beyond float's range
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{where} must be a finite number, got {brief(value)}")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where} must be a string, got {brief(value)} ({type(value).__name__})")
    if tp is list or origin is list:
        item = typing.get_args(tp)[0] if typing.get_args(tp) else str
        kinds = tuple(typing.get_args(item)) if typing.get_origin(item) in (typing.Union, types.UnionType) else (item,)
        if isinstance(value, list) and all(isinstance(v, kinds) for v in value):
            return list(value)
        what = "strings" if kinds == (str,) else " or ".join("strings" if k is str else "mappings" for k in kinds)
        raise ConfigError(f"{where} must be a list of {what}, got {brief(value)}")
    if tp is dict or origin is dict:
        if isinstance(value, dict):
            return dict(value)
        raise ConfigError(f"{where} must be a mapping, got {brief(value)}")
    return value


def build_section(cls: type, data: Any, where: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'the config'} must be a mapping of keys to values, got {brief(data)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and keyword.iskeyword(key) and f"{key}_" in names:
            key = f"{key}_"  # run.async -> RunConfig.async_
        if key not in names:
            raise ConfigError(f"unknown config key {brief(path)}{suggest(str(key), names)}")
        if cls in MAP_OWNERS and key in TYPED_MAPS:
            if not isinstance(value, dict):
                raise ConfigError(f"{path} must be a mapping of names to sections, got {brief(value)}")
            kwargs[key] = {str(k): build_section(TYPED_MAPS[key], v, f"{path}.{k}") for k, v in value.items()}
        else:
            kwargs[key] = _coerce(value, hints[key], path)
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a section's own validation (e.g. SamplingParams)
        msg = str(exc)
        if len(msg) > MESSAGE_CHARS:  # it may quote a whole value (a list of 100k module names): keep both ends
            msg = f"{msg[:MESSAGE_CHARS // 2]} ... {msg[-MESSAGE_CHARS // 4:]}"
        # "max_new_tokens must be >= 1" -> "policies.solver.sampling.max_new_tokens must be >= 1"
        sep = "." if msg.split(" ", 1)[0] in names else ": "
        raise ConfigError(f"{where or 'config'}{sep}{msg}") from exc


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Set ``dotted`` (``a.b.c``) in ``tree``; a number indexes a list that is there (``stages.1.run.iterations``)."""
    parts = dotted.split(".")
    node: Any = tree
    for depth, p in enumerate(parts):
        if isinstance(node, list):
            if not (p.isdigit() and int(p) < len(node)):
                raise ConfigError(f"override {brief(dotted)}: {'.'.join(parts[:depth])} is a list of {len(node)}, "
                                  f"so {brief(p)} must be an index from 0 to {len(node) - 1}")
            p = int(p)
        elif not isinstance(node, dict):
            raise ConfigError(f"override {brief(dotted)}: {brief(parts[depth - 1])} is a value, not a section")
        if depth == len(parts) - 1:
            node[p] = value
            return
        if isinstance(node, dict) and node.get(p) is None:
            node[p] = {}
        node = node[p]


def parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError(f"override {brief(text)} must look like key.path=value, e.g. learners.solver.lr=1e-4")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {brief(text)} has an empty key part; write it like learners.solver.lr=1e-4")
    value = parse_yaml(raw, f"override {brief(text)}: its value") if raw.strip() else ""
    return key, value


def _drop_null_seats(tree: dict) -> None:
    """``seats.<role>: null`` (in a file or as the override ``seats.proposer=null``) removes the seat, the
    role's prompt, and any policy (with its learner) that no seat plays any more."""
    seats = tree.get("seats")
    if not isinstance(seats, dict):
        return
    dropped = [name for name, pid in seats.items() if pid is None]
    if not dropped:
        return
    for name in dropped:
        del seats[name]
        if isinstance(tree.get("prompts"), dict):
            tree["prompts"].pop(name, None)
    played = {pid for pid in seats.values() if isinstance(pid, str)}
    for section in ("policies", "learners"):
        if isinstance(tree.get(section), dict):
            for pid in [p for p in tree[section] if p not in played]:
                del tree[section][pid]


def _module_path(module: str, config_path: Path) -> str:
    """A ``.py`` game module as an absolute path: relative to the working directory, else to the config
    file (found next to it wherever the command runs). Absolute, so the run's saved config.yaml imports it
    from any directory (``cogym train --resume``). Dotted module names, and files found nowhere (the
    import names them), are kept as written."""
    if not module.endswith(".py") or Path(module).is_absolute():
        return module
    for candidate in (Path(module), config_path.parent / module):
        if candidate.is_file():
            return str(candidate.resolve())
    return module


def load_tree(path: str | Path | None, overrides: list[str] | None = None, what: str = "config file",
              renamed: dict[str, str] | None = None) -> dict:
    """The YAML mapping at ``path`` (an empty one when None) with the dotted ``overrides`` applied; the
    ``renamed`` keys (old dotted key -> new) that the file or an override holds are moved to their new keys."""
    tree: Any = {}
    if path is not None:
        path = config_path(path)
        tree = read_yaml_file(path, what) or {}
        if not isinstance(tree, dict):
            raise ConfigError(f"{path} must hold a mapping at the top level, got {type(tree).__name__}")
        move_renamed(tree, renamed or {}, str(path))
    for text in overrides or []:
        key, value = parse_override(text)
        set_dotted(tree, key, value)
        move_renamed(tree, renamed or {}, f"override {text}")
    return tree


def move_renamed(tree: dict, renamed: dict[str, str], source: str) -> None:
    """Move each renamed key in ``tree`` to its new key, warning once for each (a FutureWarning of one line
    naming ``source``, the file or the override that holds it); the run goes on. Called for the file, then
    for each override as it is applied, so the old key's value wins over the new key's only when it was
    written later."""
    for old, new in renamed.items():
        *parents, name = old.split(".")
        section: Any = tree
        for part in parents:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict) and name in section:
            set_dotted(tree, new, section.pop(name))
            warnings.warn_explicit(f"config key {old} is renamed {new}; read as {new} (write that instead)",
                                   FutureWarning, filename=source, lineno=0)


def shared_sampling(tree: dict) -> dict:
    """The top-level ``sampling:`` section: defaults every policy's ``sampling`` takes key by key (its
    own keys win). Its keys are SamplingParams' (an unknown one names the closest), each checked as
    a policy's would be; returned as given."""
    shared = tree.get("sampling")
    if shared is None:
        return {}
    if not isinstance(shared, dict):
        raise ConfigError(f"sampling must be a mapping of keys to values, got {brief(shared)}")
    names = {f.name for f in dataclasses.fields(SamplingParams)}
    for key in shared:
        if key not in names:
            raise ConfigError(f"unknown config key {brief(f'sampling.{key}')}{suggest(str(key), names)}")
    build_section(SamplingParams, shared, "sampling")  # typed and checked even where every policy sets its own
    return dict(shared)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config (the shipped default when ``path`` is None) and apply dotted overrides."""
    path = default_config_path() if path is None else config_path(path)
    tree = load_tree(path, overrides, renamed=RENAMED)
    _drop_null_seats(tree)
    shared = shared_sampling(tree)
    if shared and isinstance(tree.get("policies"), dict):
        for pol in tree["policies"].values():
            if isinstance(pol, dict) and (pol.get("sampling") is None or isinstance(pol["sampling"], dict)):
                pol["sampling"] = {**shared, **(pol.get("sampling") or {})}
    learners = tree.pop("learners", None)
    if learners is not None and not isinstance(learners, dict):
        raise ConfigError(f"learners must be a mapping of names to sections, got {brief(learners)}")
    stages = _stage_sections(tree.pop("stages", None))
    if stages and isinstance(tree.get("run"), dict) and tree["run"].get("iterations", 0) is None:
        del tree["run"]["iterations"]  # run.iterations=null: the stages' sum
    written = stages and isinstance(tree.get("run"), dict) and "iterations" in tree["run"]
    cfg = build_section(Config, tree, "")
    cfg.game.modules = [_module_path(m, path) for m in cfg.game.modules]
    import_game_modules(cfg.game.modules)  # they may register the algorithms the learners name
    cfg.learners = {str(pid): _build_learner(data, f"learners.{pid}") for pid, data in (learners or {}).items()}
    if stages:
        cfg.run.iterations = _staged_iterations(stages, cfg.run.iterations if written else None)
    validate(cfg)
    if stages:
        cfg.stages = stages
        stage_configs(cfg)  # each stage's config, checked now
    return cfg


# ----------------------------------------------------------------------------------------------- stages
STAGE_KEYS = tuple(f.name for f in dataclasses.fields(StageConfig))
STAGE_RUN_KEYS = tuple(f.name for f in dataclasses.fields(StageRun))


def _stage_sections(data: Any) -> list[StageConfig]:
    """``stages`` as typed sections. A key of the config that a stage may not set (a stage sets only its
    name, its learners' keys and ``run.iterations``) is refused naming it; any other unknown key names the
    closest stage key."""
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(s, dict) for s in data):
        raise ConfigError(f"stages must be a list of mappings, each {{name, learners, run: {{iterations}}}}, got {brief(data)}")
    sections = []
    for k, raw in enumerate(data):
        where = f"stages.{k}"
        for name, value in raw.items():
            run_keys = value if name == "run" and isinstance(value, dict) else {}
            whole = [f"{name}"] if name in CONFIG_KEYS and name not in STAGE_KEYS else []
            whole += [f"run.{r}" for r in run_keys if r not in STAGE_RUN_KEYS and r in RUN_KEYS]
            if whole:
                raise ConfigError(f"{where}.{whole[0]}: a stage sets only name, learners and run.iterations; "
                                  f"{whole[0]} is the whole run's, so set it outside stages")
        stage = build_section(StageConfig, raw, where)
        stage.name = stage.name or f"stage{k}"
        if stage.run.iterations < 1:
            raise ConfigError(f"{where}.run.iterations must be >= 1 (each stage says how many iterations it trains), "
                              f"got {stage.run.iterations}")
        for pid, keys in stage.learners.items():
            if keys is not None and not isinstance(keys, dict):
                raise ConfigError(f"{where}.learners.{pid} must be a mapping of learner keys, got {brief(keys)}")
        sections.append(stage)
    names = [s.name for s in sections]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ConfigError(f"stages: two stages are named {brief(twice)}; give each its own name")
    return sections


def _staged_iterations(stages: list[StageConfig], written: int | None) -> int:
    """The run's iterations: the stages' sum, or ``written`` (``run.iterations`` set beside the stages), which
    ends the run inside them (at most their sum)."""
    total = sum(s.run.iterations for s in stages)
    if written is not None and not 1 <= written <= total:
        raise ConfigError(f"run.iterations is {brief(written)}, but the stages train {total} iterations in all; with "
                          "stages, run.iterations ends the run early (at most their sum): drop it (run.iterations=null "
                          f"on the command line), or lengthen a stage (e.g. stages.{len(stages) - 1}.run.iterations=N)")
    return total if written is None else written


def stage_configs(cfg: Config) -> list[Config]:
    """The config each of ``cfg.stages`` trains with: ``cfg`` with each learner's keys (``learners.<id>``,
    flat) overlaid by the stage's own, checked as a whole config is (an error names the stage)."""
    out = []
    for k, stage in enumerate(cfg.stages):
        where = f"stages.{k}"
        for pid in stage.learners:
            if pid not in cfg.learners:
                raise ConfigError(f"{where}.learners.{pid}: no learner {brief(pid)} to set keys of (learners: "
                                  f"{', '.join(cfg.learners) or 'none'}){suggest(str(pid), cfg.learners)}")
        learners = {pid: _build_learner({**lc.flat(), **(stage.learners.get(pid) or {})}, f"{where}.learners.{pid}")
                    for pid, lc in cfg.learners.items()}
        staged = dataclasses.replace(cfg, learners=learners, stages=[])
        try:
            validate(staged)
        except ConfigError as exc:
            raise ConfigError(f"{where} ({stage.name}): {exc}") from None
        out.append(staged)
    return out


def _build_learner(data: Any, where: str) -> LearnerConfig:
    """A learner from its flat keys: the common ones typed into LearnerConfig, the others into the
    config of the algorithm that declares them (an unknown key names the closest known one)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping of keys to values, got {brief(data)}")
    if "algorithm" in data:
        check_choice(_coerce(data["algorithm"], str, f"{where}.algorithm"), algorithm_choices(), f"{where}.algorithm")
    for role, name in _coerce(data.get("role_algorithms") or {}, dict, f"{where}.role_algorithms").items():
        check_choice(_coerce(name, str, f"{where}.role_algorithms.{role}"), algorithm_choices(per_role=True),
                      f"{where}.role_algorithms.{role}")
    try:
        common, parts = split_keys(data)
    except UnknownKey as exc:
        raise ConfigError(f"unknown config key {brief(f'{where}.{exc.key}')} ({exc.hint})") from None
    lc = build_section(LearnerConfig, common, where)
    lc.algorithm_configs = {name: build_section(registry.get(name).Config, keys, where) for name, keys in parts.items()}
    return lc
