"""``cogym eval``: run a game's declared evaluators on a model, without training."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from cogym.envs import make
from cogym.runners.cli.args import nonnegative_float, positive_int, UsageError
from cogym.runners.config.load import load_config
from cogym.runners.config.modules import import_game_modules
from cogym.runners.config.schema import default_config_path
from cogym.runners.display import plain
from cogym.runners.evaluation.evaluators import declared, evaluate, kinds, require_evaluators
from cogym.runners.train.build import build

DESCRIPTION = ("Measure a model with the evaluators a game declares (and any the config adds under eval.evaluators), "
               "as a training run does before and after training: e.g. cogym eval --game kuhn_poker-v0 (win rates "
               "against scripted twins, exploitability) or cogym eval --game proposer_solver-v0 (held-out "
               "accuracy). The game's seats, prompts and sampling come from --config, else from the shipped config "
               "of the game. --size, --temperature, ... set that setting of every evaluator that has it (a flag wins "
               "over a dotted override).")
# Flags that set one setting of every evaluator the run measures that has it (eval.evaluators.<name>.<field>).
SETTING_FLAGS = ("size", "max_new_tokens", "temperature", "samples", "seed", "batch_size", "games")
OVERRIDES_AFTER_OPTIONS = True


def add_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("overrides", nargs="*", help="dotted overrides of the config, e.g. eval.evaluators.heldout.size=100 "
                   "or sampling.temperature=0.7")
    e.add_argument("--game", help="game id (default: the config's); with no --config, its shipped config is used")
    e.add_argument("--config", default=None, help="config that seats the game (default: the shipped one of --game, "
                   "else the shipped proposer_solver.yaml)")
    e.add_argument("--model", default=None,
                   help="model every policy of the config plays: an HF model directory, a checkpoint's policy "
                        "directory, a Hub id in the local cache, or tiny (default: the config's models)")
    e.add_argument("--dtype", default=None, choices=["float32", "fp32", "bfloat16", "bf16", "float16", "fp16"],
                   help="dtype the models run in (default: the config's, float32)")
    e.add_argument("--attn-implementation", default=None, metavar="KERNEL",
                   help="transformers' attention kernel, e.g. sdpa or eager (default: the config's)")
    settings = e.add_argument_group("evaluator settings", "each sets that setting of every evaluator that has it, "
                                    "e.g. --size 100 is eval.evaluators.heldout.size=100 in a run of an arithmetic game")
    settings.add_argument("--size", type=positive_int, default=None, help="how many problems of a fixed set")
    settings.add_argument("--max-new-tokens", type=positive_int, default=None, metavar="N", help="longest answer read")
    settings.add_argument("--temperature", type=nonnegative_float, default=None, metavar="T",
                          help="above 0, also the accuracy sampled at this temperature (pass@1)")
    settings.add_argument("--samples", type=positive_int, default=None, metavar="K", help="answers sampled a problem")
    settings.add_argument("--seed", type=int, default=None, help="the evaluators' own random stream")
    settings.add_argument("--batch-size", type=positive_int, default=None, help="prompts per generate call")
    settings.add_argument("--games", type=positive_int, default=None, help="games played")


def shipped_config(game: str) -> Path:
    """The shipped config that plays ``game`` (the one named after it first)."""
    folder = default_config_path().parent
    named = folder / f"{game.rsplit('-v', 1)[0]}.yaml"
    for path in [named, *sorted(folder.glob("*.yaml"))]:
        if path.is_file() and ((yaml.safe_load(path.read_text()) or {}).get("game") or {}).get("id") == game:
            return path
    raise UsageError(f"no shipped config plays {game}; give one with --config (cogym games lists the games)")


def model_of(model: str, pid: str) -> str:
    """The model policy ``pid`` plays for ``--model``: a checkpoint's ``policies/<pid>`` when ``model`` is a
    checkpoint directory holding one, else ``model`` itself."""
    saved = Path(model) / "policies" / pid
    return str(saved) if saved.is_dir() else model


def setting_overrides(cfg, args: argparse.Namespace) -> list[str]:
    """eval.evaluators.<name>.<field>=<value> for each setting flag given and each evaluator with that field."""
    given = {f: getattr(args, f) for f in SETTING_FLAGS if getattr(args, f, None) is not None}
    if not given:
        return []
    import_game_modules(cfg.game.modules)  # a user's game, and the evaluator kinds its module registers
    known, out = kinds(), []
    for name, ev in declared(cfg.eval, make(cfg.game.id, **cfg.game.kwargs).spec).items():
        cls = known.get(ev.get("kind")) if isinstance(ev, dict) else None
        fields = {f.name for f in dataclasses.fields(cls)} if cls is not None and dataclasses.is_dataclass(cls) else set()
        out += [f"eval.evaluators.{name}.{key}={value}" for key, value in given.items() if key in fields]
    return out


def run(args: argparse.Namespace) -> int:
    path = args.config or (shipped_config(args.game) if args.game else None)
    overrides = [*([f"game.id={args.game}"] if args.game else []), *args.overrides]
    base = load_config(path, overrides)  # to learn the config's policies and evaluators
    for pid in base.policies:
        overrides += [f"policies.{pid}.{key}={value}" for key, value in
                      (("model", args.model and model_of(args.model, pid)), ("dtype", args.dtype),
                       ("attn_implementation", args.attn_implementation)) if value is not None]
    cfg = load_config(path, [*overrides, *setting_overrides(base, args)])
    run_ = build(cfg, learners={})  # games, policies and seats; no learner, nothing trains
    require_evaluators(cfg, run_.evaluators)
    # a model path may hold [..] (read as markup) or control characters: shown as written, escaped
    table = Table(title=plain(f"cogym eval: {cfg.game.id}" + (f", {args.model}" if args.model else "")))
    for column in ("evaluator", "metric", "value"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for ev in run_.evaluators:
        for key, value in evaluate([ev], run_).items():
            table.add_row(plain(ev.name), plain(key.removeprefix(f"eval/{ev.name}/")), f"{value:.4f}")
    Console().print(table)
    return 0
