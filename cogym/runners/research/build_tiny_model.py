"""Build the embedded tiny model: ``cogym build-tiny-model``.

Trains a char-level Llama-style causal LM (about 1M parameters) from scratch on role-formatted
arithmetic: solver examples (the problem as the user message, the answer as the reply) and
proposer examples (a fixed request, a well-formed problem as the reply), rendered with the
model's own chat template and the default config's per-role instructions. Training stops as soon
as greedy accuracy on the fixed 500-problem held-out set enters the target band, so the shipped
model has a deliberately *partial* skill that reinforcement learning can improve. Held-out
problems are never used as training examples.

Runs in a few minutes on 2 CPU cores and writes an HF directory (config.json,
model.safetensors, tokenizer.json, tokenizer_config.json, chat template, build_info.json).

``--verifier`` builds the embedded *weak learned verifier* instead (``tiny-verifier``): a copy of the
tiny model fine-tuned, by cross-entropy on a one-character verdict (``1`` right, ``0`` wrong), to
judge answers the tiny model itself samples, shown as ``generator_verifier-v0`` shows them
(``37+45=82`` under the system prompt ``Verify.``). It is what a reward model trained on the initial
policy's samples is in the papers: it checks a little (its sampled verdict lets 29% of the wrong
answers past and rejects 45% of the right ones; in the game, whose problems include the held-out set's
multiplications that its training leaves out, 42% and 47%), and a generator paid by it alone learns to
please it.

``--reasoner`` builds the embedded *scratchpad solver* (``tiny-reasoner``): the same architecture trained from
scratch to write out its working before the answer (``37+45`` -> ``5+30=35,35+40=75,75+7=82``), each worked
solution taking one of several routes (the order in which the operands' tens and ones are added, how a
product is split), and one step in ten of its training solutions slipping (off by 1 to 10, the working going
on from the slip). Sampled, it slips as a language model at temperature 1 does, at random, so its wrong answers
scatter while its right ones agree: the majority of 8 samples is right far more often than one sample (80.6%
of the held-out problems against 48.4%; greedy 77.4%), as self-consistency is for large models. That is what
label-free majority-vote training (TTRL) needs (docs/claims.md, ttrl). ``--slip 0 --steps 500 --eval-every 100``
builds the first tiny-reasoner, whose errors were its own systematic ones: its vote barely beat its answer,
and label-free training could not gain on it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cogym.agents.char_tokenizer import build_char_tokenizer
from cogym.agents.loading import embedded_model_path, tiny_model_path
from cogym.agents.policy import Policy
from cogym.core import seeding
from cogym.core.types import SamplingParams
from cogym.envs.arithmetic_eval import heldout_accuracy
from cogym.envs.arithmetic import PROPOSER_REQUEST, Domain, Problem, extract_answer, load_heldout
from cogym.envs.verdicts import ACCEPT_DIGIT, REJECT_DIGIT, show_answer
from cogym.envs.verifiers import majority_key, majority_rewards

from cogym.runners.config.load import load_config
from cogym.runners.evaluation.context import PolicyModel


def _tiny_config(tok, hidden: int = 128, layers: int = 4) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256, rms_norm_eps=1e-5,
        tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def _examples(tok, prompts: dict, domain: Domain, rng: np.random.Generator, n: int, banned: set[str],
              proposer_frac: float) -> list[tuple[list[int], list[int]]]:
    out = []
    end = tok.eos_token_id
    while len(out) < n:
        p = domain.sample(rng)
        if p.text in banned:
            continue
        if rng.random() < proposer_frac:
            msgs = [{"role": "system", "content": prompts["proposer"]}, {"role": "user", "content": PROPOSER_REQUEST}]
            reply = p.text
        else:
            msgs = [{"role": "system", "content": prompts["solver"]}, {"role": "user", "content": p.text}]
            reply = str(p.answer)
        prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        out.append((list(prompt), tok.encode(reply, add_special_tokens=False) + [end]))
    return out


def _batch(examples, pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(r) for p, r in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)  # (B, T), right-padded
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    attn = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (p, r) in enumerate(examples):
        seq = p + r
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        labels[i, len(p): len(seq)] = torch.tensor(r)  # loss on the reply only
    return ids, attn, labels


def _require_positive(**values: int) -> None:
    bad = [f"{k}={v!r}" for k, v in values.items() if v < 1]
    if bad:
        raise ValueError(f"{', '.join(bad)}: must be >= 1")


def _train_step(model, opt, sched, examples, pad: int) -> torch.Tensor:
    """One optimizer step of next-token cross-entropy on the replies of ``examples`` (``_batch``), the
    gradient clipped to norm 1; returns the loss."""
    ids, attn, labels = _batch(examples, pad)
    model.train()
    loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss


def build(out_dir: Path, *, seed: int = 0, target_low: float = 0.35, target_high: float = 0.55,
          max_steps: int = 6000, batch_size: int = 128, lr: float = 2e-3, eval_every: int = 100,
          eval_every_close: int = 25,
          hidden: int = 128, layers: int = 4, quiet: bool = False) -> dict:
    seeding.torch_seed("tiny_model.init", seed)
    rng = seeding.rng("tiny_model.data", seed)
    cfg = load_config(None)
    prompts = {role: cfg.prompts[role].system for role in ("proposer", "solver")}
    domain = Domain()
    tok = build_char_tokenizer()
    model = LlamaForCausalLM(_tiny_config(tok, hidden, layers))
    n_params = sum(p.numel() for p in model.parameters())
    policy = Policy(model, tok, name="tiny")
    heldout = load_heldout()
    banned = {r["question"] for r in heldout}
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = 100
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    t0 = time.time()
    acc, step, history = 0.0, 0, []
    for step in range(1, max_steps + 1):
        loss = _train_step(model, opt, sched, _examples(tok, prompts, domain, rng, batch_size, banned, 0.2), tok.pad_token_id)
        # Accuracy rises steeply once the model "gets" carries, so evaluate often near the band.
        if step % (eval_every_close if acc >= 0.1 else eval_every) == 0:
            acc = heldout_accuracy(PolicyModel(policy), heldout, prompts["solver"])
            history.append({"step": step, "loss": float(loss.detach()), "heldout_acc": acc, "t": time.time() - t0})
            if not quiet:
                print(f"step {step:5d} loss {float(loss.detach()):.4f} held-out acc {acc:.3f} ({time.time() - t0:.0f}s)", flush=True)
            if acc >= target_low:
                break
    if not target_low <= acc <= target_high:
        raise RuntimeError(f"tiny model ended at held-out accuracy {acc:.3f}, outside [{target_low}, {target_high}]; "
                           "change --seed or --eval-every and build again")
    proposals = policy.generate([policy.render([{"role": "system", "content": prompts["proposer"]},
                                                {"role": "user", "content": PROPOSER_REQUEST}])] * 200,
                                SamplingParams(max_new_tokens=8, temperature=1.0))
    well_formed = sum(domain.parse(g.text) is not None for g in proposals) / len(proposals)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    policy.save(out_dir)
    info = {"params": n_params, "steps": step, "heldout_greedy_acc": acc, "proposer_well_formed": well_formed,
            "seconds": round(time.time() - t0, 1), "seed": seed, "history": history}
    (Path(out_dir) / "build_info.json").write_text(json.dumps(info, indent=1))
    return info


VERIFIER_SYSTEM = "Verify."  # configs/generator_verifier.yaml's verifier instruction
SOLVER_SYSTEM = "Solve."


def _sampled_answers(policy: Policy, domain: Domain, rng: np.random.Generator, n: int,
                     banned: set[str]) -> list[tuple[str, bool]]:
    """``n`` problems of the domain (none held out), each with one answer ``policy`` samples at temperature
    1: the verifier's view of it (``problem=answer``) and whether it is right."""
    problems = []
    while len(problems) < n:
        p = domain.sample(rng)
        if p.text not in banned:
            problems.append(p)
    prompts = [policy.render([{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": p.text}])
               for p in problems]
    outs = policy.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0))
    return [(show_answer(p.text, o.text), extract_answer(o.text) == p.answer) for p, o in zip(problems, outs)]


def _verdict_ids(tok) -> tuple[int, int]:
    """The token ids of the accepting (``1``) and the rejecting (``0``) verdict."""
    accept, reject = (tok.encode(c, add_special_tokens=False)[0] for c in (ACCEPT_DIGIT, REJECT_DIGIT))
    return accept, reject


def _verdict_probs(verifier: Policy, views: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The verifier's next-character probability of accepting (``1``) and rejecting (``0``) each view."""
    tok = verifier.tokenizer
    accept, reject = _verdict_ids(tok)
    ids = [verifier.render([{"role": "system", "content": VERIFIER_SYSTEM}, {"role": "user", "content": v}]) for v in views]
    width = max(map(len, ids))
    batch = torch.full((len(ids), width), tok.pad_token_id, dtype=torch.long)  # left-padded: the last column is next
    attn = torch.zeros_like(batch)
    for i, row in enumerate(ids):
        batch[i, width - len(row):] = torch.tensor(row)
        attn[i, width - len(row):] = 1
    verifier.model.eval()
    with torch.no_grad():
        logits = verifier.model(input_ids=batch.to(verifier.device), attention_mask=attn.to(verifier.device)).logits
        probs = torch.softmax(logits[:, -1].float(), dim=-1).cpu()
    return probs[:, accept], probs[:, reject]


def verifier_quality(verifier: Policy, test: list[tuple[str, bool]]) -> dict[str, float]:
    """How the verifier judges ``test`` (views with their truth): the share of wrong answers it accepts and
    of right ones it rejects, by its greedy verdict (``1`` against ``0``) and in expectation over its sampled
    verdict (the generator_verifier game samples at temperature 1; the probability of the verdict, so a
    share of an invalid reply counts as neither), and the probability mass on a valid verdict."""
    right = torch.tensor([c for _, c in test])
    if bool(right.all()) or not bool(right.any()):
        raise ValueError("verifier_quality needs right and wrong answers among the test answers")
    p_accept, p_reject = _verdict_probs(verifier, [v for v, _ in test])
    greedy_accept = p_accept > p_reject
    return {"right_share": round(float(right.float().mean()), 4),
            "accepted_wrong_greedy": round(float(greedy_accept[~right].float().mean()), 4),
            "rejected_right_greedy": round(float((~greedy_accept[right]).float().mean()), 4),
            "accepted_wrong_sampled": round(float(p_accept[~right].mean()), 4),
            "rejected_right_sampled": round(float(p_reject[right].mean()), 4),
            "valid_mass": round(float((p_accept + p_reject).mean()), 4)}


def build_verifier(out_dir: Path, *, base: str | Path = "tiny", seed: int = 0, steps: int = 400, batch_size: int = 128,
                   lr: float = 1e-3, test_size: int = 1000, eval_every: int = 50, quiet: bool = False) -> dict:
    """Fine-tune a copy of ``base`` into a verifier of ``base``'s own sampled answers (module docstring):
    ``steps`` steps of ``batch_size`` fresh answers, AdamW at ``lr`` with a cosine decay to 0. Writes the
    model and ``build_info.json`` (its quality on ``test_size`` answers drawn with another seed)."""
    _require_positive(steps=steps, batch_size=batch_size, test_size=test_size, eval_every=eval_every)
    seeding.torch_seed("tiny_model.init", seed)
    rng = seeding.rng("tiny_model.data", seed)
    generator, verifier = Policy.from_pretrained(base, device="cpu"), Policy.from_pretrained(base, device="cpu")
    generator.model.eval()
    tok = verifier.tokenizer
    verdict_ids = dict(zip((True, False), _verdict_ids(tok)))
    domain, banned = Domain(), {r["question"] for r in load_heldout()}
    test = _sampled_answers(generator, domain, seeding.rng("tiny_model.test", seed), test_size, banned)
    before = verifier_quality(verifier, test)
    opt = torch.optim.AdamW(verifier.model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1.0 + float(np.cos(np.pi * min(s, steps) / steps))))
    t0, history = time.time(), []
    for step in range(1, steps + 1):
        examples = []
        for view, right in _sampled_answers(generator, domain, rng, batch_size, banned):
            prompt = verifier.render([{"role": "system", "content": VERIFIER_SYSTEM}, {"role": "user", "content": view}])
            examples.append((list(prompt), [verdict_ids[right]]))
        loss = _train_step(verifier.model, opt, sched, examples, tok.pad_token_id)
        if step % eval_every == 0 or step == steps:
            quality = verifier_quality(verifier, test)
            history.append({"step": step, "loss": round(float(loss.detach()), 4), **quality, "t": round(time.time() - t0, 1)})
            if not quiet:
                print(f"step {step:4d} loss {float(loss.detach()):.4f} accepted wrong {quality['accepted_wrong_sampled']:.3f} "
                      f"rejected right {quality['rejected_right_sampled']:.3f} (sampled verdicts; {time.time() - t0:.0f}s)", flush=True)
    verifier.save(out_dir)
    info = {"base": str(base), "seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr, "before": before,
            "after": history[-1], "seconds": round(time.time() - t0, 1), "history": history}
    (Path(out_dir) / "build_info.json").write_text(json.dumps(info, indent=1))
    return info


# ------------------------------------------------------------------------------ tiny-reasoner
REASONER_MAX_CHARS = 32  # the longest worked solution is 30 characters (+ end of text): max_new_tokens for it
REASONER_STEPS = 1200
REASONER_EVAL_EVERY = 300
REASONER_SLIP = 0.1  # the chance that a step of a training solution slips (``_slip``)


def _parts(n: int) -> list[int]:
    """The nonzero tens and ones of ``|n|``: 47 -> [40, 7], 40 -> [40], 0 -> []."""
    return [x for x in ((abs(n) // 10) * 10, abs(n) % 10) if x]


def _slip(value: int, slip: float, rng: np.random.Generator) -> int:
    """``value``, or with probability ``slip`` a slip of it: off by 1 to 10 either way, drawn uniformly."""
    if slip <= 0 or rng.random() >= slip:
        return value
    off = int(rng.integers(1, 11))
    return value + (off if rng.random() < 0.5 else -off)


def scratchpad(problem: Problem, rng: np.random.Generator, slip: float = 0.0) -> str:
    """A worked solution of ``problem`` along a route drawn from ``rng``; its last number is the answer.

    ``a+b`` and ``a-b`` add up the signed tens and ones of both operands, in a random order, as a running
    sum (``37-45`` -> ``-5+30=25,25+7=32,32-40=-8``): up to 24 routes, each of up to three steps, whose
    steps differ from route to route. ``a*b`` splits one factor, drawn at random, into two parts and adds the
    partial products (``7*8`` -> ``8*3=24,8*4=32,24+32=56``). A product with a factor of 0 or 1, or a sum
    with one nonzero part, is answered at once.

    With ``slip`` > 0 each step's result slips with that chance (``_slip``: off by 1 to 10) and the working goes
    on from the slipped number, as a sampled language model's does: the answer is then wrong, and differently
    wrong from draw to draw. Without a slip the longest solution is 30 characters; a slip can make one as long
    as 34 (2 in 10,000 solutions at slip 0.1), which ``REASONER_MAX_CHARS`` then cuts short: a wrong answer
    either way."""
    a, op, b = problem.a, problem.op, problem.b
    if op == "*":
        if min(a, b) <= 1:
            return str(a * b)
        if rng.random() < 0.5:
            a, b = b, a
        b1 = int(rng.integers(1, b))
        b2 = b - b1
        p1, p2 = _slip(a * b1, slip, rng), _slip(a * b2, slip, rng)
        return f"{a}*{b1}={p1},{a}*{b2}={p2},{p1}+{p2}={_slip(p1 + p2, slip, rng)}"
    sign = 1 if op == "+" else -1
    parts = _parts(a) + [sign * x for x in _parts(b)]
    if not parts:
        return "0"
    parts = [parts[i] for i in rng.permutation(len(parts))]
    total, steps = parts[0], []
    for x in parts[1:]:
        result = _slip(total + x, slip, rng)
        steps.append(f"{total}{'+' if x >= 0 else '-'}{abs(x)}={result}")
        total = result
    return ",".join(steps) if steps else str(total)


def sample_answers(policy: Policy, records: list[dict], *, votes: int, max_new_tokens: int = REASONER_MAX_CHARS,
                   system: str = SOLVER_SYSTEM, temperature: float = 1.0) -> tuple[list, list[list]]:
    """The answer ``policy`` votes for on each of ``records`` (``majority_key``, as the label-free game reads
    it): greedily, and in ``votes`` samples at ``temperature`` (default 1). Returns (greedy keys, one row of
    keys per record)."""
    if votes < 1 or not records:
        raise ValueError(f"sample_answers needs votes >= 1 and records, got votes={votes} and {len(records)} records")
    prompts = [policy.render([{"role": "system", "content": system}, {"role": "user", "content": r["question"]}])
               for r in records]
    greedy = policy.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0))
    sampled = policy.generate([p for p in prompts for _ in range(votes)],
                              SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature))
    keys = [majority_key(o.text) for o in sampled]
    return [majority_key(g.text) for g in greedy], [keys[i * votes:(i + 1) * votes] for i in range(len(records))]


def majority_of(keys: list) -> tuple[object, int]:
    """The majority answer of ``keys`` and its votes, as ``majority_rewards`` picks it (first on ties; a
    blank agrees with nothing): (None, 0) if every key is blank."""
    agreed = majority_rewards(keys)
    votes = sum(agreed)
    return (keys[agreed.index(True)], votes) if votes else (None, 0)


def vote_quality(policy: Policy, records: list[dict], *, votes: int = 8, max_new_tokens: int = REASONER_MAX_CHARS,
                 system: str = SOLVER_SYSTEM) -> dict[str, float]:
    """How often ``policy`` answers ``records`` right: greedily, by one sample at temperature 1 (the mean over
    ``votes`` samples), and by the majority answer of those ``votes`` samples (``majority_of``)."""
    greedy, rows = sample_answers(policy, records, votes=votes, max_new_tokens=max_new_tokens, system=system)
    truth = [int(r["answer"]) for r in records]
    n = len(records)
    return {"greedy": round(sum(g == t for g, t in zip(greedy, truth)) / n, 4),
            "one_sample": round(sum(a == t for row, t in zip(rows, truth) for a in row) / (n * votes), 4),
            f"majority_of_{votes}": round(sum(majority_of(row)[0] == t for row, t in zip(rows, truth)) / n, 4)}


def build_reasoner(out_dir: Path, *, seed: int = 0, steps: int = REASONER_STEPS, batch_size: int = 128, lr: float = 2e-3,
                   eval_every: int = REASONER_EVAL_EVERY, votes: int = 8, slip: float = REASONER_SLIP,
                   quiet: bool = False) -> dict:
    """Train ``tiny-reasoner`` from scratch (module docstring): ``steps`` steps of ``batch_size`` worked
    solutions of fresh problems (none held out) under the solver's instruction, AdamW at ``lr`` after a
    100-step warm-up. It stops at a fixed step, not at an accuracy band, so the build is one deterministic
    path. Each step of a worked solution slips with chance ``slip`` (``scratchpad``). Every ``eval_every`` steps
    and at the end it records ``vote_quality`` on held-out problems (200, then all 500) and writes the model
    and ``build_info.json``."""
    _require_positive(steps=steps, batch_size=batch_size, eval_every=eval_every, votes=votes)
    if not 0.0 <= slip < 0.5:  # at 0.5 a step would be as often wrong as right: nothing left to vote on
        raise ValueError(f"slip must be in [0, 0.5), got {slip}")
    seeding.torch_seed("tiny_model.init", seed)
    rng = seeding.rng("tiny_model.data", seed)
    tok = build_char_tokenizer()
    model = LlamaForCausalLM(_tiny_config(tok))
    policy = Policy(model, tok, name="tiny-reasoner")
    heldout = load_heldout()
    banned = {r["question"] for r in heldout}
    domain = Domain()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
    t0, history = time.time(), []
    for step in range(1, steps + 1):
        examples = []
        while len(examples) < batch_size:
            p = domain.sample(rng)
            if p.text in banned:
                continue
            prompt = policy.render([{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": p.text}])
            examples.append((prompt, tok.encode(scratchpad(p, rng, slip), add_special_tokens=False) + [tok.eos_token_id]))
        loss = _train_step(model, opt, sched, examples, tok.pad_token_id)
        if step % eval_every == 0 and step < steps:
            model.eval()
            quality = vote_quality(policy, heldout[:200], votes=votes)
            history.append({"step": step, "loss": round(float(loss.detach()), 4), **quality, "t": round(time.time() - t0, 1)})
            if not quiet:
                print(f"step {step:4d} loss {float(loss.detach()):.4f} held-out (200): {_quality_line(quality)} "
                      f"({time.time() - t0:.0f}s)", flush=True)
    model.eval()
    final = vote_quality(policy, heldout, votes=votes)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    policy.save(out_dir)
    info = {"params": sum(p.numel() for p in model.parameters()), "seed": seed, "steps": steps,
            "batch_size": batch_size, "lr": lr, "slip": slip, "eval_every": eval_every, "heldout": final,
            "loss": round(float(loss.detach()), 4), "seconds": round(time.time() - t0, 1), "history": history}
    (Path(out_dir) / "build_info.json").write_text(json.dumps(info, indent=1))
    return info


def _quality_line(q: dict[str, float]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in q.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cogym build-tiny-model", description=(
        "Train the embedded tiny model from scratch (agents/tiny); with --verifier fine-tune a copy of it into "
        "the weak learned verifier tiny-verifier (agents/tiny_verifier); with --reasoner train the scratchpad "
        "solver tiny-reasoner from scratch (agents/tiny_reasoner)."))
    ap.add_argument("--out", type=Path, default=None, help="output directory (default: the embedded model's, "
                    "agents/tiny, agents/tiny_verifier or agents/tiny_reasoner)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--verifier", action="store_true",
                       help="build the weak learned verifier (tiny-verifier) from the embedded tiny model instead")
    which.add_argument("--reasoner", action="store_true",
                       help="build the scratchpad solver (tiny-reasoner) from scratch instead")
    ap.add_argument("--steps", type=int, default=None,
                    help="--verifier: fine-tuning steps of 128 answers (default 400); --reasoner: training steps of "
                    f"128 worked solutions (default {REASONER_STEPS})")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--slip", type=float, default=None,
                    help="--reasoner: the chance that a step of a worked solution slips, off by 1 to 10 (default "
                    f"{REASONER_SLIP}; 0: they never slip; the first tiny-reasoner was --slip 0 --steps 500 --eval-every 100)")
    tiny_only = {"target_low": 0.35, "target_high": 0.55, "max_steps": 6000, "eval_every": 100}
    ap.add_argument("--target-low", type=float, default=None, help="stop once greedy held-out accuracy reaches this (default 0.35)")
    ap.add_argument("--target-high", type=float, default=None, help="fail if accuracy overshoots this (default 0.55)")
    ap.add_argument("--max-steps", type=int, default=None, help="most training steps (default 6000)")
    ap.add_argument("--eval-every", type=int, default=None, help="steps between held-out evaluations (default 100; --reasoner "
                    f"{REASONER_EVAL_EVERY})")
    args = ap.parse_args(argv)
    if args.verifier or args.reasoner:
        flag = "--verifier" if args.verifier else "--reasoner"
        given = [f"--{k.replace('_', '-')}" for k in tiny_only if getattr(args, k) is not None and
                 not (args.reasoner and k == "eval_every")]
        if given:
            ap.error(f"{', '.join(given)}: options of the tiny model's build, not of {flag}")
        if args.steps is not None and args.steps < 1:
            ap.error(f"--steps must be >= 1, got {args.steps}")
        if args.eval_every is not None and args.eval_every < 1:
            ap.error(f"--eval-every must be >= 1, got {args.eval_every}")
    if args.slip is not None and not args.reasoner:
        ap.error("--slip: an option of --reasoner")
    if args.slip is not None and not 0.0 <= args.slip < 0.5:
        ap.error(f"--slip must be in [0, 0.5), got {args.slip}")
    if args.reasoner:
        out = args.out or embedded_model_path("tiny-reasoner")
        info = build_reasoner(out, seed=args.seed, steps=REASONER_STEPS if args.steps is None else args.steps,
                              eval_every=REASONER_EVAL_EVERY if args.eval_every is None else args.eval_every,
                              slip=REASONER_SLIP if args.slip is None else args.slip)
        print(f"wrote {out}: held-out (500 problems): {_quality_line(info['heldout'])}; {info['seconds']}s")
        return 0
    if args.verifier:
        out = args.out or embedded_model_path("tiny-verifier")
        info = build_verifier(out, seed=args.seed, steps=400 if args.steps is None else args.steps)
        after = info["after"]
        print(f"wrote {out}: verdicts on fresh answers of the tiny model, sampled: accepts "
              f"{after['accepted_wrong_sampled']:.3f} of the wrong ones, rejects {after['rejected_right_sampled']:.3f} "
              f"of the right ones; {info['seconds']}s")
        return 0
    if args.steps is not None:
        ap.error("--steps: an option of --verifier and --reasoner (the tiny model's build stops at its target, "
                 "--max-steps at most)")
    for k, default in tiny_only.items():
        setattr(args, k, default if getattr(args, k) is None else getattr(args, k))
    args.out = args.out or tiny_model_path()
    info = build(args.out, seed=args.seed, target_low=args.target_low, target_high=args.target_high,
                 max_steps=args.max_steps, eval_every=args.eval_every)
    print(f"wrote {args.out}: {info['params']:,} parameters, held-out greedy accuracy {info['heldout_greedy_acc']:.3f}, "
          f"proposer well-formed {info['proposer_well_formed']:.2f}, {info['seconds']}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
