"""Every config key with its type, default and meaning, read from the schema itself.

The meaning of a key is the help its field declares (:func:`cogym.core.config_key.key`, in the
field's metadata), and a string key's choices are its type where its field declares them.
``cogym config`` prints the table and docs/config.md is its Markdown form (a test keeps the page
equal to the output, so it cannot drift from the code); the page also lists the renamed keys a
config may still hold (``schema.RENAMED``).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import textwrap
import types
import typing
from typing import Any

from cogym.agents.endpoint import EndpointConfig
from cogym.agents.lora import LoraConfig
from cogym.core.config_key import choices_of, help_of
from cogym.core.types import SamplingParams
from cogym.learners import registry as algorithms
from cogym.learners.config import common_keys, LearnerConfig
from cogym.runners.config.schema import (Config, EvalConfig, GameConfig, GenerationConfig, LeagueConfig,
                                         PolicyConfig, PromptConfig, RayConfig, RENAMED, RunConfig, StageConfig, StageRun,
                                         TournamentGame, TournamentSampling, TournamentSection)


# command -> its sections: (prefix, dataclass); a prefix with <id> is a mapping of named sections
SECTIONS: dict[str, list[tuple[str, type]]] = {
    "train": [("run", RunConfig), ("game", GameConfig), ("sampling", SamplingParams),
              ("policies.<id>", PolicyConfig), ("policies.<id>.sampling", SamplingParams),
              ("policies.<id>.lora", LoraConfig), ("policies.<id>.generation", GenerationConfig),
              ("policies.<id>.endpoint", EndpointConfig),
              ("learners.<id>", LearnerConfig), ("prompts.<role>", PromptConfig), ("eval", EvalConfig),
              ("league", LeagueConfig), ("ray", RayConfig), ("stages.<k>", StageConfig), ("stages.<k>.run", StageRun)],
    "tournament": [("tournament", TournamentSection), ("game", TournamentGame), ("sampling", TournamentSampling),
                   ("prompts.<role>", PromptConfig), ("ray", RayConfig)],
}
SECTIONS["eval"] = SECTIONS["train"]
SEATS = ("seats.<role or seat>", "str | null", "", "the policy id (or scripted:<twin>) of a role's seats, or of one seat "
         "(a seat's own key wins); null removes the seat, its prompt and a policy no seat plays")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_name(a) for a in typing.get_args(tp))
    if origin is typing.Literal:  # a key's choices
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, dict):
        return origin.__name__
    return getattr(tp, "__name__", str(tp)).replace("NoneType", "null")


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            return "(section)"
    else:
        return "(required)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def _optional_section(tp: Any) -> bool:
    """A section that may be null (``policies.<id>.endpoint``): its keys are listed under their own prefix."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 and dataclasses.is_dataclass(args[0])


def reference(command: str = "train") -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) of every key ``command``'s config takes, in schema order."""
    rows: list[tuple[str, str, str, str]] = []
    for prefix, cls in SECTIONS[command]:
        hints = typing.get_type_hints(cls)
        if cls is StageConfig:  # the list itself, then the keys of each of its stages
            (stages,) = [f for f in dataclasses.fields(Config) if f.name == "stages"]
            rows.append(("stages", "list", _default(stages), help_of(stages)))
        for f in dataclasses.fields(cls):
            if f.name == "algorithm_configs" or (cls is LearnerConfig and f.name not in common_keys()):
                continue
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp) or _optional_section(tp) or (cls is Config):
                continue  # a nested section: its keys are listed under their own prefix
            key = f"{prefix}.{f.name.rstrip('_')}" if prefix else f.name
            choices = " | ".join(map(repr, choices_of(f)))
            rows.append((key, choices or _type_name(tp), _default(f), help_of(f)))
        if prefix == "game" and command != "tournament":
            rows.append(SEATS)
    return rows


def _field_rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    hints = typing.get_type_hints(cls)
    return [(f"{prefix}.{f.name}", " | ".join(map(repr, choices_of(f))) or _type_name(hints[f.name]), _default(f),
             help_of(f)) for f in dataclasses.fields(cls)]


def summary(cls: type) -> str:
    """The first sentence of an algorithm module's docstring (what it is, where docs/algorithms.md has it)."""
    doc = " ".join((sys.modules[cls.__module__].__doc__ or cls.__doc__ or "").split())
    head, sep, _ = doc.partition(": ")
    head = head if sep and len(head) < 100 else doc.split(". ")[0]
    return re.sub(r"\s*\((?:see )?docs/algorithms\.md[^)]*\)", "", head).rstrip(".")


def algorithm_reference() -> list[tuple[str, str, list[tuple[str, str, str, str]]]]:
    """(name, summary, key rows) of each registered algorithm: its own learner keys (``learners.<id>.<key>``,
    read when the policy's ``algorithm`` or a ``role_algorithms`` entry names it)."""
    return [(name, summary(algorithms.get(name)), _field_rows(algorithms.get(name).Config, "learners.<id>"))
            for name in algorithms.names()]


def format_text(rows: list[tuple[str, str, str, str]], width: int = 100, *, with_algorithms: bool = False) -> str:
    """The keys as an indented table; ``with_algorithms``: then each algorithm's own keys under its name."""
    lines = _text_rows(rows, width)
    if with_algorithms:
        lines += ["", *textwrap.wrap("Each algorithm's own keys (flat under learners.<id>, read when it is the "
                                     "policy's algorithm or a role_algorithms entry):", width=max(40, width))]
        for name, about, algo_rows in algorithm_reference():
            lines += ["", *textwrap.wrap(f"algorithm: {name}  ({about})" if about else f"algorithm: {name}",
                                         width=max(40, width), subsequent_indent="    ")]
            lines += _text_rows(algo_rows, width) if algo_rows else ["    (no keys of its own)"]
    return "\n".join(lines)


def _text_rows(rows: list[tuple[str, str, str, str]], width: int) -> list[str]:
    key_w = min(max(len(r[0]) for r in rows), 40)
    lines = []
    for key, tp, default, meaning in rows:
        head = f"{key:<{key_w}}  {tp}" + (f" = {default}" if default else "")
        lines.append(head)
        if meaning:
            lines += textwrap.wrap(meaning, width=max(40, width - 4), initial_indent="    ", subsequent_indent="    ")
    return lines


def _markdown_table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    out = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, tp, default, meaning in rows:
        cells = [f"`{key}`", f"`{tp}`".replace("|", "\\|") if tp else "", f"`{default}`" if default else "",
                 meaning.replace("|", "\\|")]
        out.append("| " + " | ".join(cells) + " |")
    return out


def format_markdown(command: str = "train") -> str:
    out = []
    for cmd, title in (("train", "`cogym train` and `cogym eval`"), ("tournament", "`cogym tournament`")):
        if command not in ("all", cmd):
            continue
        out += [f"## {title}", "", *_markdown_table(reference(cmd))]
        out.append("")
        if cmd == "train":
            out += algorithms_markdown()
    return "\n".join(out)


def algorithms_markdown() -> list[str]:
    """Each algorithm's own keys, a table under its name."""
    out = ["## Algorithm keys", "",
           "Flat under `learners.<id>`, next to the common keys above; read when the algorithm is the policy's "
           "`algorithm` or a `role_algorithms` entry. The equations: [algorithms.md](algorithms.md).", ""]
    for name, about, rows in algorithm_reference():
        out += [f"### `algorithm: {name}`", "", *([about + ".", ""] if about else [])]
        out += [*_markdown_table(rows), ""] if rows else ["No keys of its own.", ""]
    return out


def renamed_markdown() -> str:
    """The renamed keys (``schema.RENAMED``) as a Markdown table."""
    rows = [f"| `{old}` | `{new}` |" for old, new in RENAMED.items()]
    return "\n".join(["## Renamed keys", "",
                      "A config may still hold these keys from before a redesign: each is read as its new key, with a "
                      "warning naming it (one line each time a file or an override uses it), and the run goes on.", "",
                      "| old key | new key |", "|---|---|", *rows, ""])


def config_page() -> str:
    """docs/config.md."""
    return ("# Config reference\n\n"
            "Every key a config takes, with its type, default and meaning, generated from the help each key declares "
            "in the schema (`cogym/runners/config/schema.py`) by `cogym config --markdown > docs/config.md`. A YAML "
            "file and dotted command-line overrides (`run.iterations=10`) set the same keys; an unknown key gets a "
            "\"did you mean\". How the sections fit together: [training.md](training.md).\n\n"
            + format_markdown("all") + "\n" + renamed_markdown())
