"""``cogym eval``: evaluate a model."""

from __future__ import annotations

import argparse

from cogym.agents.policy import Policy
from cogym.envs.arithmetic import load_heldout
from cogym.runners.cli.args import nonnegative_float, positive_int
from cogym.runners.config.load import load_config
from cogym.runners.evaluation.evaluators import HeldoutArithmetic

DESCRIPTION = "Greedy solver accuracy of a model on the 500-problem held-out set (and pass@1 with --temperature)."


def add_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("--model", default="tiny",
                   help="HF model directory, a Hub id in the local cache, or 'tiny' (default)")
    e.add_argument("--config", default=None, help="config whose solver prompt to use (default: shipped)")
    e.add_argument("--size", type=positive_int, default=500, help="how many held-out problems (1-500)")
    e.add_argument("--max-new-tokens", type=positive_int, default=None, metavar="N",
                   help="longest answer read (default: the config's eval.max_new_tokens, 8 in the shipped one; "
                   "tiny-reasoner writes out its working and needs 32)")
    e.add_argument("--temperature", type=nonnegative_float, default=None, metavar="T",
                   help="above 0, also pass@1: the mean accuracy of --samples answers a problem sampled at this "
                   "temperature (default: the config's eval.temperature, 0 in the shipped one: greedy only)")
    e.add_argument("--samples", type=positive_int, default=None, metavar="K",
                   help="answers a problem for pass@1 (default: the config's eval.samples, 4)")
    e.add_argument("--seed", type=int, default=None,
                   help="torch seed of the sampled answers (default: the training evaluator's, so a run's "
                   "heldout_sampled_acc is reproduced)")
    e.add_argument("--batch-size", type=positive_int, default=500,
                   help="prompts per generate call (default 500; lower it for a real model's memory)")
    e.add_argument("--dtype", default="float32", choices=["float32", "fp32", "bfloat16", "bf16", "float16", "fp16"],
                   help="dtype the model runs in (default float32)")
    e.add_argument("--attn-implementation", default=None, metavar="KERNEL",
                   help="transformers' attention kernel, e.g. sdpa or eager (default: transformers' choice)")


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    policy = Policy.from_pretrained(args.model, dtype=args.dtype, attn_implementation=args.attn_implementation)
    n = len(load_heldout()[: args.size])
    # The training evaluator, with the config's settings and draws unless a flag says otherwise: its pass@1 is
    # the run's heldout_sampled_acc.
    ev = HeldoutArithmetic(size=args.size, max_new_tokens=args.max_new_tokens or cfg.eval.max_new_tokens,
                           batch_size=args.batch_size,
                           temperature=cfg.eval.temperature if args.temperature is None else args.temperature,
                           samples=args.samples or cfg.eval.samples,
                           **({} if args.seed is None else {"seed": args.seed}))
    acc = ev.accuracies(policy, cfg.prompts["solver"].system if "solver" in cfg.prompts else "")
    print(f"held-out greedy accuracy of {args.model}: {acc['heldout_acc']:.3f} on {n} problems")
    if "heldout_sampled_acc" in acc:
        print(f"held-out pass@1 of {args.model} at temperature {ev.temperature:g}: {acc['heldout_sampled_acc']:.3f} "
              f"({ev.samples} samples of each of {n} problems)")
    return 0
