"""Benchmark: cogym's batched rollout against a bare ``model.generate`` on the same work.

For each repeat, one rollout of the default game (the default config's 32 games of
proposer_solver-v0, 8 solvers each, the embedded tiny model at both seats) is timed end to end: game resets, prompt
rendering, batched generation, behaviour log-probabilities, game steps and Turn records. Then
the exact prompts the rollout generated for are replayed through a bare ``model.generate`` call
per batch, with the same batch sizes, sampling settings and left padding. Both sides count
generated tokens (up to and including the end token). The script prints tokens/s of each and
their ratio (rollout / bare); the acceptance bar is a ratio of at least 0.9. The bare baseline
prefills every prompt of a batch, as a plain ``generate`` call does; the rollout's backend prefills
each distinct prompt once (the 8 solvers of a problem share one), which is part of what is measured.
``--bare-shared`` gives the bare baseline the same shared prefill, so that the ratio measures only
what the rollout adds around generation (games, prompts, sampling keys, log-probs, Turns).

    python benchmarks/rollout_vs_generate.py [--repeats 15] [--games N] [--bare-shared]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cogym.agents.backends import shared_prefill
from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.core.types import Action, Request
from cogym.envs import make
from cogym.runners.config.load import load_config
from cogym.runners.rollout.turns import rollout


class RecordingAgent(LLMAgent):
    """An LLMAgent that remembers each batch of prompt ids it generated for."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[list[list[int]]] = []

    def act(self, requests: list[Request]) -> list[Action]:
        actions = super().act(requests)
        self.batches.append([a.prompt_ids for a in actions])
        return actions


@torch.no_grad()
def bare_generate(policy: Policy, prompts: list[list[int]], sampling: SamplingParams, shared: bool = False) -> int:
    """One plain HF generate call on left-padded prompts; returns generated tokens up to eos.
    ``shared``: start it from :func:`~cogym.agents.backends.shared_prefill`'s cache, as the backend does."""
    tok = policy.tokenizer
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    extra = shared_prefill(policy.model, ids, attn) if shared else {}
    out = policy.model.generate(input_ids=ids, attention_mask=attn, **extra, do_sample=True, temperature=sampling.temperature,
                                top_p=sampling.top_p, top_k=sampling.top_k,
                                max_new_tokens=sampling.max_new_tokens, pad_token_id=tok.pad_token_id,
                                eos_token_id=tok.eos_token_id)
    new = out[:, width:]
    ended = (new == tok.eos_token_id).int()
    # tokens up to and including the first eos (all of them if none)
    first = torch.where(ended.any(1), ended.argmax(1) + 1, torch.full((len(prompts),), new.shape[1]))
    return int(first.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--games", type=int, default=None, help="games per rollout (default: the default config's)")
    ap.add_argument("--bare-shared", action="store_true",
                    help="give the bare baseline the backend's shared prefill too (the ratio then measures overhead only)")
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = load_config(None)
    policy = Policy.from_pretrained("tiny")
    sampling = cfg.policies["solver"].sampling
    agent = RecordingAgent(policy, sampling)
    games = [make(cfg.game.id, **cfg.game.kwargs) for _ in range(args.games or cfg.game.num_games)]
    system = {role: p.system for role, p in cfg.prompts.items()}
    ratios, r_tps, b_tps = [], [], []
    for rep in range(args.repeats + 1):  # the first repeat warms up and is not counted
        agent.batches.clear()
        t0 = time.perf_counter()
        res = rollout(games, lambda seat, role: (role, agent), system, [rep * 1000 + g for g in range(len(games))])
        t_roll = time.perf_counter() - t0
        tokens = sum(len(t.response_ids) for t in res.turns)
        t0 = time.perf_counter()
        bare_tokens = sum(bare_generate(policy, batch, sampling, args.bare_shared) for batch in agent.batches)
        t_bare = time.perf_counter() - t0
        if rep == 0:
            continue
        r_tps.append(tokens / t_roll)
        b_tps.append(bare_tokens / t_bare)
        ratios.append(r_tps[-1] / b_tps[-1])
        print(f"repeat {rep}: rollout {tokens} tokens in {t_roll:.3f}s = {r_tps[-1]:.0f} tok/s | "
              f"bare generate {bare_tokens} tokens in {t_bare:.3f}s = {b_tps[-1]:.0f} tok/s | "
              f"ratio {ratios[-1]:.2f} | batches {[len(b) for b in agent.batches]}")
    print(f"median over {args.repeats} repeats: rollout {statistics.median(r_tps):.0f} tok/s, "
          f"bare generate {statistics.median(b_tps):.0f} tok/s, ratio rollout/bare = {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
