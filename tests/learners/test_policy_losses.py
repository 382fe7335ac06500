"""The policy-loss plug-ins (cogym.learners.policy_losses) and their learner keys: validation, the
registry, a user's loss, and what every loss owes the objective (padding never leaks in, micro-batches
add up, the mismatch correction weights it). Parity with verl: test_policy_loss_parity.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cogym.core.errors import ConfigError
from cogym.learners.config import LearnerConfig
from cogym.learners.losses import aggregate, mismatch_weights
from cogym.learners.objective import ObjectiveConfig, objective
from cogym.learners.policy_losses import BUILTIN, PolicyLossInputs, get, names, register, unregister
from cogym.runners.config.load import load_config
from cogym.runners.config.reference import reference

ROOT = Path(__file__).resolve().parents[2]
F64 = torch.float64
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], dtype=F64)
OLD = torch.tensor([[-1.2, -0.4, -2.3, -0.9], [-0.7, -1.6, -0.2, -3.0], [-0.5, -1.1, -2.0, -0.8]], dtype=F64)
LOGP = OLD + torch.tensor([[0.05, -0.5, 0.3, -0.1], [0.8, -0.15, 0.12, 0.4], [-0.3, 0.25, 0.6, -0.2]], dtype=F64)
ADV = torch.tensor([[1.3, -0.2, 0.6, -1.1], [-0.9, 0.4, -0.3, 0.8], [0.5, -1.4, 0.2, 0.7]], dtype=F64)
N_TOK = float(MASK.sum())
# clip_cov with a budget that covers every candidate (its random draw then picks them all)
KNOBS = {"clip_cov": {"clip_cov_ratio": 0.5, "clip_cov_lb": 0.01}, "kl_cov": {"kl_cov_ratio": 0.3}}


def _run(name: str, logp=LOGP, old=OLD, adv=ADV, mask=MASK, num_tokens=N_TOK, num_seqs=3.0, generator=None, **kw):
    cfg = ObjectiveConfig(policy_loss=name, **{**KNOBS.get(name, {}), **kw})
    logp = logp.clone().requires_grad_(True)
    loss, metrics = objective(logp, old, adv, mask, cfg, num_tokens=num_tokens, num_seqs=num_seqs, generator=generator)
    loss.backward()
    return loss.detach(), logp.grad, metrics


# ------------------------------------------------------------------ keys and their errors
def test_the_default_is_vanilla_and_the_objective_carries_the_knobs():
    cfg = ObjectiveConfig.of(LearnerConfig(policy_loss="sapo", sapo_tau_pos=2.0))
    assert ObjectiveConfig.of(LearnerConfig()).policy_loss == "vanilla"
    assert (cfg.policy_loss, cfg.sapo_tau_pos, cfg.sapo_tau_neg, cfg.kl_cov_coef) == ("sapo", 2.0, 1.05, 0.1)
    assert ObjectiveConfig.of(LearnerConfig(policy_loss="kl_cov", kl_cov_coef=0.5)).kl_cov_coef == 0.5


def test_a_misspelt_policy_loss_suggests_the_closest():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["learners.proposer.policy_loss=gsop"])
    assert str(err.value).startswith("learners.proposer.policy_loss must be a registered policy loss (vanilla, gspo,")
    assert str(err.value).endswith("got 'gsop' (did you mean 'gspo'?)") and "\n" not in str(err.value)


@pytest.mark.parametrize("override, message", [
    ("clip_cov_ratio=0", "learners.proposer.clip_cov_ratio must be a number in (0, 1], got 0.0"),
    ("kl_cov_ratio=1.5", "learners.proposer.kl_cov_ratio must be a number in (0, 1], got 1.5"),
    ("kl_cov_coef=-1", "learners.proposer.kl_cov_coef must be a number >= 0, got -1.0"),
    ("sapo_tau_pos=0", "learners.proposer.sapo_tau_pos must be a number > 0, got 0.0"),
    ("sapo_tau_neg=-2", "learners.proposer.sapo_tau_neg must be a number > 0, got -2.0"),
    ("clip_cov_ub=.inf", "learners.proposer.clip_cov_ub must be a finite number, got inf"),
    ("clip_cov_lb=6", "learners.proposer.clip_cov_lb must be below clip_cov_ub (the band of covariances clip_cov may "
                      "cut), got 6.0 and 5.0"),
])
def test_a_knob_out_of_range_is_a_one_line_error_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"learners.proposer.{override}"])
    assert str(err.value) == message


def test_every_knob_is_a_listed_learner_key_with_type_default_and_help():
    rows = {key: (tp, default, meaning) for key, tp, default, meaning in reference()}  # what cogym config lists
    for knob, tp, default in [("policy_loss", "str", "'vanilla'"), ("clip_cov_ratio", "float", "0.0002"),
                              ("clip_cov_lb", "float", "1.0"), ("clip_cov_ub", "float", "5.0"),
                              ("kl_cov_ratio", "float", "0.0002"), ("kl_cov_coef", "float", "0.1"),
                              ("sapo_tau_pos", "float", "1.0"), ("sapo_tau_neg", "float", "1.05")]:
        got_type, got_default, meaning = rows[f"learners.<id>.{knob}"]
        assert (got_type, got_default) == (tp, default) and meaning, knob


# ------------------------------------------------------------------ the registry and a user's loss
def test_the_registry_alone_finds_every_shipped_loss_in_order():
    code = ("import json\nfrom cogym.learners import policy_losses as p\n"
            "print(json.dumps({n: p.get(n).__module__ for n in p.names()}))")
    found = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                                      timeout=300, check=True).stdout.strip().splitlines()[-1])
    modules = {f"cogym.learners.policy_losses.{p.stem}" for p in (ROOT / "cogym/learners/policy_losses").glob("*.py")
               if p.stem != "__init__"}
    assert list(found) == list(BUILTIN) and set(found.values()) == modules


@pytest.fixture
def halved():
    """A user's loss, ``halved`` (vanilla's value and gradient times 0.5), registered for one test."""
    def halved_loss(x: PolicyLossInputs):
        loss, metrics = get("vanilla")(x)
        return 0.5 * loss, {"halved": 1.0}
    yield register("halved")(halved_loss)
    unregister("halved")


def test_a_user_loss_registers_and_the_objective_calls_it(halved):
    assert get("halved") is halved and names()[:len(BUILTIN)] == tuple(BUILTIN) and names()[-1] == "halved"
    loss, grad, metrics = _run("halved")
    plain, plain_grad, _ = _run("vanilla")
    assert float(loss) == pytest.approx(0.5 * float(plain)) and torch.allclose(grad, 0.5 * plain_grad)
    assert metrics["halved"] == 1.0
    with pytest.raises(ValueError, match="policy loss 'halved' is already registered"):
        register("halved")(lambda x: x)
    with pytest.raises(ValueError, match="must be a Python identifier"):
        register("no-dash")(halved)


def test_a_config_accepts_a_loss_registered_by_a_game_module(tmp_path):
    module = tmp_path / "my_loss.py"
    module.write_text("from cogym.learners.policy_losses import get, register\n"
                      "@register('my_loss_from_module')\ndef my_loss(x):\n    return get('gpg')(x)\n")
    try:
        cfg = load_config(None, [f"game.modules=[{module}]", "learners.solver.policy_loss=my_loss_from_module"])
        assert cfg.learners["solver"].policy_loss == "my_loss_from_module"
    finally:
        unregister("my_loss_from_module")


# ------------------------------------------------------------------ what every loss owes the objective
@pytest.mark.parametrize("name", list(BUILTIN))
def test_padding_reaches_neither_value_nor_gradient(name):
    pad = MASK == 0
    loss, grad, metrics = _run(name)
    garbage = dict(logp=torch.where(pad, math.nan, LOGP), old=torch.where(pad, -math.inf, OLD),
                   adv=torch.where(pad, 1e30, ADV))
    loss2, grad2, metrics2 = _run(name, **garbage)
    assert float(loss2) == float(loss) and torch.equal(torch.where(pad, 0.0, grad2), torch.where(pad, 0.0, grad))
    assert not grad2[pad].any() and metrics2 == metrics


@pytest.mark.parametrize("name", ["vanilla", "gspo", "cispo", "gmpo", "gpg", "sapo"])
@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_add_up_to_the_step(name, loss_agg):
    """With the step's counts, the rows' losses sum to the whole batch's (clip_cov and kl_cov pick their
    tokens within a micro-batch, as verl's do, so they are left out)."""
    whole, grad, _ = _run(name, loss_agg=loss_agg)
    parts = [_run(name, logp=LOGP[i:i + 1], old=OLD[i:i + 1], adv=ADV[i:i + 1], mask=MASK[i:i + 1], loss_agg=loss_agg)
             for i in range(3)]
    assert float(sum(p[0] for p in parts)) == pytest.approx(float(whole), abs=1e-12)
    assert torch.allclose(torch.cat([p[1] for p in parts]), grad, atol=1e-12)


def test_a_token_loss_is_weighted_by_the_mismatch_correction():
    """gpg under tis_cap: each token's -A logp times min(exp(logp_trainer_old - logp_behaviour), cap)."""
    trainer_old = OLD + 0.3 * torch.tensor([[1.0, -2.0, 0.5, 3.0]] * 3, dtype=F64)
    logp = LOGP.clone().requires_grad_(True)
    loss, metrics = objective(logp, OLD, ADV, MASK, ObjectiveConfig(policy_loss="gpg", tis_cap=1.5), num_tokens=N_TOK,
                              num_seqs=3.0, logp_trainer_old=trainer_old)
    w, _ = mismatch_weights(trainer_old, OLD, MASK, tis_cap=1.5)
    assert float(loss) == pytest.approx(float(aggregate(w * -ADV * LOGP, MASK, "token-mean")), abs=1e-12)
    assert metrics["tis_weight_mean"] == pytest.approx(float(w.sum()) / N_TOK)


def test_a_mismatch_correction_takes_the_ratio_against_the_trainers_old_logprobs():
    """cispo's clipped weight uses logp_trainer_old under a correction (all weights 1 here: band only)."""
    band = ObjectiveConfig(policy_loss="cispo", mismatch_mask=(1e-3, 1e3))
    corrected, _ = objective(LOGP, OLD - 1.0, ADV, MASK, band, num_tokens=N_TOK, num_seqs=3.0, logp_trainer_old=OLD)
    assert float(corrected) == pytest.approx(float(_run("cispo")[0]), abs=1e-12)


def test_sequence_level_losses_ignore_loss_agg_as_verl_does():
    for name in ("gspo", "sapo", "gmpo"):
        values = {float(_run(name, loss_agg=mode, norm_const=4.0)[0]) for mode in
                  ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")}
        assert len(values) == 1, name


def test_clip_cov_cuts_at_most_its_budget_drawn_at_random():
    """Nine valid tokens, every uncut token a candidate (lb very low): ratio 0.25 cuts int(2.25) = 2 of them,
    which two depending on the generator it is given (the draw repeats under the same seed)."""
    knobs = dict(clip_cov_ratio=0.25, clip_cov_lb=-1e9, clip_cov_ub=1e9, clip_low=0.9, clip_high=9.0)
    draws = []
    for seed in (0, 0, 1, 2, 3):
        _, grad, metrics = _run("clip_cov", generator=torch.Generator().manual_seed(seed), **knobs)
        assert metrics["pg_clipfrac"] == pytest.approx(2 / 9)
        draws.append(tuple(torch.nonzero((grad == 0) & (MASK != 0)).flatten().tolist()))
    assert draws[0] == draws[1] and len(set(draws)) > 1


def test_kl_cov_penalises_its_top_tokens_only():
    base, _, _ = _run("kl_cov", kl_cov_coef=0.0)
    penalised, _, metrics = _run("kl_cov", kl_cov_coef=1.0)
    assert float(penalised) > float(base)  # |log ratio| > 0 on the selected tokens
    assert metrics["ppo_kl"] == pytest.approx(float(((LOGP - OLD).abs() * MASK).sum()) / N_TOK)


def test_each_loss_reports_its_metrics():
    assert set(_run("vanilla")[2]) == {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"}
    assert set(_run("gpg")[2]) == set() and set(_run("sapo")[2]) == {"ppo_kl"}
    assert set(_run("gmpo")[2]) == {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"}
