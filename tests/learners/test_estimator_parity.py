"""verl's advantage estimators in cogym (cogym/learners/estimators.py) against verl's own functions.

Every expected number below was computed ONCE, at development time, by verl's
``verl/trainer/ppo/core_algos.py`` at commit b178a3cd56f58b2d502255daba591e92833930a7, from these same
inputs (float32 tensors there; index: the UIDS strings; config: an OmegaConf dict), and is recorded
here; nothing of verl is imported, fetched or vendored. The functions:

* ``compute_grpo_passk_outcome_advantage`` (config norm_adv_by_std_in_grpo true / false; group "c",
  a singleton, left out: verl refuses a group of one),
* ``compute_opo_outcome_advantage``, ``compute_gpg_outcome_advantage`` (f_norm 1, its default),
* ``compute_remax_outcome_advantage`` (reward_baselines = REMAX_BASELINES),
* ``compute_optimal_token_baseline_advantage`` (old_log_probs = log P, sum_pi_squared; plain, with
  rollout_is_weights = IS_WEIGHTS, and with handle_zero_tail=True),
* ``compute_multi_turn_optimal_token_baseline_advantage`` (cogym's mode="multi_turn") on a second
  batch of multi-turn masks (its own comment below, float64 tensors there),
* ``compute_pf_ppo_reweight_data`` (the weights it hands ``torch.multinomial``; token_level_scores:
  OUTCOMES on the first token).

The batch: 10 responses, width 6, right padding, one row (3) with an interior masked span; groups
"a" (4 rows of different lengths), "b" (3 rows with one outcome: zero variance), "c" (a singleton) and
"d" (2 rows tied at the top). Token rewards are the outcome on the last loss-mask token plus a small
per-token shaping. verl's group estimators give a singleton a baseline of 0; cogym's shipped plug-ins
give it 0 (singleton="zero"), so the cases below pass singleton="verl". verl leaves the carried
return on an interior masked position; cogym's outputs are 0 off the mask, so the comparison is on
the mask (``* MASK``), where the loss reads them. Every case agrees to 1e-6. The last two tests check
``otb_mode``, the key that picks the multi-turn variant, and an otb update on multi-turn rows.
"""

from __future__ import annotations

import pytest
import torch
from test_learner import _turns

from cogym.agents.policy import Policy
from cogym.learners import estimators as est
from cogym.learners.advantages import group_index
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner

TOL = 1e-6
UIDS = ["a", "a", "b", "a", "c", "b", "a", "d", "b", "d"]
MASK = [
    [1, 1, 1, 1, 0, 0],
    [1, 1, 0, 0, 0, 0],
    [1, 1, 1, 1, 1, 1],
    [1, 1, 0, 1, 1, 0],
    [1, 1, 1, 0, 0, 0],
    [1, 0, 0, 0, 0, 0],
    [1, 1, 1, 1, 1, 1],
    [1, 1, 1, 0, 0, 0],
    [1, 1, 1, 1, 0, 0],
    [1, 1, 1, 1, 1, 0],
]
OUTCOMES = [1.0, 0.0, 1.0, 0.5, 0.7, 1.0, -0.25, 1.0, 1.0, 1.0]
# per-token shaping (as a KL-in-reward's), 0 on padding; the outcome is added on each row's last mask token
SHAPING = [
    [-0.0053, -0.002, -0.0066, -0.0066, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.0097, -0.0011, 0, -0.0041, -0.0076, 0],
    [-0.0052, -0.0059, -0.0088, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.0039, -0.0022, -0.0037, -0.002, -0.0074, -0.0025],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
]
P = [
    [0.447, 0.55, 0.622, 0.147, 0.347, 0.518],
    [0.243, 0.303, 0.651, 0.759, 0.506, 0.325],
    [0.746, 0.253, 0.394, 0.925, 0.583, 0.532],
    [0.652, 0.39, 0.885, 0.133, 0.376, 0.422],
    [0.315, 0.389, 0.779, 0.747, 0.525, 0.892],
    [0.182, 0.232, 0.703, 0.476, 0.09, 0.189],
    [0.226, 0.847, 0.704, 0.848, 0.165, 0.061],
    [0.205, 0.548, 0.411, 0.216, 0.828, 0.355],
    [0.24, 0.708, 0.379, 0.787, 0.607, 0.511],
    [0.594, 0.162, 0.259, 0.289, 0.245, 0.58],
]  # the policy's probability of each response token
SUM_PI_SQUARED = [
    [0.383, 0.362, 0.505, 0.183, 0.377, 0.351],
    [0.097, 0.177, 0.51, 0.617, 0.303, 0.262],
    [0.559, 0.493, 0.498, 0.859, 0.373, 0.45],
    [0.536, 0.3, 0.789, 0.524, 0.361, 0.29],
    [0.116, 0.207, 0.633, 0.588, 0.482, 0.802],
    [0.282, 0.061, 0.498, 0.421, 0.791, 0.36],
    [0.083, 0.733, 0.575, 0.723, 0.284, 0.482],
    [0.178, 0.308, 0.418, 0.102, 0.697, 0.224],
    [0.564, 0.552, 0.426, 0.627, 0.511, 0.391],
    [0.39, 0.354, 0.147, 0.325, 0.504, 0.385],
]
IS_WEIGHTS = [
    [1.42, 1.15, 0.91, 1.16, 0.91, 0.88],
    [0.67, 1.29, 1.3, 1.17, 1.3, 1.5],
    [1.47, 0.52, 1.11, 0.96, 1.17, 0.9],
    [1.14, 0.54, 1.23, 1.48, 0.91, 0.6],
    [0.58, 0.9, 0.99, 1.06, 1.06, 1.38],
    [0.91, 1.14, 0.73, 1.49, 1.19, 0.93],
    [1.33, 1.18, 1.09, 0.85, 1.06, 1.04],
    [0.71, 1.01, 1.11, 0.7, 1.09, 0.83],
    [0.58, 0.7, 0.6, 1.12, 1.31, 1.45],
    [1.49, 1.2, 1.24, 0.91, 1.41, 0.81],
]
REMAX_BASELINES = [0.5, 0.5, 1.0, 0.5, 0, 1.0, 0.5, 1.0, 1.0, 1.0]

# verl's results
PASSK_NORMTRUE_ROWS = [0, 1, 2, 3, 5, 6, 7, 8, 9]
PASSK_NORMTRUE = [
    [0.911464214, 0.911464214, 0.911464214, 0.911464214, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
]
PASSK_NORMFALSE_ROWS = [0, 1, 2, 3, 5, 6, 7, 8, 9]
PASSK_NORMFALSE = [
    [0.501999974, 0.501999974, 0.501999974, 0.501999974, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
]
OPO = [
    [0.717137456, 0.717137456, 0.717137456, 0.717137456, 0, 0],
    [-0.26236251, -0.26236251, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0.215137482, 0.215137482, 0, 0.215137482, 0.215137482, 0],
    [0.680100024, 0.680100024, 0.680100024, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.534062505, -0.534062505, -0.534062505, -0.534062505, -0.534062505, -0.534062505],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
]
GPG = [
    [0.759083331, 0.759083331, 0.759083331, 0.759083331, 0, 0],
    [-0.329250008, -0.329250008, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0.201305553, 0.201305553, 0, 0.201305553, 0.201305553, 0],
    [0.755666733, 0.755666733, 0.755666733, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.631138921, -0.631138921, -0.631138921, -0.631138921, -0.631138921, -0.631138921],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
]
REMAX = [
    [0.479499996, 0.484799981, 0.486799955, 0.493399978, 0, 0],
    [-0.5, -0.5, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.022500008, -0.012800008, 0.488299996, -0.011700004, -0.007600009, 0],
    [0.680100024, 0.685299993, 0.691200018, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.771700025, -0.767799973, -0.765599966, -0.761900008, -0.759899974, -0.752499998],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
]
RETURNS = [
    [0.979499996, 0.984799981, 0.986799955, 0.993399978, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [1, 1, 1, 1, 1, 1],
    [0.477499992, 0.487199992, 0.488299996, 0.488299996, 0.492399991, 0],
    [0.680100024, 0.685299993, 0.691200018, 0, 0, 0],
    [1, 0, 0, 0, 0, 0],
    [-0.271699995, -0.267800003, -0.265599996, -0.261900008, -0.259900004, -0.252499998],
    [1, 1, 1, 0, 0, 0],
    [1, 1, 1, 1, 0, 0],
    [1, 1, 1, 1, 1, 0],
]
OTB = [
    [0.766401291, 0.708635092, 0.566932797, 0.439755023, 0, 0],
    [-0.21309872, -0.276164889, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0.264401257, 0.211035103, 0, -0.065344959, 0.308244586, 0],
    [0.680100024, 0.685299993, 0.691200018, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.484798729, -0.543964863, -0.685467124, -0.815544963, -0.444055378, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
]
OTB_IS = [
    [0.678336203, 0.693078279, 0.587618411, 0.458128154, 0, 0],
    [-0.301163793, -0.291721672, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0.176336199, 0.19547832, 0, -0.046971828, 0.299822986, 0],
    [0.680100024, 0.685299993, 0.691200018, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.572863817, -0.559521675, -0.66478157, -0.797171831, -0.452476978, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
]
OTB_TAIL = [
    [0.766401291, 0.708635092, 0.566932797, 0.439755023, 0, 0],
    [-0.21309872, -0.276164889, 0, 0, 0, 0],
    [0, 0, 0, 0, 1, 1],
    [0.264401257, 0.211035103, 0, -0.065344959, 0.308244586, 0],
    [0.680100024, 0.685299993, 0.691200018, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [-0.484798729, -0.543964863, -0.685467124, -0.815544963, -0.259900004, -0.252499998],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 1, 1, 0],
]
PF_POW = [1, 1e-08, 1, 0.25, 0.48999998, 1, 0.062500007, 1, 1, 1]
PF_MAX_MIN = [1, 1e-08, 1, 1e-08, 1e-08, 1, 1, 1, 1, 1]
PF_MAX_RANDOM = [0.400000006, 0.100000009, 0.400000006, 0.100000009, 0.100000009, 0.400000006, 0.100000009, 0.400000006, 0.400000006, 0.400000006]
PF_POW1_5 = [1, 1e-08, 1, 0.353553385, 0.585662007, 1, 0.125000015, 1, 1, 1]


def t(rows) -> torch.Tensor:
    return torch.as_tensor(rows, dtype=torch.float64)


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token rewards (N, L), mask (N, L), groups (N,)): the outcome on each row's last mask token."""
    mask, rewards = t(MASK), t(SHAPING)
    last = (mask * torch.arange(mask.shape[1])).argmax(1)
    rewards[torch.arange(len(OUTCOMES)), last] += t(OUTCOMES)
    return rewards, mask, group_index(UIDS)


def close(got: torch.Tensor, expected) -> None:
    assert got.shape == t(expected).shape
    assert torch.allclose(got.double(), t(expected), atol=TOL, rtol=0), (got - t(expected)).abs().max()


@pytest.mark.parametrize("norm_by_std, rows, expected", [(True, PASSK_NORMTRUE_ROWS, PASSK_NORMTRUE),
                                                          (False, PASSK_NORMFALSE_ROWS, PASSK_NORMFALSE)])
def test_grpo_passk_matches_verl(norm_by_std, rows, expected):
    rewards, mask, groups = inputs()
    ix = torch.tensor(rows)
    adv, stats = est.grpo_passk_advantages(rewards.sum(1)[ix], mask[ix], groups[ix], norm_by_std=norm_by_std)
    close(adv, expected)
    assert stats["frac_zero_std"] == pytest.approx(2 / 3)  # groups b and d of a, b, d


def test_opo_and_gpg_match_verl():
    rewards, mask, groups = inputs()
    close(est.opo_advantages(rewards.sum(1), mask, groups, singleton="verl")[0], OPO)
    adv, stats = est.gpg_advantages(rewards.sum(1), mask, groups, singleton="verl")
    close(adv, GPG)
    assert stats["gpg_alpha"] == pytest.approx(10 / 9)  # one outcome of ten is 0


def test_remax_matches_verl():
    rewards, mask, _ = inputs()
    adv, returns = est.remax_advantages(rewards, mask, t(REMAX_BASELINES))
    close(adv, t(REMAX) * t(MASK))
    close(returns, t(RETURNS) * t(MASK))


@pytest.mark.parametrize("case, kwargs", [("plain", {}), ("is_weights", {"is_weights": True}),
                                          ("zero_tail", {"zero_tail": True})])
def test_optimal_token_baseline_matches_verl(case, kwargs):
    rewards, mask, groups = inputs()
    if kwargs.get("is_weights"):
        kwargs = {"is_weights": t(IS_WEIGHTS)}
    adv, returns = est.otb_advantages(rewards, mask, groups, t(P).log(), t(SUM_PI_SQUARED), singleton="verl", **kwargs)
    close(adv, {"plain": OTB, "is_weights": OTB_IS, "zero_tail": OTB_TAIL}[case])
    close(returns, t(RETURNS) * t(MASK))


@pytest.mark.parametrize("method, power, expected", [("pow", 2.0, PF_POW), ("max_min", 2.0, PF_MAX_MIN),
                                                     ("max_random", 2.0, PF_MAX_RANDOM), ("pow", 1.5, PF_POW1_5)])
def test_pf_ppo_weights_match_verl(method, power, expected):
    close(est.pf_ppo_weights(t(OUTCOMES), method, power), expected)


def test_cogym_singletons_get_no_signal():
    """The shipped plug-ins' convention (singleton="zero"), where verl gives a lone response its score."""
    rewards, mask, groups = inputs()
    lone = torch.tensor([u == "c" for u in UIDS])
    for fn in (est.opo_advantages, est.gpg_advantages, est.grpo_passk_advantages):
        adv, stats = fn(rewards.sum(1), mask, groups)
        assert adv[lone].abs().sum() == 0 and adv[~lone].abs().sum() > 0
        assert stats["singleton_groups"] == 1
    adv, _ = est.otb_advantages(rewards, mask, groups, t(P).log(), t(SUM_PI_SQUARED))
    assert adv[lone].abs().sum() == 0 and adv[~lone].abs().sum() > 0


# -- the multi-turn optimal token baseline (otb_mode: multi_turn) -------------------------------------
# verl b178a3cd56f58b2d502255daba591e92833930a7, ``compute_multi_turn_optimal_token_baseline_advantage``
# (handle_zero_tail: its default True; False; and with rollout_is_weights = MT_IS), and
# ``compute_optimal_token_baseline_advantage`` (MT_SINGLE) on the same rows, float64 tensors there. The
# batch: 10 rows of width 8 whose masks have gaps (a game's or a tool's tokens between the model's
# messages; row 8 starts with two of them), shaping on every position (off the mask both ignore it).
# Groups: "a" 4 rows (three tied at the most model tokens: no zero tail), "b" 2 rows tied in length
# and in outcome, "c" a singleton, "d" 3 rows of which one (7) has no loss token (both leave it out
# of the group; "d"'s longest row 8 has 5 model tokens against row 9's 4: its zero tail). The
# multi-turn baseline is shared by the k-th model token of each row, the single-turn one by the
# response position. verl's returns carry across a gap; cogym's are 0 off the mask (compared * MT_MASK).
MT_UIDS = ["a", "a", "a", "a", "b", "b", "c", "d", "d", "d"]
MT_MASK = [  # 1: the model's tokens; 0 inside a row: game/tool tokens between its messages; trailing 0: padding
    [1, 1, 0, 0, 1, 1, 1, 0],
    [1, 1, 1, 0, 0, 1, 0, 0],
    [1, 0, 1, 0, 1, 0, 1, 1],
    [1, 1, 1, 1, 1, 0, 0, 0],
    [1, 1, 0, 1, 1, 0, 0, 0],
    [1, 0, 0, 1, 1, 1, 0, 0],
    [1, 1, 0, 0, 1, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 1, 1, 0, 1, 1, 1],
    [1, 1, 1, 0, 0, 0, 1, 0],
]
MT_OUTCOMES = [1.0, 0.0, 0.5, 1.0, 1.0, 1.0, 0.7, 1.0, -0.5, 0.25]
MT_SHAPING = [  # on every position: off the mask it must be ignored
    [-0.02, 0.01, 0.3, 0.3, -0.01, 0.02, 0.03, 0.4],
    [0.01, -0.03, 0.02, 0.5, 0.5, 0.01, 0.2, 0.2],
    [0.02, 0.7, -0.01, 0.7, 0.03, 0.7, -0.02, 0.01],
    [-0.01, 0.02, 0.01, -0.02, 0.03, 0.1, 0.1, 0.1],
    [0.0, 0.0, 0.9, 0.0, 0.0, 0.9, 0.9, 0.9],
    [0.0, 0.6, 0.6, 0.0, 0.0, 0.0, 0.6, 0.6],
    [0.05, -0.05, 0.2, 0.2, 0.01, 0.3, 0.3, 0.3],
    [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
    [0.4, 0.4, 0.02, -0.01, 0.4, 0.03, 0.01, -0.02],
    [-0.03, 0.02, 0.01, 0.8, 0.8, 0.8, 0.04, 0.8],
]
MT_P = [
    [0.9, 0.6, 0.5, 0.5, 0.3, 0.8, 0.95, 0.5],
    [0.7, 0.2, 0.85, 0.5, 0.5, 0.4, 0.5, 0.5],
    [0.55, 0.5, 0.9, 0.5, 0.65, 0.5, 0.25, 0.99],
    [0.8, 0.75, 0.6, 0.35, 0.9, 0.5, 0.5, 0.5],
    [0.6, 0.45, 0.5, 0.7, 0.95, 0.5, 0.5, 0.5],
    [0.6, 0.5, 0.5, 0.3, 0.8, 0.85, 0.5, 0.5],
    [0.5, 0.9, 0.5, 0.5, 0.4, 0.5, 0.5, 0.5],
    [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
    [0.5, 0.5, 0.7, 0.2, 0.5, 0.9, 0.6, 0.45],
    [0.35, 0.8, 0.65, 0.5, 0.5, 0.5, 0.9, 0.5],
]
MT_EXTRA = [  # sum_pi_squared = p^2 + MT_EXTRA (the rest of the distribution's squared mass)
    [0.01, 0.05, 0.0, 0.0, 0.2, 0.02, 0.0, 0.0],
    [0.03, 0.3, 0.01, 0.0, 0.0, 0.1, 0.0, 0.0],
    [0.05, 0.0, 0.0, 0.0, 0.04, 0.0, 0.15, 0.0],
    [0.02, 0.01, 0.06, 0.12, 0.0, 0.0, 0.0, 0.0],
    [0.04, 0.08, 0.0, 0.02, 0.0, 0.0, 0.0, 0.0],
    [0.04, 0.0, 0.0, 0.2, 0.01, 0.02, 0.0, 0.0],
    [0.1, 0.01, 0.0, 0.0, 0.09, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.03, 0.25, 0.0, 0.0, 0.05, 0.1],
    [0.2, 0.02, 0.03, 0.0, 0.0, 0.0, 0.01, 0.0],
]
MT_IS = [
    [1.0, 0.9, 1.0, 1.0, 1.2, 1.1, 0.8, 1.0],
    [1.3, 1.0, 0.7, 1.0, 1.0, 0.95, 1.0, 1.0],
    [0.9, 1.0, 1.05, 1.0, 1.4, 1.0, 1.0, 0.6],
    [1.0, 1.1, 0.9, 1.2, 0.85, 1.0, 1.0, 1.0],
    [1.1, 0.9, 1.0, 1.0, 1.05, 1.0, 1.0, 1.0],
    [0.75, 1.0, 1.0, 1.2, 0.9, 1.1, 1.0, 1.0],
    [1.2, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.5, 0.8, 1.0, 1.0, 1.1, 0.9],
    [0.95, 1.05, 1.0, 1.0, 1.0, 1.0, 1.3, 1.0],
]
MT_RETURNS = [
    [1.03, 1.05, 1.04, 1.04, 1.04, 1.05, 1.03, 0],
    [0.01, 0, 0.03, 0.01, 0.01, 0.01, 0, 0],
    [0.53, 0.51, 0.51, 0.52, 0.52, 0.49, 0.49, 0.51],
    [1.03, 1.04, 1.02, 1.01, 1.03, 0, 0, 0],
    [1, 1, 1, 1, 1, 0, 0, 0],
    [1, 1, 1, 1, 1, 1, 0, 0],
    [0.71, 0.66, 0.71, 0.71, 0.71, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [-0.47, -0.47, -0.47, -0.49, -0.48, -0.48, -0.51, -0.52],
    [0.29, 0.32, 0.3, 0.29, 0.29, 0.29, 0.29, 0],
]
MT_TIR = [
    [0.549502773, 0.745445106, 0, 0, 0.477231185, 0.501073386, 0.195547919, 0],
    [-0.470497227, -0.304554894, -0.532768815, 0, 0, -0.538926614, 0, 0],
    [0.049502773, 0, 0.205445106, 0, -0.0427688152, 0, -0.0589266144, -0.324452081],
    [0.549502773, 0.735445106, 0.457231185, 0.461073386, 0.195547919, 0, 0, 0],
    [2.49999994e-08, 6.7911714e-09, 0, 6.12557416e-09, 5.96125183e-09, 0, 0, 0],
    [2.49999994e-08, 0, 0, 6.7911714e-09, 6.12557416e-09, 5.96125183e-09, 0, 0],
    [0.71, 0.66, 0, 0, 0.71, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, -0.637171715, -0.326632202, 0, -0.351105122, -0.328057555, -0.52],
    [0.122828285, 0.483367798, 0.428894878, 0, 0, 0, 0.471942445, 0],
]
MT_TIR_NO_TAIL = [
    [0.549502773, 0.745445106, 0, 0, 0.477231185, 0.501073386, 0.195547919, 0],
    [-0.470497227, -0.304554894, -0.532768815, 0, 0, -0.538926614, 0, 0],
    [0.049502773, 0, 0.205445106, 0, -0.0427688152, 0, -0.0589266144, -0.324452081],
    [0.549502773, 0.735445106, 0.457231185, 0.461073386, 0.195547919, 0, 0, 0],
    [2.49999994e-08, 6.7911714e-09, 0, 6.12557416e-09, 5.96125183e-09, 0, 0, 0],
    [2.49999994e-08, 0, 0, 6.7911714e-09, 6.12557416e-09, 5.96125183e-09, 0, 0],
    [0.71, 0.66, 0, 0, 0.71, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, -0.637171715, -0.326632202, 0, -0.351105122, -0.328057555, -3.18529858e-09],
    [0.122828285, 0.483367798, 0.428894878, 0, 0, 0, 0.471942445, 0],
]
MT_TIR_IS = [
    [0.634316942, 0.776932954, 0, 0, 0.454202085, 0.458960619, 0.179125202, 0],
    [-0.385683058, -0.273067046, -0.555797915, 0, 0, -0.581039381, 0, 0],
    [0.134316942, 0, 0.236932954, 0, -0.0657979154, 0, -0.101039381, -0.340874798],
    [0.634316942, 0.766932954, 0.434202085, 0.418960619, 0.179125202, 0, 0, 0],
    [2.82087439e-08, 6.03163586e-09, 0, 5.5296735e-09, 5.36882117e-09, 0, 0, 0],
    [2.82087439e-08, 0, 0, 6.03163586e-09, 5.5296735e-09, 5.36882117e-09, 0, 0],
    [0.71, 0.66, 0, 0, 0.71, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, -0.513307936, -0.346592891, 0, -0.373456975, -0.339634964, -0.52],
    [0.246692064, 0.463407109, 0.406543025, 0, 0, 0, 0.460365036, 0],
]
MT_SINGLE = [
    [0.549502773, 0.783356768, 0, 0, 0.102244449, 0.637551828, 0.28974057, -0],
    [-0.470497227, -0.266643232, -0.278169837, -0, -0, -0.402448172, -0, -0],
    [0.049502773, 0, 0.201830163, -0, -0.417755551, 0, -0.25025943, 4.48312221e-09],
    [0.549502773, 0.773356768, 0.711830163, 1.12849161e-08, 0.0922444486, -0, -0, -0],
    [2.49999994e-08, 1.71673817e-08, 0, 6.31911523e-09, 6.11620787e-09, -0, 0, 0],
    [2.49999994e-08, 0, 0, 6.31911523e-09, 6.11620787e-09, 1.0178117e-08, 0, 0],
    [0.71, 0.66, 0, 0, 0.71, 0, 0, 0],
    [-0, -0, -0, 0, 0, 0, 0, 0],
    [-0, -0, -0.673246071, -4.85148505e-09, -0, -4.70588229e-09, -0.328057555, -3.18529858e-09],
    [4.65863448e-09, 4.68864464e-09, 0.0967539288, 0, 0, 0, 0.471942445, 0],
]


def multi_turn_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token rewards, mask, groups, logp, sum_pi_squared) of the multi-turn batch."""
    mask, rewards = t(MT_MASK), t(MT_SHAPING)
    for i, outcome in enumerate(MT_OUTCOMES):
        if mask[i].any():
            rewards[i, int(mask[i].nonzero()[-1])] += outcome
    p = t(MT_P)
    return rewards, mask, group_index(MT_UIDS), p.log(), p ** 2 + t(MT_EXTRA)


@pytest.mark.parametrize("mode, kwargs, expected", [
    ("multi_turn", {"zero_tail": True}, MT_TIR),
    ("multi_turn", {}, MT_TIR_NO_TAIL),
    ("multi_turn", {"zero_tail": True, "is_weights": True}, MT_TIR_IS),
    ("single_turn", {}, MT_SINGLE),
])
def test_multi_turn_optimal_token_baseline_matches_verl(mode, kwargs, expected):
    rewards, mask, groups, logp, sum_pi_squared = multi_turn_inputs()
    if kwargs.get("is_weights"):
        kwargs = dict(kwargs, is_weights=t(MT_IS))
    adv, returns = est.otb_advantages(rewards, mask, groups, logp, sum_pi_squared, singleton="verl", mode=mode,
                                      **kwargs)
    close(adv, expected)
    close(returns, t(MT_RETURNS) * mask)


def test_the_two_otb_modes_differ_only_on_rows_with_gaps():
    rewards, mask, groups, logp, sum_pi_squared = multi_turn_inputs()
    single, multi = (est.otb_advantages(rewards, mask, groups, logp, sum_pi_squared, mode=mode)[0]
                     for mode in ("single_turn", "multi_turn"))
    assert not torch.allclose(single, multi)
    r, contiguous, g = inputs()  # the first batch: contiguous masks but in row 3, of group "a", left out
    keep = torch.tensor([u != "a" for u in UIDS])
    a, b = (est.otb_advantages(r[keep], contiguous[keep], g[keep], t(P).log()[keep], t(SUM_PI_SQUARED)[keep],
                               mode=mode)[0] for mode in ("single_turn", "multi_turn"))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="mode must be one of single_turn, multi_turn"):
        est.otb_advantages(rewards, mask, groups, logp, sum_pi_squared, mode="tir")


def test_otb_mode_is_a_key_of_otb():
    assert LearnerConfig.from_flat(algorithm="otb").settings("otb").otb_mode == "single_turn"
    assert LearnerConfig.from_flat(algorithm="otb", otb_mode="multi_turn").settings("otb").otb_mode == "multi_turn"
    with pytest.raises(ValueError, match="otb_mode must be one of single_turn, multi_turn; got 'tir'"):
        LearnerConfig.from_flat(algorithm="otb", otb_mode="tir").validate()


def test_an_otb_learner_trains_on_multi_turn_rows(tiny_model_dir):
    """Rows with game tokens inside them (Turn.mask 0 on every third token) train with otb_mode multi_turn."""
    policy = Policy.from_pretrained(str(tiny_model_dir))
    turns = _turns(policy)
    for turn in turns:
        turn.mask = [int(j % 3 != 1) for j in range(len(turn.response_ids))]
        turn.logprobs = [lp * m for lp, m in zip(turn.logprobs, turn.mask)]
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="otb", engine="torch", lr=1e-3, otb_mode="multi_turn",
                                                      otb_zero_tail=True))
    metrics = learner.update(turns)
    assert metrics["trained_rows"] == 8 and metrics["adv_abs_mean"] > 0 and learner.steps == 1
