"""PRIME's implicit PRM (learners/prime.py): q = 0 at the start, CE training on outcome labels, exact resume."""

from __future__ import annotations

import math
import os
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cogym.agents.loading import checkpointing_on, enable_checkpointing
from cogym.agents.char_tokenizer import build_char_tokenizer
from cogym.core.types import Turn
from cogym.learners.config import LearnerConfig
from cogym.learners.engines import _zero_safe_globals
from cogym.learners.learner import TokenBatch, response_logp
from cogym.learners.multiagent import prime_ce_loss, prime_q
from cogym.learners.prime import WEIGHTS_FILE, PrimeRewardModel

TOK = build_char_tokenizer()
ENGINES = [pytest.param("torch", id="torch"), pytest.param("deepspeed", id="deepspeed-zero0")]


def _model(seed: int = 0, extra_vocab: int = 0) -> LlamaForCausalLM:
    """A tiny Llama over the char tokenizer, with attention dropout (which must stay off in every PRM forward)."""
    cfg = LlamaConfig(vocab_size=len(TOK) + extra_vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128, attention_dropout=0.5,
                      tie_word_embeddings=True, eos_token_id=TOK.eos_token_id, pad_token_id=TOK.pad_token_id,
                      bos_token_id=TOK.bos_token_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).train()  # left in train mode on purpose


def _batch(rows: list[tuple[str, str, float]]) -> TokenBatch:
    turns = [Turn(0, "ep", f"s{i}", "solver", "p", TOK.encode(p), TOK.encode(r), [0.0] * len(TOK.encode(r)), r, True,
                  reward=acc, group_key=("ep", "solver")) for i, (p, r, acc) in enumerate(rows)]
    return TokenBatch.from_turns(turns, TOK.pad_token_id)


# Label 1 goes with one response, 0 with another (two lengths, so there is padding), twice each.
ROWS = [("12+3=", "15", 1.0), ("12+3=", "9x3", 0.0), ("12+3=", "15", 1.0), ("12+3=", "9x3", 0.0)]


def _cfg(engine: str = "torch", **kw) -> LearnerConfig:
    return LearnerConfig.from_flat(engine=engine, **{"prime_lr": 1e-2, "prime_beta": 0.5, **kw})


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _gathered(prm: PrimeRewardModel) -> dict[str, torch.Tensor]:
    with prm.engine.gathered_params():
        return _snapshot(prm.model)


def _sigma(prm: PrimeRewardModel, b: TokenBatch) -> torch.Tensor:
    return torch.sigmoid(prm.prime.prime_beta * prm.q(b, 8).sum(1))


def test_q_and_process_rewards_are_zero_at_the_start_and_the_first_loss_is_ln2():
    policy = _model()
    prm = PrimeRewardModel(policy, _cfg(prime_norm="batch_norm"))
    b = _batch(ROWS)
    q = prm.q(b, micro_batch_size=3)
    assert q.shape == b.mask.shape and torch.count_nonzero(q) == 0  # PRM == ref, dropout off in both
    assert torch.count_nonzero(prm.process_rewards(b, 3)) == 0
    prm.cfg.settings("prime").prime_norm = "none"
    assert torch.count_nonzero(prm.process_rewards(b, 3)) == 0
    assert prm.model is not policy and prm.ref_model is not policy and prm.ref_model is not prm.model
    metrics = prm.update(b, b.scores, micro_batch_size=3)
    assert metrics["prm_loss"] == pytest.approx(math.log(2), abs=1e-6)  # z = 0 for every row: no dropout in update
    assert metrics["prm_acc"] == 0.5  # z = 0 predicts 0: right on the two label-0 rows only


@pytest.mark.parametrize("engine", ENGINES)
def test_updates_separate_the_labels_and_never_touch_the_policy_or_the_reference(engine):
    policy = _model()
    policy_before = _snapshot(policy)
    prm = PrimeRewardModel(policy, _cfg(engine))
    assert prm.engine.name == engine
    ref_before = _snapshot(prm.ref_model)
    b = _batch(ROWS)
    sig0 = _sigma(prm, b)
    losses = [prm.update(b, b.scores, micro_batch_size=3)["prm_loss"] for _ in range(4)]
    sig = _sigma(prm, b)
    assert torch.all(sig[[0, 2]] > sig0[[0, 2]] + 0.05) and torch.all(sig[[1, 3]] < sig0[[1, 3]] - 0.05), (sig0, sig)
    assert losses[-1] < losses[0] - 0.05, losses
    assert prm.update(b, b.scores, 3)["prm_acc"] == 1.0
    for name, before in (("policy", policy_before), ("reference", ref_before)):
        model = policy if name == "policy" else prm.ref_model
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items()), name
        assert all(p.grad is None for p in model.parameters()), name
    assert not prm.ref_model.training and not any(p.requires_grad for p in prm.ref_model.parameters())
    assert any(not torch.equal(v, ref_before[k]) for k, v in prm.model.state_dict().items())


def test_the_loss_is_normalised_over_the_batch_whatever_the_micro_batches():
    # An empty response (no token, NaN label) must count in neither the loss nor the accuracy.
    rows = [*ROWS, ("7+7=", "", float("nan")), ("7+7=", "14", 1.0)]
    b = _batch(rows)
    prms = {}
    for mbs in (1, 2, 6):
        prm = PrimeRewardModel(_model(), _cfg())
        prm.update(b, b.scores, micro_batch_size=6)  # off zero, so the rows' terms differ
        logp = response_logp(prm.model.eval(), b, prm.temperature)
        ref = response_logp(prm.ref_model, b, prm.temperature)
        expected = float(prime_ce_loss(logp, ref, b.mask, b.scores, beta=prm.prime.prime_beta).detach())
        z = prime_q(logp, ref, b.mask).sum(1).detach()
        keep = b.mask.sum(1) > 0
        expected_acc = float(((z > 0) == (b.scores > 0.5))[keep].float().mean())  # over the 5 rows with tokens
        metrics = prm.update(b, b.scores, micro_batch_size=mbs)
        assert metrics["prm_loss"] == pytest.approx(expected, abs=1e-6), mbs
        assert metrics["prm_acc"] == pytest.approx(expected_acc)
        assert math.isfinite(metrics["prm_grad_norm"])
        prms[mbs] = _snapshot(prm.model)
    for k, v in prms[6].items():
        torch.testing.assert_close(prms[1][k], v, atol=1e-6, rtol=0)
        torch.testing.assert_close(prms[2][k], v, atol=1e-6, rtol=0)


def test_q_is_taken_at_the_sampling_temperature():
    policy = _model()
    prm = PrimeRewardModel(policy, _cfg(), temperature=0.5)
    b = _batch(ROWS)
    prm.update(b, b.scores, 4)
    hot = PrimeRewardModel(policy, _cfg())
    hot.model.load_state_dict(prm.model.state_dict())
    expected = prime_q(response_logp(prm.model.eval(), b, 0.5),
                       response_logp(prm.ref_model, b, 0.5), b.mask)
    torch.testing.assert_close(prm.q(b, 3), expected, atol=1e-6, rtol=0)
    assert not torch.allclose(hot.q(b, 3), expected, atol=1e-3)
    with pytest.raises(ValueError, match="temperature"):
        PrimeRewardModel(policy, _cfg(), temperature=0.0)


@pytest.mark.parametrize("engine, stage", [("torch", 0), ("deepspeed", 0), ("deepspeed", 3)],
                         ids=["torch", "deepspeed-zero0", "deepspeed-zero3"])
def test_save_and_load_continue_exactly(engine, stage, tmp_path: Path):
    policy = _model()
    cfg = _cfg(engine, zero_stage=stage)
    b = _batch(ROWS)
    prm = PrimeRewardModel(policy, cfg)
    for _ in range(2):
        prm.update(b, b.scores, 3)
    prm.save(tmp_path)
    optim_file = "zero_optimizer.rank0.pt" if stage else "optimizer.pt"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([WEIGHTS_FILE, optim_file])
    with torch.serialization.safe_globals(_zero_safe_globals()):
        torch.load(tmp_path / optim_file, weights_only=True)  # tensors, containers, allow-listed classes: no pickled code
    resumed = PrimeRewardModel(policy, cfg)
    resumed.load(tmp_path)
    assert torch.equal(resumed.q(b, 3), prm.q(b, 3))
    assert torch.equal(PrimeRewardModel(policy, cfg, weights=tmp_path).q(b, 3), prm.q(b, 3))
    weights_only = PrimeRewardModel(policy, cfg, weights=tmp_path)  # fresh Adam moments
    m_straight, m_resumed = prm.update(b, b.scores, 3), resumed.update(b, b.scores, 3)
    assert m_resumed["prm_loss"] == m_straight["prm_loss"]
    straight, after = _gathered(prm), _gathered(resumed)
    for k, v in straight.items():
        torch.testing.assert_close(after[k], v, atol=1e-7, rtol=0)
    weights_only.update(b, b.scores, 3)
    fresh = _gathered(weights_only)
    assert any(not torch.allclose(fresh[k], v, atol=1e-6) for k, v in straight.items())  # the optimizer state mattered


def test_prime_model_loads_an_hf_directory_and_checks_the_vocabulary(tmp_path: Path):
    policy = _model(seed=0)
    other = _model(seed=1)
    other.save_pretrained(tmp_path / "prm")
    prm = PrimeRewardModel(policy, _cfg(prime_model=str(tmp_path / "prm")))
    assert all(torch.equal(v, other.state_dict()[k]) for k, v in prm.model.state_dict().items())
    assert any(not torch.equal(v, policy.state_dict()[k]) for k, v in prm.model.state_dict().items())
    assert torch.count_nonzero(prm.q(_batch(ROWS), 4)) == 0  # its reference is its own initial weights
    _model(extra_vocab=5).save_pretrained(tmp_path / "big")
    with pytest.raises(ValueError, match=rf"vocabulary size {len(TOK) + 5}.*{len(TOK)}"):
        PrimeRewardModel(policy, _cfg(prime_model=str(tmp_path / "big")))
    with pytest.raises(ValueError, match="not a directory"):
        PrimeRewardModel(policy, _cfg(prime_model=str(tmp_path / "missing")))


def test_prime_model_takes_the_policys_dtype_kernel_and_checkpointing(tmp_path: Path):
    policy = _model(seed=0).to(torch.bfloat16)
    policy.set_attn_implementation("eager")
    enable_checkpointing(policy)
    _model(seed=1).save_pretrained(tmp_path / "prm")
    prm = PrimeRewardModel(policy, _cfg(prime_model=str(tmp_path / "prm")))
    assert prm.model.dtype == torch.bfloat16 and prm.model.config._attn_implementation == "eager"
    assert checkpointing_on(prm.model)


def test_a_given_reference_is_used_as_is():
    policy, original = _model(seed=0), _model(seed=1)  # e.g. on resume: the trained policy, and the initial model
    prm = PrimeRewardModel(policy, _cfg(), reference=original)
    assert prm.ref_model is original and not original.training
    assert not any(p.requires_grad for p in original.parameters())
    assert torch.count_nonzero(prm.q(_batch(ROWS), 4)) > 0
