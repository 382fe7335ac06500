"""Every config key with its type, default and meaning, read from the schema itself.

The meaning of a key is the comment next to its field (on the field's line, or the comment lines
right above it) in the dataclass that declares it; a field with none is described by its section's
docstring. ``cogym config`` prints the table and docs/config.md is its Markdown form (a test keeps
the page equal to the output, so it cannot drift from the code).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import textwrap
import tokenize
import types
import typing
from typing import Any

from cogym.agents.endpoint import EndpointConfig
from cogym.agents.lora import LoraConfig
from cogym.core.types import SamplingParams
from cogym.learners.config import common_keys, LearnerConfig
from cogym.runners.config.schema import (Config, EvalConfig, GameConfig, GenerationConfig, LeagueConfig,
                                         PolicyConfig, PromptConfig, RayConfig, RunConfig, TournamentGame,
                                         TournamentSampling, TournamentSection)


# command -> its sections: (prefix, dataclass); a prefix with <id> is a mapping of named sections
SECTIONS: dict[str, list[tuple[str, type]]] = {
    "train": [("run", RunConfig), ("game", GameConfig), ("sampling", SamplingParams),
              ("policies.<id>", PolicyConfig), ("policies.<id>.sampling", SamplingParams),
              ("policies.<id>.lora", LoraConfig), ("policies.<id>.generation", GenerationConfig),
              ("policies.<id>.endpoint", EndpointConfig),
              ("learners.<id>", LearnerConfig), ("prompts.<role>", PromptConfig), ("eval", EvalConfig),
              ("league", LeagueConfig), ("ray", RayConfig)],
    "tournament": [("tournament", TournamentSection), ("game", TournamentGame), ("sampling", TournamentSampling),
                   ("prompts.<role>", PromptConfig), ("ray", RayConfig)],
}
SECTIONS["eval"] = SECTIONS["train"]
SEATS = ("seats.<role or seat>", "str | null", "", "the policy id (or scripted:<twin>) of a role's seats, or of one seat "
         "(a seat's own key wins); null removes the seat, its prompt and a policy no seat plays")


def _comments(cls: type) -> dict[str, str]:
    """field name -> the comment on its line, or the comment lines right above it."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    above: list[str] = []
    line_comment: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line_comment[tok.start[0]] = tok.string.lstrip("#").strip()
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(line_comment.get(number, ""))
            continue
        name = stripped.split(":", 1)[0].strip() if ":" in stripped else ""
        if name.isidentifier() and line.startswith("    ") and not line.startswith("     ") and not stripped.startswith("def "):
            text = " ".join([*above, line_comment.get(number, "")]).strip()
            if text:
                out[name] = text
        above = []
    return out


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", typing.Union)):
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


def _section_doc(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return doc.split("\n\n")[0].replace("\n", " ") if doc and not doc.startswith(cls.__name__ + "(") else ""


def reference(command: str = "train") -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) of every key ``command``'s config takes, in schema order."""
    rows: list[tuple[str, str, str, str]] = []
    for prefix, cls in SECTIONS[command]:
        hints = typing.get_type_hints(cls)
        notes = _comments(cls)
        fallback = _section_doc(cls)
        for f in dataclasses.fields(cls):
            if f.name == "algorithm_configs" or (cls is LearnerConfig and f.name not in common_keys()):
                continue
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp) or _optional_section(tp) or (cls is Config):
                continue  # a nested section: its keys are listed under their own prefix
            key = f"{prefix}.{f.name.rstrip('_')}" if prefix else f.name
            rows.append((key, _type_name(tp), _default(f), notes.get(f.name) or fallback))
        if prefix == "game" and command != "tournament":
            rows.append(SEATS)
    if command != "tournament":
        rows.append(("learners.<id>.<algorithm key>", "", "", "each algorithm's own keys (gamma, lam, clip_eps, ...): "
                     "docs/algorithms.md lists them per algorithm"))
    return rows


def format_text(rows: list[tuple[str, str, str, str]], width: int = 100) -> str:
    key_w = min(max(len(r[0]) for r in rows), 40)
    lines = []
    for key, tp, default, meaning in rows:
        head = f"{key:<{key_w}}  {tp}" + (f" = {default}" if default else "")
        lines.append(head)
        if meaning:
            lines += textwrap.wrap(meaning, width=max(40, width - 4), initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)


def format_markdown(command: str = "train") -> str:
    out = []
    for cmd, title in (("train", "`cogym train` and `cogym eval`"), ("tournament", "`cogym tournament`")):
        if command not in ("all", cmd):
            continue
        out += [f"## {title}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for key, tp, default, meaning in reference(cmd):
            cells = [f"`{key}`", f"`{tp}`".replace("|", "\\|") if tp else "", f"`{default}`" if default else "", meaning.replace("|", "\\|")]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def config_page() -> str:
    """docs/config.md."""
    return ("# Config reference\n\n"
            "Every key a config takes, with its type, default and meaning, generated from the schema "
            "(`runners/config/schema.py`) by `cogym config --markdown > docs/config.md`. A YAML file and "
            "dotted command-line overrides (`run.iterations=10`) set the same keys; an unknown key gets a "
            "\"did you mean\". How the sections fit together: [training.md](training.md).\n\n"
            + format_markdown("all"))
