"""The training forward without full-vocabulary logits (learners/batch.py): the output layer runs only
at the response positions, a chunk at a time, and micro-batches are sized by padded tokens."""

from __future__ import annotations

import pytest
import torch

from cogym.core.types import Turn
from cogym.learners import batch as batch_mod
from cogym.learners.batch import (TokenBatch, micro_batches, pack_rows, response_logp, response_logp_entropy)
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner
from cogym.learners.losses import entropy_from_logits


def _turns(policy, n: int = 5, seed: int = 0) -> list[Turn]:
    """``n`` turns of different prompt and response lengths, with log-probs from the policy itself."""
    g = torch.Generator().manual_seed(seed)
    vocab = min(len(policy.tokenizer), policy.model.config.vocab_size)
    turns = []
    for i in range(n):
        p, r = 3 + i, 2 + (i * 3) % 5
        ids = torch.randint(4, vocab, (p + r,), generator=g).tolist()
        turns.append(Turn(game_index=i, episode_id=f"e{i}", seat="solver_0", role="solver", policy_id="p",
                          prompt_ids=ids[:p], response_ids=ids[p:], logprobs=[0.0] * r, text="", finished=True,
                          reward=float(i % 2), group_key=i // 2))
    return turns


def _full_reference(model, b: TokenBatch, temperature: float):
    """Log-probs and entropies from the full (N, W, V) logits, the way the training forward used to."""
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    idx = b.resp_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    z = logits.gather(1, idx).float() / temperature
    logp = torch.log_softmax(z, dim=-1).gather(-1, b.resp_ids.unsqueeze(-1)).squeeze(-1)
    return logp * b.mask, entropy_from_logits(z) * b.mask


@pytest.mark.parametrize("chunk_elements", [None, 1])
def test_chunked_logp_entropy_and_gradients_equal_the_full_logits(any_policy, monkeypatch, chunk_elements):
    """Chunks of one token (chunk_elements=1) or the default: the same log-probs, entropies and gradients."""
    if chunk_elements is not None:
        monkeypatch.setattr(batch_mod, "HEAD_CHUNK_ELEMENTS", chunk_elements)
    model = any_policy.model.eval()
    b = TokenBatch.from_turns(_turns(any_policy), any_policy.tokenizer.pad_token_id)
    weights = torch.linspace(-1.0, 2.0, b.mask.numel()).view_as(b.mask)

    ref_logp, ref_ent = _full_reference(model, b, 0.7)
    ((ref_logp * weights).sum() + ref_ent.sum()).backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    logp, ent = response_logp_entropy(model, b, 0.7)
    ((logp * weights).sum() + ent.sum()).backward()
    assert torch.allclose(logp, ref_logp, atol=2e-5)
    assert torch.allclose(ent, ref_ent, atol=2e-5)
    assert bool((logp[b.mask == 0] == 0).all()) and bool((logp[b.mask == 1] < 0).all())
    for name, p in model.named_parameters():  # float32 sums in another order: relative to the gradient's norm
        err = float((p.grad - ref_grads[name]).norm() / ref_grads[name].norm().clamp(min=1e-12))
        assert err < 1e-5, (name, err)
    assert torch.allclose(response_logp(model, b, 0.7), logp)


def test_output_layer_sees_only_response_positions_in_chunks(qwen_policy, monkeypatch):
    """On a 151,936-row vocabulary the head runs at the K response positions, in chunks of at most
    HEAD_CHUNK_ELEMENTS / V tokens (plus the model's own call at one position per row)."""
    vocab = qwen_policy.model.config.vocab_size
    monkeypatch.setattr(batch_mod, "HEAD_CHUNK_ELEMENTS", 4 * vocab)  # 4 tokens a chunk
    b = TokenBatch.from_turns(_turns(qwen_policy, n=4), qwen_policy.tokenizer.pad_token_id)
    rows_seen: list[int] = []
    hook = qwen_policy.model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _o: rows_seen.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))
    try:
        response_logp(qwen_policy.model, b, packing="off").sum().backward()  # the plain layout's calls
    finally:
        hook.remove()
    k = int(b.mask.sum())
    chunks = -(-k // 4)
    assert rows_seen[0] == b.mask.shape[0]  # logits_to_keep=1: one position a row
    # the chunks in the forward, then each recomputed once in the backward
    assert sorted(rows_seen[1:]) == sorted([4] * (k // 4) * 2 + ([k % 4] * 2 if k % 4 else []))
    assert len(rows_seen[1:]) == 2 * chunks
    assert max(rows_seen) * vocab < b.mask.numel() * vocab  # never (N, L, V)


def test_a_model_without_logits_to_keep_falls_back_to_full_logits(policy):
    """A model whose forward takes no logits_to_keep (a user's wrapper) is scored from its full logits."""

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask)

    b = TokenBatch.from_turns(_turns(policy), policy.tokenizer.pad_token_id)
    assert batch_mod._decoder_and_head(Wrapper(policy.model)) is None
    assert batch_mod._decoder_and_head(policy.model) is not None
    assert torch.allclose(response_logp(Wrapper(policy.model), b), response_logp(policy.model, b), atol=1e-6)


def test_pack_rows_respects_rows_and_padded_tokens():
    widths = [5, 9, 3, 20, 4, 4, 4, 2]
    runs = pack_rows(widths, max_rows=3, max_tokens=18)
    assert [i for run in runs for i in run] == list(range(len(widths)))  # consecutive, every row once
    for run in runs:
        assert len(run) <= 3
        assert len(run) == 1 or len(run) * max(widths[i] for i in run) <= 18
    assert [20] in [[widths[i] for i in run] for run in runs]  # wider than the limit: alone
    assert pack_rows(widths, max_rows=100, max_tokens=None) == [list(range(8))]
    assert pack_rows(widths, max_rows=2) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_micro_batches_give_every_rank_the_same_count():
    widths = [30, 2, 2, 2, 2, 2, 2]  # rank 0's wide first row forces an extra micro-batch
    per_rank = [micro_batches(widths, 4, 20, rank=r, world=2) for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1])
    got = sorted(i for chunks in per_rank for c in chunks for i in c.tolist())
    assert got == list(range(len(widths)))
    assert all(c.dtype == torch.long for chunks in per_rank for c in chunks)
    assert [c.tolist() for c in per_rank[0]] == [[0], [2, 4, 6]]
    assert [c.tolist() for c in per_rank[1]] == [[1, 3, 5], []]


def test_token_sized_micro_batches_do_not_change_the_update(tiny_model_dir):
    """max_tokens_per_micro_batch changes how many forwards a step takes, not the step."""
    from cogym.agents.policy import Policy

    results = []
    for max_tokens in (None, 24):
        policy = Policy.from_pretrained(tiny_model_dir)
        turns = _turns(policy, n=6)
        b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
        with torch.no_grad():
            logp = response_logp(policy.model.eval(), b)
        for t, row, m in zip(turns, logp, b.mask):
            t.logprobs = row[m.bool()].tolist()
        cfg = LearnerConfig.from_flat(engine="torch", lr=1e-2, micro_batch_size=256, max_tokens_per_micro_batch=max_tokens)
        learner = Learner(policy, cfg)
        calls, grads = [], []
        hook = policy.model.register_forward_hook(lambda _m, args, kw, _o: calls.append(1), with_kwargs=True)
        step = learner.engine.optimizer.step
        learner.engine.optimizer.step = lambda: (grads.extend(p.grad.clone() for p in policy.model.parameters()), step())
        metrics = learner.update(turns)
        hook.remove()
        results.append((len(calls), metrics, grads))
    (calls_whole, m_whole, g_whole), (calls_split, m_split, g_split) = results
    assert calls_whole == 1 and calls_split > 2
    assert m_split["loss"] == pytest.approx(m_whole["loss"], abs=1e-6)
    assert m_split["grad_norm"] == pytest.approx(m_whole["grad_norm"], rel=1e-5)
    assert len(g_whole) == len(g_split) > 0
    for a, c in zip(g_whole, g_split):  # the step's gradient, summed over micro-batches in another order
        assert float((a - c).norm()) <= 1e-5 * float(a.norm()) + 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [2, 3])
def test_deepspeed_zero_takes_the_torch_step_through_recomputed_head_chunks(tiny_model_dir, monkeypatch, zero_stage):
    """Chunks of 2 tokens, each recomputed in the backward: ZeRO-2 and ZeRO-3 (parameters gathered by their
    module hooks at every head call) end at the torch engine's weights."""
    from cogym.agents.policy import Policy

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    vocab = Policy.from_pretrained(tiny_model_dir).model.config.vocab_size
    monkeypatch.setattr(batch_mod, "HEAD_CHUNK_ELEMENTS", 2 * vocab)
    after, norms = {}, {}
    for engine in ("torch", "deepspeed"):
        policy = Policy.from_pretrained(tiny_model_dir)
        turns = _turns(policy, n=6)
        b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
        with torch.no_grad():
            logp = response_logp(policy.model, b)
        for t, row, m in zip(turns, logp, b.mask):
            t.logprobs = row[m.bool()].tolist()
        learner = Learner(policy, LearnerConfig.from_flat(engine=engine, zero_stage=zero_stage, lr=1e-3,
                                                          max_grad_norm=100.0, micro_batch_size=3))
        norms[engine] = learner.update(turns)["grad_norm"]
        with learner.engine.gathered_params():
            after[engine] = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
    assert norms["deepspeed"] == pytest.approx(norms["torch"], rel=1e-5)
    # Adam's first step is about lr * sign(g): a gradient entry at float-noise size may flip (lr is 1e-3)
    for name, value in after["deepspeed"].items():
        torch.testing.assert_close(value, after["torch"][name], atol=5e-5, rtol=0)


def test_a_lora_view_is_scored_through_its_adapter_with_the_chunked_head(tiny_model_dir, monkeypatch):
    """A LoRA policy (and its base view, the KL reference) take the chunked path, with the right adapter
    active for the head as well: lm_head is adapted here, so a wrong adapter would change the log-probs."""
    pytest.importorskip("peft", reason="LoRA needs the peft package (the test extra installs it)")
    from cogym.agents.lora import LoraBase, LoraConfig
    from cogym.agents.policy import Policy

    monkeypatch.setattr(batch_mod, "HEAD_CHUNK_ELEMENTS", 3 * 200)  # a few tokens a chunk
    base = LoraBase(tiny_model_dir)
    alice = Policy.from_adapter(base, "alice", LoraConfig(r=4, target_modules=["q_proj", "lm_head"]))
    bob = Policy.from_adapter(base, "bob", LoraConfig(r=4, target_modules=["q_proj", "lm_head"]))
    with torch.no_grad():  # adapters start at zero: give them weights so that each view differs
        for name, p in base.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5 if ".alice" in name else 0.2)
    reference = base.base_view()
    b = TokenBatch.from_turns(_turns(alice), alice.tokenizer.pad_token_id)
    for view in (alice.model, bob.model, reference):
        assert batch_mod._decoder_and_head(view) is not None
    with torch.no_grad():
        got = {name: response_logp(view, b) for name, view in
               (("alice", alice.model), ("bob", bob.model), ("base", reference))}
        want = {name: _full_reference(view, b, 1.0)[0] for name, view in
                (("alice", alice.model), ("bob", bob.model), ("base", reference))}
    for name in got:
        assert torch.allclose(got[name], want[name], atol=2e-5), name
    assert not torch.allclose(got["alice"], got["bob"], atol=1e-3)
    assert not torch.allclose(got["alice"], got["base"], atol=1e-3)
