"""Golden metrics: short runs of the shipped configs whose every non-timing metric is pinned.

They guard behaviour across refactors: the same config, seed and code path must log the same
numbers. A change that alters numbers on purpose (a new forward pass, a fix) regenerates them in
its own commit that says why and by how much::

    python tests/golden/golden.py            # rewrite every tests/golden/*.json
    python tests/golden/golden.py kuhn_poker # rewrite one

The runs: the default config (proposer_solver) for 30 iterations on the torch engine, and every
shipped config (``configs/*.yaml`` and ``examples/number_guess.yaml``) for 5 iterations as shipped
(its own engines; TensorBoard and checkpoints off, which log nothing; ``AS_SHIPPED_BUT`` names the
one change a config's golden run makes). One intra-op thread, as
the test suite uses, so float reductions run in one order.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))  # run as a script too: tests.rounding is the repository's
from tests.rounding import close  # noqa: E402
# Timings and where-things-are: everything else a run logs is pinned.
TIMING_SUFFIXES = ("_s", "tokens_per_s", "_seconds")
UNPINNED = {"run_dir", "wall_s", "tokens_per_s",
            "threads"}  # the torch threads an iteration used: they follow the machine's load (core/threads.py)


# Configs whose golden run changes one thing: the three LoRA roles generate with HF, not their shared
# vLLM engine (vLLM is an extra, and its kernels need not give the same numbers on another CPU); the
# adapters, learners and game are the config's.
AS_SHIPPED_BUT = {"proposer_solver_judge_lora": [f"policies.{p}.generation.backend=hf"
                                                 for p in ("proposer", "solver", "judge")],
                  # the 5 iterations cross the stage boundary: 2 of SFT, then 3 of GRPO from its checkpoint
                  "sft_then_grpo": ["stages.0.run.iterations=2"]}


def runs() -> dict[str, tuple[Path, list[str]]]:
    """name -> (config path, overrides) of every golden run."""
    common = ["run.tensorboard=false", "run.checkpoint_every=0"]
    out: dict[str, tuple[Path, list[str]]] = {
        "default_torch_30": (REPO / "cogym" / "configs" / "proposer_solver.yaml",
                             ["run.iterations=30", "learners.proposer.engine=torch",
                              "learners.solver.engine=torch", *common]),
    }
    for path in sorted((REPO / "cogym" / "configs").glob("*.yaml")) + [REPO / "examples" / "number_guess.yaml"]:
        out[f"{path.stem}_5"] = (path, ["run.iterations=5", *common, *AS_SHIPPED_BUT.get(path.stem, [])])
    return out


def pinned(row: dict) -> dict:
    """The non-timing entries of a metrics row or summary."""
    return {k: v for k, v in row.items() if k not in UNPINNED and not k.endswith(TIMING_SUFFIXES)}


def run_golden(name: str, out_dir: Path) -> dict:
    """Train one golden run in ``out_dir``; return {"metrics": [rows], "summary": {...}}, pinned parts only."""
    import torch

    from cogym.runners.config.load import load_config
    from cogym.runners.train.loop import train

    torch.set_num_threads(1)
    path, overrides = runs()[name]
    with isolated_registries():  # a config's game.modules (the example game) must not leak into other tests
        cfg = load_config(path, [*overrides, f"run.out_dir={out_dir}", "run.plot=false"])
        summary = train(cfg, out_dir / "run", progress=False)
    rows = [json.loads(line) for line in (out_dir / "run" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"metrics": [pinned(r) for r in rows], "summary": pinned(summary)}


@contextlib.contextmanager
def isolated_registries():
    """Undo what the block registers (games, algorithms) and the user modules it imports."""
    from cogym.envs import registry as games
    from cogym.learners import registry as algorithms

    saved, before = (dict(games._REGISTRY), dict(algorithms._REGISTRY)), set(sys.modules)
    try:
        yield
    finally:
        games._REGISTRY.clear()
        games._REGISTRY.update(saved[0])
        algorithms._REGISTRY.clear()
        algorithms._REGISTRY.update(saved[1])
        for mod in [m for m in sys.modules if m not in before and m.startswith("cogym_user_games.")]:
            del sys.modules[mod]


# Floats are compared to the rounding that differs between CPUs (tests/rounding.py): the same code,
# seed and thread count on an AVX2 and an AVX-512 machine take other float kernels (oneDNN, MKL,
# ATen's vector code), and the metrics then differ from the 5th digit on (measured: at most 2.8e-5
# relative, 8e-5 absolute, over every golden run), while every sampled token, reward and count is the
# same. Anything a change of behaviour moves (another token, reward or row) moves far more.
# Everything else is compared exactly.


def differences(expected, actual, where: str = "") -> list[str]:
    """Every place two golden records differ (floats to rounding, ``tests.rounding.close``; everything
    else exactly; NaN equals NaN)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{where}.{k}: missing" for k in expected if k not in actual]
        out += [f"{where}.{k}: new metric" for k in actual if k not in expected]
        for k in expected:
            if k in actual:
                out += differences(expected[k], actual[k], f"{where}.{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} rows expected, {len(actual)} logged"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{where}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, float):
        same = close(expected, actual)
    else:
        same = expected == actual and type(expected) is type(actual)
    return [] if same else [f"{where}: expected {expected!r}, got {actual!r}"]


def main(argv: list[str]) -> None:
    import tempfile

    names = argv or list(runs())
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            record = run_golden(name, Path(tmp))
        (HERE / f"{name}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"wrote {HERE / f'{name}.json'} ({len(record['metrics'])} rows)")


if __name__ == "__main__":
    main(sys.argv[1:])
