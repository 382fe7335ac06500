"""The sampler/trainer mismatch (docs/algorithms.md §5.6): its metrics, truncated importance sampling
(``tis_cap``) and masking (``mismatch_mask``), against vector V15 and on a tiny model's learner."""

from __future__ import annotations

import math

import pytest
import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams, Turn
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner, response_logp, TokenBatch
from cogym.learners.losses import clipped_policy_loss, kl_estimate, mismatch_stats, mismatch_weights
from cogym.learners.objective import ObjectiveConfig, objective

# -- V15 -----------------------------------------------------------------------------------------
# Row 2's last token is padding: every value there is garbage that must change nothing.
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
LP_B = torch.tensor([[-1.0, -2.0, -0.5, -1.5], [-0.3, -2.5, -1.2, -7.0]], dtype=torch.float64)
DELTA = torch.tensor([[0.0, 1.0, -1.0, 0.5], [1.2, -0.2, -0.8, 5.0]], dtype=torch.float64)  # lp_t_old - lp_b
LP_T = LP_B + DELTA
RHO = torch.tensor([[1.0, 1.1, 0.9, 1.3], [0.7, 1.0, 1.5, 9.0]], dtype=torch.float64)  # exp(lp - lp_t_old)
LP = LP_T + RHO.log()
ADV = torch.tensor([[1.0] * 4, [-1.0] * 4], dtype=torch.float64)
N_TOK = 7.0

V15 = {  # case: (options, weights, pg terms, token-mean loss, masked fraction, mean weight)
    "a": (dict(tis_cap=2.0), [[1.0, 2.0, 0.3678794, 1.6487213], [2.0, 0.8187308, 0.4493290, 0.0]],
          [[-1.0, -2.2, -0.3310915, -1.9784655], [1.6, 0.8187308, 0.6739934, 0.0]], -0.3452618, 0.0, 1.1835229),
    "b": (dict(mismatch_mask=(0.5, 2.0)), [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]],
          [[-1.0, 0.0, 0.0, -1.2], [0.0, 1.0, 0.0, 0.0]], -0.1714286, 4 / 7, 0.4285714),
    "c": (dict(tis_cap=2.0, mismatch_mask=(0.5, 2.0)), [[1.0, 0.0, 0.0, 1.6487213], [0.0, 0.8187308, 0.0, 0.0]],
          [[-1.0, 0.0, 0.0, -1.9784655], [0.0, 0.8187308, 0.0, 0.0]], -0.3085335, 4 / 7, 0.4953503),
}


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


@pytest.mark.parametrize("case", sorted(V15))
def test_v15_weights_terms_and_loss(case):
    opts, weights, terms, loss, masked, mean_w = V15[case]
    w, m = mismatch_weights(LP_T, LP_B, MASK, tis_cap=opts.get("tis_cap"), band=opts.get("mismatch_mask"))
    torch.testing.assert_close(w, _t(weights), atol=1e-6, rtol=0)
    assert m["mismatch_masked_frac"] == pytest.approx(masked, abs=1e-6)
    assert m["tis_weight_mean"] == pytest.approx(mean_w, abs=1e-6)
    ppo, _ = clipped_policy_loss(LP, LP_T, ADV, MASK)  # the ratio against the trainer's old log-probs
    torch.testing.assert_close(ppo * w, _t(terms), atol=1e-6, rtol=0)
    logp = LP.clone().requires_grad_(True)
    total, metrics = objective(logp, LP_B, ADV, MASK, ObjectiveConfig(**opts), num_tokens=N_TOK, num_seqs=2.0,
                               logp_trainer_old=LP_T)
    assert float(total.detach()) == pytest.approx(loss, abs=1e-6)
    assert metrics["mismatch_masked_frac"] == pytest.approx(masked, abs=1e-6)
    assert metrics["tis_weight_mean"] == pytest.approx(mean_w, abs=1e-6)
    total.backward()  # the weights are constants: d loss / d lp = w * d ppo / d lp
    logp2 = LP.clone().requires_grad_(True)
    ppo2, _ = clipped_policy_loss(logp2, LP_T, ADV, MASK)
    ((ppo2 * w).sum() / N_TOK).backward()
    torch.testing.assert_close(logp.grad, logp2.grad, atol=1e-12, rtol=0)


def test_v15_without_a_correction_the_ratio_is_against_the_behaviour():
    """Off (the default): the loss is V6's, the ratio exp(lp - lp_b), whatever logp_trainer_old says."""
    logp = LP.clone()
    off, m = objective(logp, LP_B, ADV, MASK, ObjectiveConfig(), num_tokens=N_TOK, num_seqs=2.0, logp_trainer_old=LP_T)
    plain, m0 = objective(logp, LP_B, ADV, MASK, ObjectiveConfig(), num_tokens=N_TOK, num_seqs=2.0)
    assert float(off) == float(plain) == pytest.approx(0.0302459, abs=1e-6)
    assert "tis_weight_mean" not in m and "mismatch_masked_frac" not in m
    assert set(m) - set(m0) == {"mismatch_abs", "mismatch_k3"}


def test_v15_mismatch_metrics():
    stats = mismatch_stats(LP_T, LP_B, MASK)
    assert stats["mismatch_abs"] == pytest.approx(4.7 / 7, abs=1e-6)  # 0.6714286
    assert stats["mismatch_k3"] == pytest.approx(0.3747227, abs=1e-6)


def test_mismatch_metrics_are_the_formulas_and_shares_of_the_step():
    g = torch.Generator().manual_seed(0)
    lb = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    lt = lb + torch.randn(3, 5, generator=g, dtype=torch.float64) * 0.3
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 1, 1, 0]], dtype=torch.float64)
    lb[1, 3], lt[2, 4] = float("nan"), float("-inf")  # padding garbage
    m = mask.bool()
    d = (lt - lb)[m]
    r = d.exp()
    stats = mismatch_stats(lt, lb, mask)
    assert stats["mismatch_abs"] == pytest.approx(float(d.abs().mean()), abs=1e-12)
    assert stats["mismatch_k3"] == pytest.approx(float((r - 1 - d).mean()), abs=1e-12)
    # the sign convention: k3 of KL(behaviour || trainer) from behaviour samples, as kl_estimate writes it
    assert stats["mismatch_k3"] == pytest.approx(float(kl_estimate(lb, lt, "k3", clamp=None)[m].mean()), abs=1e-12)
    # micro-batch shares (the learner sums them, over micro-batches and ranks) add up to the step's means
    adv = torch.zeros_like(lb)
    parts = [objective(lt[i:i + 1], lb[i:i + 1], adv[i:i + 1], mask[i:i + 1], ObjectiveConfig(tis_cap=2.0),
                       num_tokens=float(mask.sum()), num_seqs=3.0, logp_trainer_old=lt[i:i + 1])[1] for i in range(3)]
    for key in ("mismatch_abs", "mismatch_k3"):
        assert sum(p[key] for p in parts) == pytest.approx(stats[key], abs=1e-12)
    w, _ = mismatch_weights(lt, lb, mask, tis_cap=2.0)
    assert sum(p["tis_weight_mean"] for p in parts) == pytest.approx(float(w[m].mean()), abs=1e-12)


def test_a_correction_needs_the_trainers_old_logprobs():
    with pytest.raises(ValueError, match="logp_trainer_old"):
        objective(LP, LP_B, ADV, MASK, ObjectiveConfig(tis_cap=2.0), num_tokens=N_TOK, num_seqs=2.0)


# -- config --------------------------------------------------------------------------------------
@pytest.mark.parametrize("keys, name", [
    (dict(tis_cap=0.0), "tis_cap"), (dict(tis_cap=-1.0), "tis_cap"), (dict(tis_cap=math.inf), "tis_cap"),
    (dict(tis_cap="2"), "tis_cap"), (dict(tis_cap=True), "tis_cap"),
    (dict(mismatch_mask=[1.5, 2.0]), "mismatch_mask"), (dict(mismatch_mask=[0.5, 0.9]), "mismatch_mask"),
    (dict(mismatch_mask=[0.0, 2.0]), "mismatch_mask"), (dict(mismatch_mask=[0.5]), "mismatch_mask"),
    (dict(mismatch_mask=[0.5, 2.0, 3.0]), "mismatch_mask"), (dict(mismatch_mask="0.5,2"), "mismatch_mask"),
    (dict(mismatch_mask=[0.5, "2"]), "mismatch_mask"),
])
def test_bad_values_are_one_line_errors_naming_the_key(keys, name):
    with pytest.raises(ValueError, match=f"^{name} must") as err:
        LearnerConfig.from_flat(**keys)
    assert "\n" not in str(err.value)


def test_good_values_and_the_defaults():
    assert LearnerConfig().tis_cap is None and LearnerConfig().mismatch_mask is None
    cfg = LearnerConfig.from_flat(tis_cap=2, mismatch_mask=(0.5, 2))
    cfg.validate()
    assert cfg.mismatch_mask == [0.5, 2]  # a list, as YAML writes it
    assert LearnerConfig.from_flat(**cfg.flat()) == cfg
    assert ObjectiveConfig.of(cfg).mismatch_mask == (0.5, 2) and ObjectiveConfig.of(cfg).tis_cap == 2
    assert not ObjectiveConfig.of(LearnerConfig()).corrects_mismatch


@pytest.mark.parametrize("key, value", [("tis_cap", 2.0), ("mismatch_mask", [0.5, 2.0])])
def test_spin_refuses_the_corrections(key, value):
    with pytest.raises(ValueError, match=key) as err:
        LearnerConfig.from_flat(algorithm="spin", **{key: value}).validate()
    assert "\n" not in str(err.value)


def test_a_config_file_gets_a_one_line_error_naming_the_learner_key(tiny_model_dir):
    from cogym.core.errors import ConfigError
    from cogym.runners.config.load import load_config

    base = [f"policies.proposer.model={tiny_model_dir}", f"policies.solver.model={tiny_model_dir}"]
    cfg = load_config(None, [*base, "learners.solver.tis_cap=2", "learners.solver.mismatch_mask=[0.5, 2]"])
    assert cfg.learners["solver"].tis_cap == 2.0 and cfg.learners["solver"].mismatch_mask == [0.5, 2]
    with pytest.raises(ConfigError, match=r"^learners\.solver\.mismatch_mask must") as err:
        load_config(None, [*base, "learners.solver.mismatch_mask=[2, 3]"])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^learners\.solver\.tis_cap must"):
        load_config(None, [*base, "learners.solver.tis_cap=0"])


# -- the learner ---------------------------------------------------------------------------------
def _turns(policy: Policy, n_groups: int = 2, per_group: int = 4) -> list[Turn]:
    """Sampled turns whose behaviour log-probs are the trainer's own teacher-forced ones (what the HF
    backend gives, without the float noise of the cached sampling forward)."""
    prompts = [policy.render([{"role": "user", "content": f"{g}{g}+{g}"}]) for g in range(n_groups) for _ in range(per_group)]
    torch.manual_seed(0)
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0))
    turns = []
    for i, gen in enumerate(gens):
        g, k = divmod(i, per_group)
        turns.append(Turn(game_index=g, episode_id=f"ep-{g}", seat=f"solver_{k}", role="solver", policy_id="solver",
                          prompt_ids=gen.prompt_ids, response_ids=gen.response_ids, logprobs=gen.logprobs,
                          text=gen.text, finished=gen.finished, reward=float((k + g) % 2), group_key=(f"ep-{g}", "solver")))
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = response_logp(policy.model, b, packing="off")
    for i, t in enumerate(turns):
        t.logprobs = logp[i, :len(t.response_ids)].tolist()
    return turns


def _update(model_dir, turns: list[Turn], **keys) -> tuple[dict, dict]:
    """One update of a fresh policy; its metrics and its parameters afterwards."""
    policy = Policy.from_pretrained(model_dir)
    metrics = Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-3, packing="off", **keys)).update(turns)
    return metrics, {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[n] - b[n]).abs().max()) for n in a)


CORRECTIONS = dict(tis_cap=2.0, mismatch_mask=[0.5, 2.0])


def test_on_policy_the_corrections_change_nothing(tiny_model_dir):
    """Behaviour log-probs equal to the trainer's: the weights are 1, the ratio the same, so the update is
    the uncorrected one, over two epochs too (the second takes the ratio against the stored first-epoch values)."""
    turns = _turns(Policy.from_pretrained(tiny_model_dir))
    for epochs in (1, 2):
        plain_m, plain_p = _update(tiny_model_dir, turns, epochs=epochs)
        corr_m, corr_p = _update(tiny_model_dir, turns, epochs=epochs, **CORRECTIONS)
        assert corr_m["loss"] == pytest.approx(plain_m["loss"], abs=1e-6)
        assert _max_diff(plain_p, corr_p) < 1e-6
        for m in (plain_m, corr_m):
            assert m["mismatch_abs"] < 1e-5 and abs(m["mismatch_k3"]) < 1e-5
        assert corr_m["mismatch_masked_frac"] == 0.0 and corr_m["tis_weight_mean"] == pytest.approx(1.0, abs=1e-5)
        assert "tis_weight_mean" not in plain_m and "mismatch_masked_frac" not in plain_m
        if epochs == 2:  # the policy moved in between: a second epoch whose ratio were not the stored one would differ
            assert plain_m["ppo_kl"] != 0.0


def test_a_perturbed_behaviour_is_measured_and_corrected(tiny_model_dir):
    """Behaviour log-probs off by +-0.4 and +-1.0: the metrics measure it, and the corrections move the update."""
    turns = _turns(Policy.from_pretrained(tiny_model_dir))
    offsets, n = [0.4, -0.4, 1.0, -1.0], 0
    abs_sum, k3_sum = 0.0, 0.0
    for t in turns:
        shifted = []
        for lp in t.logprobs:
            d = offsets[n % 4]  # logp_trainer - logp_behaviour = d
            shifted.append(lp - d)
            abs_sum, k3_sum, n = abs_sum + abs(d), k3_sum + math.exp(d) - 1 - d, n + 1
        t.logprobs = shifted
    plain_m, plain_p = _update(tiny_model_dir, turns)
    for m in (plain_m, _update(tiny_model_dir, turns, tis_cap=2.0)[0]):
        assert m["mismatch_abs"] == pytest.approx(abs_sum / n, abs=1e-5)
        assert m["mismatch_k3"] == pytest.approx(k3_sum / n, abs=1e-5)
    assert plain_m["logprob_drift"] == pytest.approx(abs_sum / n, abs=1e-5)  # one epoch: the same tokens, the same means
    corrected = []
    for keys in (dict(tis_cap=2.0), dict(mismatch_mask=[0.5, 2.0]), CORRECTIONS):
        m, params = _update(tiny_model_dir, turns, **keys)
        assert _max_diff(plain_p, params) > 1e-5, keys
        assert all(_max_diff(other, params) > 1e-5 for other in corrected), keys  # each weighting its own update
        corrected.append(params)
        # the ratio is taken against the trainer's own first-epoch log-probs: 1, nothing clipped
        assert m["ppo_kl"] == pytest.approx(0.0, abs=1e-6) and m["pg_clipfrac"] == 0.0
        assert m["logprob_drift"] == pytest.approx(plain_m["logprob_drift"], abs=1e-6)  # still against the sampler
    masked = _update(tiny_model_dir, turns, mismatch_mask=[0.5, 2.0])[0]
    # e^0.4 = 1.49 and e^-0.4 = 0.67 are kept, e^1 = 2.72 and e^-1 = 0.37 dropped
    assert masked["mismatch_masked_frac"] == pytest.approx(sum(offsets[i % 4] in (1.0, -1.0) for i in range(n)) / n,
                                                           abs=1e-6)
    capped = _update(tiny_model_dir, turns, tis_cap=2.0)[0]
    expected = sum(min(math.exp(offsets[i % 4]), 2.0) for i in range(n)) / n
    assert capped["tis_weight_mean"] == pytest.approx(expected, abs=1e-4)


def test_the_metrics_do_not_depend_on_the_micro_batch_split(tiny_model_dir):
    """Shares summed over micro-batches (as over data-parallel ranks) give the step's token means."""
    turns = _turns(Policy.from_pretrained(tiny_model_dir))
    for i, t in enumerate(turns):
        t.logprobs = [lp - 0.1 * ((i + j) % 3) for j, lp in enumerate(t.logprobs)]
    whole = _update(tiny_model_dir, turns, **CORRECTIONS)[0]
    split = _update(tiny_model_dir, turns, micro_batch_size=3, **CORRECTIONS)[0]
    for key in ("mismatch_abs", "mismatch_k3", "tis_weight_mean", "mismatch_masked_frac"):
        assert split[key] == pytest.approx(whole[key], abs=1e-6), key
