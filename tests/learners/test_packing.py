"""Packed training forwards (learners/packing.py): rows laid end to end, the rows of a group reading one
copy of their shared prompt. Log-probs, losses and gradients must equal the plain right-padded forward's,
on the embedded tiny model and on a random-init Llama with its own multi-head attention and RoPE."""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cogym.core.types import Turn
from cogym.learners import packing as packing_mod
from cogym.learners.batch import TokenBatch, _packed_layout, response_logp, response_logp_entropy, training_forward
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner
from cogym.learners.objective import ObjectiveConfig, objective


def _turn(prompt: list[int], response: list[int], group) -> Turn:
    return Turn(game_index=0, episode_id="e", seat="solver_0", role="solver", policy_id="p", prompt_ids=prompt,
                response_ids=response, logprobs=[-1.0] * len(response), text="", finished=True,
                reward=float(len(response) % 2), group_key=group)


def _group_turns(vocab: int, groups: int = 6, size: int = 4, singles: int = 3, seed: int = 0) -> list[Turn]:
    """``groups`` groups of ``size`` rows sharing a prompt (responses of different lengths), then ``singles``
    rows that share their prompt with nobody."""
    rng = random.Random(seed)
    turns = []
    for g in range(groups):
        prompt = [rng.randrange(4, vocab) for _ in range(rng.randint(5, 20))]
        for _ in range(size):
            turns.append(_turn(prompt, [rng.randrange(4, vocab) for _ in range(rng.randint(1, 9))], g))
    for s in range(singles):
        turns.append(_turn([rng.randrange(4, vocab) for _ in range(rng.randint(2, 30))],
                           [rng.randrange(4, vocab) for _ in range(rng.randint(1, 12))], 100 + s))
    return turns


def _random_llama(kv_heads: int = 8) -> torch.nn.Module:
    """A random-init Llama unlike the tiny one: 8 heads of 16, RoPE theta 500, ``kv_heads`` key/value heads."""
    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=103, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=kv_heads, head_dim=16, max_position_embeddings=512,
                         rope_theta=500.0, pad_token_id=0, tie_word_embeddings=False, attn_implementation="sdpa")
    return LlamaForCausalLM(config).eval()


def _scores_and_grads(model: torch.nn.Module, b: TokenBatch, packing: str, entropy: bool = False):
    """(logp, entropy, GRPO-style loss, {param: grad}) of one forward and backward in ``packing`` mode."""
    model.zero_grad()
    with training_forward(model):
        if entropy:
            logp, ent = response_logp_entropy(model, b, 0.8, packing=packing)
        else:
            logp, ent = response_logp(model, b, 0.8, packing=packing), None
    adv = torch.linspace(-1.0, 1.0, b.mask.shape[0])[:, None].expand_as(b.mask)
    loss, _ = objective(logp, b.logp_old, adv, b.mask, ObjectiveConfig(entropy_coef=0.01 if entropy else 0.0),
                        num_tokens=float(b.mask.sum()), num_seqs=float(b.mask.shape[0]), entropy=ent)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), None if ent is None else ent.detach(), float(loss.detach()), grads


def _assert_same(model, b: TokenBatch, entropy: bool = False) -> None:
    plain = _scores_and_grads(model, b, "off", entropy)
    packed = _scores_and_grads(model, b, "on", entropy)
    assert torch.allclose(packed[0], plain[0], atol=2e-5), float((packed[0] - plain[0]).abs().max())
    assert bool((packed[0][b.mask == 0] == 0).all())
    if entropy:
        assert torch.allclose(packed[1], plain[1], atol=2e-5)
    assert packed[2] == pytest.approx(plain[2], abs=1e-6)
    assert plain[3].keys() == packed[3].keys() and plain[3]
    for name, g in plain[3].items():  # float32 sums in another order: relative to the gradient's norm
        err = float((packed[3][name] - g).norm() / g.norm().clamp(min=1e-12))
        assert err < 1e-5, (name, err)


def test_shared_prefix_forward_equals_the_plain_forward_on_the_tiny_model(policy):
    b = TokenBatch.from_turns(_group_turns(policy.model.config.vocab_size), policy.tokenizer.pad_token_id)
    layout = _packed_layout(policy.model, b, "on")
    assert layout.shared_rows == 24  # the 6 groups of 4 read one prompt copy each
    # fewer ids fed than the plain forward's padded rows, each group's prompt once
    assert layout.input_ids.numel() < b.input_ids.numel()
    _assert_same(policy.model, b, entropy=True)


@pytest.mark.parametrize("kv_heads", [8, 2], ids=["mha", "gqa"])
def test_shared_prefix_forward_equals_the_plain_forward_on_a_random_llama_with_rope(kv_heads):
    model = _random_llama(kv_heads)
    b = TokenBatch.from_turns(_group_turns(103, groups=5, size=5, singles=4, seed=1), 0)
    _assert_same(model, b)


def test_padding_free_packing_without_shared_prompts_equals_the_plain_forward(policy):
    """No two rows share a prompt: the packed layout only removes padding (short rows share a packed row)."""
    rng = random.Random(2)
    turns = [_turn([rng.randrange(4, 100) for _ in range(rng.randint(2, 40))],
                   [rng.randrange(4, 100) for _ in range(rng.randint(1, 10))], i) for i in range(12)]
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    layout = _packed_layout(policy.model, b, "on")
    assert layout.shared_rows == 0 and layout.input_ids.shape[0] < len(turns)
    _assert_same(policy.model, b)
    _assert_same(_random_llama(), b)


def test_a_response_sees_its_prompt_and_itself_but_no_other_response_of_its_group(policy):
    """Changing one row's response changes no other row's log-probs (their prompt copy is shared)."""
    turns = _group_turns(100, groups=2, size=4, singles=0, seed=4)
    b1 = TokenBatch.from_turns(turns, 0)
    changed = list(turns)
    changed[1] = _turn(turns[1].prompt_ids, [7] * len(turns[1].response_ids), turns[1].group_key)
    b2 = TokenBatch.from_turns(changed, 0)
    with torch.no_grad():
        a, c = response_logp(policy.model, b1, packing="on"), response_logp(policy.model, b2, packing="on")
    others = [i for i in range(len(turns)) if i != 1]
    assert torch.allclose(a[others], c[others], atol=1e-6)
    assert not torch.allclose(a[1], c[1])


def test_the_layout_keeps_every_token_at_its_own_position():
    prompts = [[5, 6, 7], [5, 6, 7], [9, 9]]
    responses = [[10, 11], [12], [13, 14, 15]]
    layout = packing_mod.plan(prompts, responses, hidden=64, force=True)
    ids, pos = layout.input_ids, layout.position_ids
    for i, (p, r) in enumerate(zip(prompts, responses)):
        for c in range(len(r)):  # the slot that predicts response token c holds the token before it
            row, col = int(layout.score_row[i, c]), int(layout.score_col[i, c])
            before = (p + r)[len(p) - 1 + c]
            assert int(ids[row, col]) == before and int(pos[row, col]) == len(p) - 1 + c
    assert int((ids == 5).sum()) == 1  # the shared prompt once


def test_plan_keeps_the_plain_forward_when_packing_saves_nothing():
    """One row, or rows of one width sharing nothing: nothing to gain, so no layout."""
    assert packing_mod.plan([[4, 5, 6]], [[7, 8]], hidden=128) is None
    assert packing_mod.plan([[4, 5, i] for i in range(4)], [[7, 8]] * 4, hidden=128) is None
    assert packing_mod.plan([[4] * 3000], [[7]], hidden=128) is None  # wider than a packed row may be
    assert packing_mod.plan([[4, 5, 6]] * 8, [[7, 8]] * 8, hidden=128) is not None


def test_auto_packing_falls_back_to_plain_with_a_warning_when_the_check_disagrees(policy, monkeypatch):
    """The one-time check compares packed and plain log-probs: a disagreement (forced here by a
    negative tolerance) warns once and leaves that model on the plain forward."""
    model = _random_llama()
    monkeypatch.setattr(packing_mod, "tolerance", lambda dtype: -1.0)
    b = TokenBatch.from_turns(_group_turns(103), 0)
    with pytest.warns(RuntimeWarning, match="packed training forward disagrees"):
        first = response_logp(model, b, packing="auto")
    assert packing_mod.checked(model) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = response_logp(model, b, packing="auto")
    plain = response_logp(model, b, packing="off")
    assert torch.equal(first, plain) and torch.equal(again, plain)


def test_auto_packing_checks_at_a_models_first_call_whatever_its_batch():
    """The check scores its own fixed batch at the first call, even one whose batch is never packed
    (every data-parallel rank then runs the same forwards), and only once."""
    model = _random_llama()
    one_row = TokenBatch.from_turns(_group_turns(100, groups=0, singles=1), 0)
    assert packing_mod.checked(model) is None and _packed_layout(model, one_row, "auto") is None
    seen: list[int] = []
    hook = model.model.register_forward_hook(lambda *_: seen.append(1))
    try:
        response_logp(model, one_row, packing="auto")
        assert packing_mod.checked(model) is True and len(seen) == 3  # plain + packed check, then the call
        response_logp(model, one_row, packing="auto")
        assert len(seen) == 4
    finally:
        hook.remove()
    assert _packed_layout(model, TokenBatch.from_turns(_group_turns(100), 0), "auto") is not None


def test_models_that_cannot_take_a_packed_layout_are_named():
    from types import SimpleNamespace

    def why(**config):
        return packing_mod.model_allows(SimpleNamespace(config=SimpleNamespace(**config),
                                                        forward=lambda input_ids, position_ids=None: None))

    assert why(_attn_implementation="sdpa") is None
    assert "flash_attention_2" in why(_attn_implementation="flash_attention_2")
    assert "sliding" in why(_attn_implementation="sdpa", sliding_window=4096)
    assert "full attention" in why(_attn_implementation="sdpa", layer_types=["full_attention", "sliding_attention"])
    # a multimodal model: its top-level config is silent, its text config has the window
    windowed = SimpleNamespace(sliding_window=512, layer_types=["sliding_attention", "full_attention"])
    assert "sliding" in why(_attn_implementation="sdpa", get_text_config=lambda: windowed)


def test_packing_on_refuses_a_model_without_4d_masks(policy, monkeypatch):
    b = TokenBatch.from_turns(_group_turns(100), 0)
    monkeypatch.setattr(packing_mod, "model_allows", lambda base: "its attention takes no 4-D mask")
    with pytest.raises(ValueError, match="packing: on.*no 4-D mask"):
        response_logp(policy.model, b, packing="on")
    assert response_logp(policy.model, b, packing="auto").shape == b.mask.shape  # auto: plain, silently


def test_packing_is_a_validated_learner_key():
    assert LearnerConfig().packing == "auto"
    with pytest.raises(ValueError, match="packing must be one of auto, on, off"):
        LearnerConfig(packing="yes").validate()


def test_a_learner_update_is_the_same_packed_or_not(policy):
    """Two GRPO steps on the same turns, one with packing on and one off: the same weights after."""
    import copy

    turns = _group_turns(100)
    after = {}
    for mode in ("on", "off"):
        p = copy.deepcopy(policy)
        learner = Learner(p, LearnerConfig(engine="torch", lr=1e-3, packing=mode))
        learner.update(turns)
        after[mode] = {n: t.detach().clone() for n, t in p.model.named_parameters()}
    moved = 0
    for name, w in after["off"].items():
        assert torch.allclose(after["on"][name], w, atol=1e-6), name
        moved += int(not torch.equal(w, dict(policy.model.named_parameters())[name]))
    assert moved > 0  # the update did change the weights


def test_models_that_take_no_positions_or_use_alibi_are_never_packed():
    from types import SimpleNamespace

    class NoPositions(torch.nn.Module):
        config = SimpleNamespace(_attn_implementation="sdpa")

        def forward(self, input_ids, attention_mask=None, **kwargs):
            return input_ids

    assert "position_ids" in packing_mod.model_allows(NoPositions())
    bloom = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa", model_type="bloom"),
                            forward=lambda input_ids, position_ids=None: None)
    assert "ALiBi" in packing_mod.model_allows(bloom)


def test_a_check_whose_packed_forward_raises_leaves_the_model_plain(monkeypatch):
    """A model whose packed forward fails (an ALiBi model the rules missed, say) warns and trains plain."""
    from cogym.learners import batch as batch_mod

    model = _random_llama()
    b = TokenBatch.from_turns(_group_turns(103), 0)
    real = batch_mod._scores

    def failing(m, tb, temperature, entropy, layout):
        if layout is not None:
            raise ValueError("too many values to unpack")
        return real(m, tb, temperature, entropy, layout)

    monkeypatch.setattr(batch_mod, "_scores", failing)
    with pytest.warns(RuntimeWarning, match="packed training forward failed"):
        out = response_logp(model, b, packing="auto")
    assert packing_mod.checked(model) is False and out.shape == b.mask.shape


def test_rows_wider_than_a_packed_row_run_plain_even_with_packing_on():
    assert packing_mod.plan([[4] * 3000] * 2, [[7]] * 2, hidden=128, force=True) is None


def test_a_model_whose_config_is_not_a_transformers_config_is_checked_without_error():
    """A user's model with a plain config object (no get_text_config) still takes the one-time check."""
    from types import SimpleNamespace

    class UserModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = _random_llama()
            self.config = SimpleNamespace(vocab_size=103, hidden_size=128, _attn_implementation="sdpa")

        def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)

    model = UserModel()
    assert packing_mod.text_config(model) is model.config
    b = TokenBatch.from_turns(_group_turns(103), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        packed = response_logp(model, b, packing="auto")
    assert packing_mod.checked(model) is True
    assert torch.allclose(packed, response_logp(model, b, packing="off"), atol=2e-5)


def test_a_position_scored_many_times_gets_the_same_gradient_every_time():
    """A packed layout scores a shared prompt's last position once per response; the backward must add
    those rows in a fixed order. On CPU, advanced indexing's backward adds them with parallel atomic
    adds in thread order (two identical runs drifted from iteration 4); 200 000 scores of 16 positions
    make that order show on every call with 2 threads, so a repeat of the first gradient is exact only
    with the ordered backward."""
    from cogym.learners.batch import _positions

    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(2, 8, 64, generator=gen, requires_grad=True)  # (B, W, H)
        at = (torch.randint(0, 2, (200_000,), generator=gen), torch.randint(0, 8, (200_000,), generator=gen))
        upstream = torch.randn(200_000, 64, generator=gen)
        grads = []
        for _ in range(8):
            x.grad = None
            picked = _positions(x, at)
            assert torch.equal(picked, x[at])  # the rows themselves: exactly advanced indexing's
            picked.backward(upstream)
            grads.append(x.grad.clone())
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(g, grads[0]) for g in grads[1:])
    torch.testing.assert_close(grads[0], torch.zeros_like(x).index_put(at, upstream, accumulate=True))
