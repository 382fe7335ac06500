"""Benchmark: one GRPO iteration of cogym against one of TRL's ``GRPOTrainer`` on the same work.

Both sides train the same model (loaded from the same directory) on the same prompts, with the
same group size, completion length and reward, and time whole iterations: sampling every prompt's
group of completions, scoring them, and one optimizer step over all of them (forward, backward,
AdamW). The runs alternate, a TRL iteration then a cogym iteration (cogym's runs inside a callback
at the end of each TRL step), so drift in the machine's load hits both alike; each side's first
``--warmup`` iterations are not counted. The script prints each side's median seconds per
iteration and the ratio cogym / TRL, against the acceptance bar of each workload.

cogym runs its training code path: the config (the default config with the solver alone, on
``proposer_solver-v0`` with ``source: dataset``) is built by ``runners.build.build``, one iteration
is ``runners.rollout.rollout`` over the games (the solvers' batched generation through the policy's
backend, the game's exact-match reward, Turns grouped per game), ``Learner.update`` (algorithm grpo,
engine torch unless ``--engine deepspeed``) and the backend's weight version bump. The same games
are reset with the same seeds every iteration, so each iteration poses the same problems.
TRL runs ``GRPOTrainer.train`` (transformers generation, no vLLM) on those problems as
conversational prompts (the same system message and chat template, checked to give the same
prompt ids), with a reward function that calls the game's own verifier.

Common settings: CPU, float32, temperature 1 (no top-p/top-k), no KL (TRL ``beta=0``), lr 5e-5
constant, AdamW (0.9, 0.999, eps 1e-8, no weight decay), gradient clipping at 1.0, clip epsilon
0.2, token-mean loss (TRL ``loss_type="dapo"``), group-std advantages, one optimizer step per
iteration (TRL: ``per_device_train_batch_size`` = prompts x group, ``gradient_accumulation_steps=1``,
``steps_per_generation=1``, ``num_iterations=1``), no gradient checkpointing, no logging, no
checkpoints, the same torch thread count and seed.

Workloads:
    tiny  the embedded tiny model, 32 problems of the held-out arithmetic set x 8 completions of up
          to 8 tokens (the default game's solver batch); bar: cogym / TRL <= 0.3.
    mid   a random-init ~30M-parameter Llama (hidden 512, 8 layers, 8 heads, MLP 1792, the tiny
          model's char tokenizer) built here with a fixed seed and saved to a temporary directory,
          8 problems of 128 prompt tokens (long sums) x 8 completions of up to 32 tokens (it rarely
          ends one early); bar: <= 0.3. It never answers right, so every reward and advantage is 0:
          neither side skips such groups (the work timed is the same), but the weights do not move.

Each workload of ``--workload both`` runs in a fresh process. The defaults (5 timed steps for tiny,
3 for mid, one warm-up each) take about 3 minutes on 2 cores.

    pip install -e ".[bench]"      # TRL
    python benchmarks/grpo_vs_trl.py [--workload tiny|mid|both] [--steps N] [--warmup 1] [--threads 1]
                                     [--engine torch|deepspeed] [--prompts N] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import queue
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

import torch

from cogym.agents.loading import tiny_model_path
from cogym.envs import make
from cogym.envs.datasets import load_problems
from cogym.envs.proposer_solver import solver_reward
from cogym.envs.verifiers import make_verifier
from cogym.runners.train.build import Run, build
from cogym.runners.config.load import load_config
from cogym.runners.rollout.turns import rollout
from cogym.runners.train.iteration import rollout_key

HELDOUT = Path(str(resources.files("cogym.envs").joinpath("data", "arithmetic_heldout.jsonl")))
LR = 5e-5
ROLE = "solver"
INSTALL_HINT = 'TRL is not installed; install the benchmark extra: pip install -e ".[bench]"'


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: int  # distinct problems per iteration
    group: int  # completions per problem
    max_new_tokens: int
    steps: int  # timed iterations per side (default)
    bar: float  # acceptance: cogym s/it / TRL s/it at most this


WORKLOADS = {
    "tiny": Workload("tiny", prompts=32, group=8, max_new_tokens=8, steps=5, bar=0.3),
    "mid": Workload("mid", prompts=8, group=8, max_new_tokens=32, steps=3, bar=0.3),
}
MID_PROMPT_TOKENS = 128
MID_MODEL = dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8,
                 intermediate_size=1792, max_position_embeddings=512)


def require_trl() -> None:
    """Exit with the install command when TRL (the ``bench`` extra) is missing."""
    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit(INSTALL_HINT)


# ------------------------------------------------------------------------------ workload files
def build_mid_model(directory: Path, seed: int = 0) -> Path:
    """A random-init Llama of :data:`MID_MODEL`'s shape (:func:`build_llama`): both sides load these exact
    weights."""
    return build_llama(directory, MID_MODEL, seed)


def build_llama(directory: Path, shape: dict, seed: int = 0) -> Path:
    """A random-init Llama of ``shape`` over the tiny model's char tokenizer (tied embeddings), saved
    (weights, tokenizer, chat template) to ``directory``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny = json.loads((tiny_model_path() / "config.json").read_text())
    cfg = LlamaConfig(vocab_size=tiny["vocab_size"], bos_token_id=tiny["bos_token_id"], eos_token_id=tiny["eos_token_id"],
                      pad_token_id=tiny["pad_token_id"], tie_word_embeddings=True, **shape)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model_path() / name, directory / name)
    return directory


def long_problem(rng: random.Random, index: int, chars: int) -> tuple[str, str]:
    """A problem of exactly ``chars`` characters, a long sum such as ``"Problem 3. Add: 41+7+..."``,
    and its answer."""
    text = f"Problem {index}. Add: {rng.randint(10, 99)}"
    while len(text) + 3 <= chars:
        text += f"+{rng.randint(10, 99)}"
    text += "".join(str(rng.randint(0, 9)) for _ in range(chars - len(text)))  # widen the last term
    return text, str(sum(int(t) for t in text.split(": ", 1)[1].split("+")))


def write_mid_problems(path: Path, n: int, prompt_tokens: int, system: str, seed: int = 0) -> Path:
    """``n`` long problems whose rendered solver prompt is ``prompt_tokens`` tokens (one a character)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path())
    empty = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": ""}],
                                    add_generation_prompt=True, tokenize=True, return_dict=False)
    rng = random.Random(seed)
    rows = [long_problem(rng, i, prompt_tokens - len(empty)) for i in range(n)]
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


# ------------------------------------------------------------------------------ cogym side
def cogym_config(model: str | Path, dataset: Path, w: Workload, engine: str, seed: int):
    """The default config with the solver alone on the dataset game: ``w.prompts`` games of
    ``w.group`` solvers, GRPO at lr 5e-5 on ``engine``, no evaluation."""
    return load_config(None, [
        "seats.proposer=null", "game.kwargs.source=dataset", f"game.kwargs.dataset={dataset}",
        f"game.kwargs.num_solvers={w.group}", "game.kwargs.verifier=exact", f"game.num_games={w.prompts}",
        f"policies.{ROLE}.model={model}", f"policies.{ROLE}.sampling.max_new_tokens={w.max_new_tokens}",
        f"policies.{ROLE}.sampling.temperature=1.0", f"learners.{ROLE}.algorithm=grpo",
        f"learners.{ROLE}.engine={engine}", f"learners.{ROLE}.lr={LR}", "eval.declared=false", f"run.seed={seed}",
    ])


def distinct_seeds(cfg, n: int) -> tuple[list[int], list[tuple[str, str]]]:
    """Reset seeds for ``n`` games posing ``n`` different problems, and those problems (question,
    reference answer), in game order: a dataset game draws its problem from the seed alone."""
    answers = {r.question: r.answer for r in load_problems(cfg.game.kwargs["dataset"])}
    probe = make(cfg.game.id, **cfg.game.kwargs)
    seeds, problems = [], []
    for seed in range(100 * n):
        probe.reset(seed=seed)
        question = probe.observe(f"{ROLE}_0")["text"]
        if question not in (q for q, _ in problems):
            seeds.append(seed)
            problems.append((question, answers[question]))
            if len(seeds) == n:
                return seeds, problems
    raise RuntimeError(f"the dataset {cfg.game.kwargs['dataset']} has fewer than {n} distinct problems")


@dataclass
class StepStats:
    seconds: float
    completions: int
    completion_tokens: int
    reward: float


class CogymSide:
    """cogym's training loop, one iteration per :meth:`step` (see the module docstring). The config
    and the problems come at once; :meth:`build` loads the model and makes the learner."""

    def __init__(self, model: str | Path, dataset: Path, w: Workload, engine: str = "torch", seed: int = 0) -> None:
        self.cfg = cogym_config(model, dataset, w, engine, seed)
        self.seeds, self.problems = distinct_seeds(self.cfg, w.prompts)
        self.system = {role: p.system for role, p in self.cfg.prompts.items()}
        self.iteration = 0
        self.prompt_ids: list[list[int]] = []  # per game: the prompt its solvers were given

    def build(self) -> "CogymSide":
        self.run: Run = build(self.cfg)
        self.policy = self.run.policies[ROLE]
        self.learner = self.run.learners[ROLE]
        return self

    def messages(self, question: str) -> list[dict]:
        """What a solver seat is asked (runners.core.chat_messages): the role's system message, the problem."""
        return [{"role": "system", "content": self.system[ROLE]}, {"role": "user", "content": question}]

    def step(self) -> StepStats:
        self.iteration += 1
        cfg = self.cfg
        t0 = time.perf_counter()
        res = rollout(self.run.games, self.run.seat_map, self.system, self.seeds, episode_prefix=f"it{self.iteration}",
                      group_size=cfg.game.group_size, sampling_key=rollout_key(cfg.run.seed, self.iteration),
                      on_error=cfg.game.on_error)
        self.learner.update(res.turns)
        self.policy.backend.load_weights(None, version=self.learner.steps)
        seconds = time.perf_counter() - t0
        turns = res.turns
        by_game: dict[int, list[int]] = {}
        for t in turns:
            if by_game.setdefault(t.game_index, t.prompt_ids) != t.prompt_ids:
                raise AssertionError(f"game {t.game_index}: its solvers were given different prompts")
        self.prompt_ids = [by_game[g] for g in sorted(by_game)]
        return StepStats(seconds, len(turns), sum(len(t.response_ids) for t in turns),
                         statistics.fmean(t.reward for t in turns))


# ------------------------------------------------------------------------------ TRL side
def exact_match_reward(problems: dict[str, str]) -> Callable:
    """TRL's reward function: the game's own scoring (its ``exact`` verifier, no format bonus) of each
    completion against the reference answer of its problem."""
    verifier = make_verifier("exact")

    def exact_match(prompts, completions, completion_ids, **kwargs) -> list[float]:
        rewards = []
        for prompt, completion in zip(prompts, completions):
            question = prompt[-1]["content"]
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            correct = verifier.judge(question, problems[question], [text])[0]
            rewards.append(solver_reward(correct, text, 0.0))
        exact_match.calls.append((len(completions), sum(len(c) for c in completion_ids), sum(rewards) / len(rewards)))
        return rewards

    exact_match.calls = []
    return exact_match


def trl_config(w: Workload, steps: int, out_dir: Path, seed: int):
    """GRPOConfig of one iteration = one generation batch of all prompts x group = one optimizer step."""
    from trl import GRPOConfig

    batch = w.prompts * w.group
    # TRL turns activation (gradient) checkpointing on by default; transformers >= 5.x renamed the switch
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    no_checkpointing = {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": False}
    return GRPOConfig(
        output_dir=str(out_dir), max_steps=steps, seed=seed, use_cpu=True, bf16=False, fp16=False,
        model_init_kwargs={"dtype": "float32"},
        # one generation batch per optimizer step, used once
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        num_generations=w.group, max_completion_length=w.max_new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0, use_vllm=False,
        # the objective: no KL, clip 0.2, token-mean over the batch, group-std advantages
        beta=0.0, epsilon=0.2, loss_type="dapo", scale_rewards="group",
        # the optimizer: cogym's torch engine is torch.optim.AdamW at a constant lr, clipped at 1.0
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
        **no_checkpointing, report_to="none", logging_strategy="no", save_strategy="no",
        eval_strategy="no", log_completions=False, disable_tqdm=True, dataloader_num_workers=0,
        dataloader_pin_memory=False, shuffle_dataset=False,
    )


class TRLSide:
    """A ``GRPOTrainer`` on the cogym side's problems; :meth:`train` runs it, calling ``between`` after
    each optimizer step (outside TRL's timed span)."""

    def __init__(self, model: str | Path, problems: list[tuple[str, str]], messages: Callable[[str], list[dict]],
                 w: Workload, steps: int, out_dir: Path, seed: int = 0) -> None:
        from datasets import Dataset
        from transformers import AutoTokenizer, PrinterCallback, ProgressCallback
        from trl import GRPOTrainer

        rows = [{"prompt": messages(q), "question": q, "answer": a} for q, a in problems]
        self.reward = exact_match_reward(dict(problems))
        self.trainer = GRPOTrainer(model=str(model), reward_funcs=self.reward, args=trl_config(w, steps, out_dir, seed),
                                   train_dataset=Dataset.from_list(rows),
                                   processing_class=AutoTokenizer.from_pretrained(str(model)))
        for cb in (PrinterCallback, ProgressCallback):
            self.trainer.remove_callback(cb)
        self.rows = rows

    @property
    def distributed(self) -> bool:
        """Whether accelerate set the trainer up as distributed (it does so, one process or not, when
        torch.distributed was started before the trainer was made): its model then trains under DDP."""
        return str(self.trainer.accelerator.distributed_type) not in ("NO", "DistributedType.NO")

    def prompt_ids(self) -> list[list[int]]:
        """The prompt ids TRL generates from, per problem (its own tokenization of the conversation)."""
        ids, _, _ = self.trainer._tokenize_prompts([r["prompt"] for r in self.rows])
        return [list(map(int, p)) for p in ids]

    def train(self, between: Callable[[], None], stats: list[StepStats]) -> list[StepStats]:
        """Run every step, each appended to ``stats`` before ``between`` is called. A step's seconds span
        from the end of the last ``between`` to TRL's ``on_step_end`` (data loading, generation, reward,
        loss, backward, optimizer step)."""
        from transformers import TrainerCallback

        reward = self.reward

        class Alternate(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                self.mark = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                seconds = time.perf_counter() - self.mark
                n, tokens, mean = reward.calls[-1]
                stats.append(StepStats(seconds, n, tokens, mean))
                between()
                self.mark = time.perf_counter()

        self.trainer.add_callback(Alternate())
        self.trainer.train()
        return stats


# ------------------------------------------------------------------------------ one workload
@dataclass
class Result:
    workload: Workload
    cogym: list[StepStats] = field(default_factory=list)
    trl: list[StepStats] = field(default_factory=list)
    warmup: int = 1
    notes: list[str] = field(default_factory=list)

    def timed(self, side: str) -> list[float]:
        return [s.seconds for s in getattr(self, side)[self.warmup:]]

    def median(self, side: str) -> float:
        return statistics.median(self.timed(side))

    @property
    def ratio(self) -> float:
        return self.median("cogym") / self.median("trl")


def prepare(name: str, workdir: Path, seed: int, prompts: int | None = None) -> tuple[Workload, str | Path, Path]:
    """The workload (``prompts`` overrides its problem count), its model and its problem file."""
    w = WORKLOADS[name]
    if prompts:
        w = Workload(w.name, prompts, w.group, w.max_new_tokens, w.steps, w.bar)
    if name == "tiny":
        return w, "tiny", HELDOUT
    system = load_config(None).prompts[ROLE].system
    model = build_mid_model(workdir / "mid_model", seed)
    return w, model, write_mid_problems(workdir / "mid_problems.jsonl", w.prompts, MID_PROMPT_TOKENS, system, seed)


def run_workload(w: Workload, model: str | Path, dataset: Path, steps: int, warmup: int, engine: str, seed: int,
                 threads: int, workdir: Path, log: Callable[[str], None] = print) -> Result:
    """Both sides on one workload, alternating: TRL step, cogym step, ... (``warmup`` + ``steps`` each)."""
    torch.manual_seed(seed)
    cogym = CogymSide(model, dataset, w, engine, seed)
    model_dir = tiny_model_path() if model == "tiny" else model
    # TRL first: cogym's DeepSpeed engine starts a (one-process) torch.distributed group, and a trainer
    # made after that would wrap its model in DistributedDataParallel
    trl = TRLSide(model_dir, cogym.problems, cogym.messages, w, warmup + steps, workdir / f"trl_{w.name}", seed)
    if trl.distributed:
        raise RuntimeError("TRL's trainer is set up as distributed (torch.distributed was already started in this "
                           "process): its model would train under DistributedDataParallel; run one workload a process")
    cogym.build()
    torch.set_num_threads(threads)  # the same for both sides, whatever the trainer's setup did
    expected = [cogym.policy.render(cogym.messages(q)) for q, _ in cogym.problems]
    if trl.prompt_ids() != expected:
        raise AssertionError("TRL tokenizes the prompts differently from cogym; the comparison would be unfair")
    result = Result(w, warmup=warmup)
    params = sum(p.numel() for p in cogym.policy.model.parameters())
    lengths = sorted({len(p) for p in expected})
    result.notes += [f"{w.name}: {params / 1e6:.2f}M parameters; {w.prompts} prompts of {lengths[0]}"
                     f"{f'-{lengths[-1]}' if len(lengths) > 1 else ''} tokens (same ids both sides)",
                     f"  x {w.group} completions of <= {w.max_new_tokens} tokens; {warmup} warm-up + {steps} timed "
                     "steps a side"]
    for line in result.notes:
        log(line)

    def cogym_step() -> None:
        if torch.get_num_threads() != threads:
            raise RuntimeError(f"torch threads changed to {torch.get_num_threads()} (set {threads})")
        s = cogym.step()
        if cogym.prompt_ids != expected:
            raise AssertionError("cogym's solvers were given other prompts than TRL's")
        t = result.trl[-1]
        if s.completions != w.prompts * w.group or t.completions != w.prompts * w.group:
            raise AssertionError(f"{s.completions} cogym and {t.completions} TRL completions, expected "
                                 f"{w.prompts * w.group} each")
        result.cogym.append(s)
        k = len(result.cogym)
        tag = "warm-up" if k <= warmup else f"step {k - warmup}"
        log(f"  {tag:<8} TRL {t.seconds:7.2f}s {t.completion_tokens:5d} tok r={t.reward:.2f}  |  "
            f"cogym {s.seconds:7.2f}s {s.completion_tokens:5d} tok r={s.reward:.2f}")

    trl.train(cogym_step, result.trl)
    if len(result.trl) != len(result.cogym) or len(result.trl) != warmup + steps:
        raise RuntimeError(f"ran {len(result.trl)} TRL and {len(result.cogym)} cogym steps, expected {warmup + steps}")
    return result


def table(results: list[Result]) -> str:
    """The summary, under 80 columns."""
    lines = [f"{'workload':<9}{'batch':>11}{'cogym s/it':>12}{'TRL s/it':>10}{'cogym/TRL':>11}{'bar':>7}{'verdict':>9}",
             "-" * 69]
    for r in results:
        w = r.workload
        ok = "pass" if r.ratio <= w.bar else "FAIL"
        lines.append(f"{w.name:<9}{f'{w.prompts}x{w.group}x{w.max_new_tokens}':>11}{r.median('cogym'):>12.3f}"
                     f"{r.median('trl'):>10.3f}{r.ratio:>11.3f}{f'<={w.bar}':>7}{ok:>9}")
    lines.append("batch: prompts x completions x max new tokens; medians of the timed steps")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="workloads: tiny (32x8, 8 tokens, bar 0.3), mid (~30M params, 8x8, 128+32 "
                                        "tokens, bar 0.3); see the module docstring")
    ap.add_argument("--workload", choices=("tiny", "mid", "both"), default="both")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed iterations per side (default: tiny %d, mid %d)" % (WORKLOADS["tiny"].steps, WORKLOADS["mid"].steps))
    ap.add_argument("--warmup", type=int, default=1, help="iterations per side before timing (default 1)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads, both sides (default 1: a shared 2-core box; try 2 on an idle one)")
    ap.add_argument("--engine", choices=("torch", "deepspeed"), default="torch", help="cogym's training engine")
    ap.add_argument("--prompts", type=int, default=None, help="distinct prompts per iteration (default: the workload's)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.steps is not None and args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--steps and --threads must be >= 1, --warmup >= 0")
    require_trl()
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a CPU benchmark: cogym's policies would take a GPU if they saw one
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers
    import trl

    print(f"cogym GRPO vs TRL {trl.__version__} GRPOTrainer; transformers {transformers.__version__}, "
          f"torch {torch.__version__}\nCPU fp32, {args.threads} torch thread(s), cogym engine {args.engine}, "
          f"seed {args.seed}\nper step: seconds, completion tokens (tok), mean reward (r)", flush=True)
    names = ("tiny", "mid") if args.workload == "both" else (args.workload,)
    if len(names) == 1:
        results = [one_workload(names[0], args)]
    else:  # a fresh process each: nothing (a torch.distributed group, thread pools, memory) carries over
        results = [in_process(name, args) for name in names]
    print()
    print(table(results))


def one_workload(name: str, args: argparse.Namespace) -> Result:
    """Run workload ``name`` in this process with ``args`` (main's options)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", module="(trl|transformers|accelerate|torch|datasets)([.]|$)")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="grpo_vs_trl_") as tmp:
        w, model, dataset = prepare(name, Path(tmp), args.seed, args.prompts)
        return run_workload(w, model, dataset, args.steps or w.steps, args.warmup, args.engine, args.seed, args.threads,
                            Path(tmp), log=lambda line: print(line, flush=True))


def _child(name: str, args: argparse.Namespace, results) -> None:
    results.put(one_workload(name, args))


def in_process(name: str, args: argparse.Namespace) -> Result:
    """:func:`one_workload` in a fresh (spawned) process; its result."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(target=_child, args=(name, args, results), name=f"grpo_vs_trl-{name}")
    child.start()
    result = None
    while result is None:
        try:
            result = results.get(timeout=1.0)
        except queue.Empty:
            if not child.is_alive():
                break
    child.join()
    if result is None:
        sys.exit(f"workload {name} failed (exit code {child.exitcode})")
    return result

if __name__ == "__main__":
    main()
