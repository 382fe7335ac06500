"""Parity of cogym's policy losses (cogym.learners.policy_losses) with verl's own functions.

Every expected number below was computed ONCE from verl's verl/trainer/ppo/core_algos.py at commit
b178a3cd56f58b2d502255daba591e92833930a7 (the function is named on each case), called as
``fn(OLD, logp, adv, MASK, loss_agg, ActorConfig(...), None)`` on the float64 tensors below, with the
ActorConfig's clip_ratio_low / clip_ratio_high / clip_ratio_c=3 / tau_pos / tau_neg and its
PolicyLossConfig (clip_cov_ratio, clip_cov_lb, clip_cov_ub, kl_cov_ratio, ppo_kl_coef = cogym's
kl_cov_coef) set to the case's knobs (cogym's defaults otherwise, which are verl's), and the gradient
taken w.r.t. ``logp``. Nothing of verl is imported or fetched here. cogym runs the same case through
:func:`cogym.learners.objective.objective` (``policy_loss`` and the knobs in its config); the loss, its
gradient and the metrics verl reports agree to 1e-6 (in fact to ~2e-9: verl divides by count + 1e-8).

Notes on the cases:
* verl's gspo and sapo aggregate seq-mean-token-mean and geo_mean averages over sequences whatever
  loss_agg_mode is; the cases with another mode check that cogym's do the same.
* seq-mean-token-sum-norm: verl's loss_scale_factor defaults to the padded width (4), cogym's
  norm_const is set to 4.
* clip_cov draws the tokens to cut with torch.randperm among the candidates (valid, not clipped by
  PPO, clip_cov_lb < cov < clip_cov_ub) when there are more than its budget max(1, int(ratio * n));
  each case here has at most that many candidates (1 of budget 1, 2 of budget 2, 0), so every
  candidate is cut and the selection is deterministic whatever the RNG.
* kl_cov's top-k is over covariances without ties in these cases (its selection is deterministic).
* no row is fully masked: verl's geo_mean counts such a row in its mean over rows, cogym's num_seqs
  does not (the row adds 0 either way).
"""

from __future__ import annotations

import pytest
import torch

from cogym.learners.objective import ObjectiveConfig, objective
from cogym.learners.policy_losses import BUILTIN

F64 = torch.float64
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], dtype=F64)
OLD = torch.tensor([[-1.2, -0.4, -2.3, -0.9], [-0.7, -1.6, -0.2, -3.0], [-0.5, -1.1, -2.0, -0.8]], dtype=F64)
# logp - OLD: inside the clip range [ln 0.8, ln 1.2] and outside it on both sides (padding included)
DELTA = torch.tensor([[0.05, -0.5, 0.3, -0.1], [0.8, -0.15, 0.12, 0.4], [-0.3, 0.25, 0.6, -0.2]], dtype=F64)
ADVANTAGES = {
    "seq": torch.tensor([[1.0] * 4, [-0.7] * 4, [0.4] * 4], dtype=F64),  # one advantage per sequence
    "tok": torch.tensor([[1.3, -0.2, 0.6, -1.1], [-0.9, 0.4, -0.3, 0.8], [0.5, -1.4, 0.2, 0.7]], dtype=F64),
}
NORM_CONST = 4.0  # verl's default loss_scale_factor: the padded width

# (policy_loss, advantages, loss_agg, knobs, verl's loss, verl's metrics, verl's d loss / d logp)
CASES = [
    ("vanilla", "seq", "token-mean", {},  # compute_policy_loss_vanilla
     -0.176593825872, {'pg_clipfrac': 0.222222221975, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.116807899597, -0.0673922955236, 0, -0.100537490893],
      [0.173097627772, 0.0669439537219, 0.0876941995673, 0],
      [-0.0329252542525, 0, 0, -0]]),
    ("vanilla", "seq", "seq-mean-token-mean", {},  # compute_policy_loss_vanilla
     -0.11520536449, {'pg_clipfrac': 0.222222221975, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.087605924479, -0.0505442215164, 0, -0.0754031179812],
      [0.173097627195, 0.0669439534988, 0.087694199275, 0],
      [-0.0493878811318, 0, 0, -0]]),
    ("vanilla", "seq", "seq-mean-token-sum", {},  # compute_policy_loss_vanilla
     -0.529781477616, {'pg_clipfrac': 0.222222221975, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.350423698792, -0.202176886571, 0, -0.301612472679],
      [0.519292883315, 0.200831861166, 0.263082598702, 0],
      [-0.0987757627576, 0, 0, -0]]),
    ("vanilla", "tok", "seq-mean-token-sum-norm", {},  # compute_policy_loss_vanilla
     0.62321197703, {'pg_clipfrac': 0.222222221975, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.341663106322, 0, 0, 0.24883028996],
      [0.500746708911, -0.0860707976425, 0.0845622638685, 0],
      [-0.0926022775852, 0.449408895841, 0, -0]]),
    ("vanilla", "tok", "token-mean", {'clip_high': 0.28},  # compute_policy_loss_vanilla
     0.271649767569, {'pg_clipfrac': 0.222222221975, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.151850269477, 0, 0, 0.110591239982],
      [0.222554092849, -0.0382536878411, 0.037583228386, 0],
      [-0.0411565678157, 0.19973728704, 0, -0]]),
    ("gspo", "seq", "seq-mean-token-mean", {},  # compute_policy_loss_gspo
     -0.14156903262, {'pg_clipfrac': 0.0, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.0782844217054, -0.0782844217054, -0.0782844217054, -0.0782844217054],
      [0.100536658385, 0.100536658385, 0.100536658385, 0],
      [-0.0650206604768, -0.0650206604768, -0, -0]]),
    ("gspo", "seq", "token-mean", {},  # compute_policy_loss_gspo
     -0.14156903262, {'pg_clipfrac': 0.0, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.0782844217054, -0.0782844217054, -0.0782844217054, -0.0782844217054],
      [0.100536658385, 0.100536658385, 0.100536658385, 0],
      [-0.0650206604768, -0.0650206604768, -0, -0]]),
    ("gspo", "tok", "seq-mean-token-mean", {'clip_low': 0.0003, 'clip_high': 0.0004},  # compute_policy_loss_gspo
     0.239434273551, {'pg_clipfrac': 0.444444443951, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.101769748217, 0, -0.0469706530232, 0],
      [0.129261417924, 0, 0.0430871393079, 0],
      [-0.081275825596, 0, 0, 0]]),
    ("gspo", "tok", "seq-mean-token-sum", {'clip_low': 0.1, 'clip_high': 0.28},  # compute_policy_loss_gspo
     0.214785501582, {'pg_clipfrac': 0.111111110988, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.101769748217, 0.0156568843411, -0.0469706530232, 0.086112863876],
      [0.129261417924, 0, 0.0430871393079, 0],
      [-0.081275825596, 0.227572311669, -0, -0]]),
    ("cispo", "seq", "token-mean", {},  # compute_policy_loss_cispo
     0.540476898229, {'pg_clipfrac': 0.555555554938, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.116807899597, -0.0888888888889, -0.133333333333, -0.100537490893],
      [0.0933333333333, 0.0669439537219, 0.0876941995673, 0],
      [-0.0355555555556, -0.0533333333333, -0, -0]]),
    ("cispo", "tok", "seq-mean-token-mean", {'clip_high': 0.28},  # compute_policy_loss_cispo
     0.0402313898914, {'pg_clipfrac': 0.555555554938, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.113887701823, 0.0133333333, -0.06399999984, 0.0829434297793],
      [0.127999999573, -0.0382536877136, 0.0375832282607, -0],
      [-0.0666666663333, 0.298666665173, -0, -0]]),
    ("cispo", "tok", "seq-mean-token-sum-norm", {'clip_low': 0.5, 'clip_high': 0.1},  # compute_policy_loss_cispo
     0.362394120566, {'pg_clipfrac': 0.444444443951, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.341663106322, 0.0303265329856, -0.165, 0.24883028996],
      [0.2475, -0.0860707976425, 0.0825, -0],
      [-0.0926022775852, 0.385, -0, -0]]),
    ("gmpo", "seq", "token-mean", {},  # compute_policy_loss_geo_mean
     -0.130626904287, {'pg_clipfrac': 0.444444443951, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.111111110988},
     [[-0.0763515722725, -0.0763515722725, 0, -0.0763515722725],
      [0.100536657964, 0.100536657964, 0.100536657964, 0],
      [-0.0634152943484, 0, 0, -0]]),
    ("gmpo", "seq", "seq-mean-token-sum", {'clip_low': 0.1, 'clip_high': 0.4},  # compute_policy_loss_geo_mean
     -0.136500076074, {'pg_clipfrac': 0.222222221975, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.222222221975},
     [[-0.0782844215219, -0.0782844215219, -0.0782844215219, -0.0782844215219],
      [0.102226310248, 0, 0.102226310248, 0],
      [-0.0650206601598, -0.0650206601598, 0, 0]]),
    ("gmpo", "tok", "token-mean", {},  # compute_policy_loss_geo_mean
     0.211816634244, {'pg_clipfrac': 0.222222221975, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.333333332963},
     [[-0.0123447224448, 0, 0, -0.0123447224448],
      [0.0382996792243, 0.0382996792243, 0.0382996792243, 0],
      [0.0731482426798, 0.0731482426798, 0, 0]]),
    ("clip_cov", "seq", "token-mean", {'clip_cov_ratio': 0.2, 'clip_cov_lb': 0.05, 'clip_cov_ub': 5.0},  # compute_policy_loss_clip_cov
     -0.243537779594, {'pg_clipfrac': 0.111111110988, 'ppo_kl': -0.0522222221642},
     [[-0.116807899597, -0.0673922955236, 0, -0.100537490893],
      [0.173097627772, 0, 0.0876941995673, 0],
      [-0.0329252542525, 0, 0, -0]]),
    ("clip_cov", "tok", "seq-mean-token-mean", {'clip_cov_ratio': 0.3, 'clip_cov_lb': 0.05, 'clip_cov_ub': 5.0},  # compute_policy_loss_clip_cov
     0.360935193344, {'pg_clipfrac': 0.222222221975, 'ppo_kl': -0.0522222221642},
     [[-0.113887701823, 0, 0, 0],
      [0.222554092107, -0.0382536877136, 0.0375832282607, 0],
      [0, 0.299605929062, 0, -0]]),
    ("clip_cov", "tok", "token-mean", {},  # compute_policy_loss_clip_cov
     0.276983100902, {'pg_clipfrac': 0.0, 'ppo_kl': -0.0522222221642},
     [[-0.151850269477, 0, 0, 0.110591239982],
      [0.222554092849, -0.0382536878411, 0.037583228386, 0],
      [-0.0411565678157, 0.19973728704, 0, -0]]),
    ("kl_cov", "seq", "token-mean", {'kl_cov_ratio': 0.2},  # compute_policy_loss_kl_cov
     -0.195312600789, {'ppo_kl': 0.285555555238},
     [[-0.116807899597, -0.0673922955236, -0.149984311953, -0.100537490893],
      [0.173097627772, 0.0558328426108, 0.0876941995673, 0],
      [-0.0329252542525, -0.0570677962972, 0, -0]]),
    ("kl_cov", "tok", "seq-mean-token-mean", {'kl_cov_ratio': 0.4, 'kl_cov_coef': 1.0},  # compute_policy_loss_kl_cov
     0.471426341977, {'ppo_kl': 0.285555555238},
     [[-0.113887701823, -0.0732244888217, -0.0674929402101, -0.000389903345729],
      [0.222554092107, -0.0382536877136, 0.0375832282607, 0],
      [-0.228401517248, 0.299605929062, 0, -0]]),
    ("kl_cov", "tok", "token-mean", {},  # compute_policy_loss_kl_cov
     0.266026528391, {'ppo_kl': 0.285555555238},
     [[-0.151850269477, 0.0134784591047, -0.0899905871717, 0.110591239982],
      [0.222554092849, -0.0382536878411, 0.037583228386, 0],
      [-0.0522676789268, 0.19973728704, 0, -0]]),
    ("gpg", "seq", "token-mean", {},  # compute_policy_loss_gpg
     0.499888888889, {},
     [[-0.111111111111, -0.111111111111, -0.111111111111, -0.111111111111],
      [0.0777777777778, 0.0777777777778, 0.0777777777778, 0],
      [-0.0444444444444, -0.0444444444444, -0, -0]]),
    ("gpg", "tok", "seq-mean-token-sum", {},  # compute_policy_loss_gpg
     0.463666666667, {},
     [[-0.433333333333, 0.0666666666667, -0.2, 0.366666666667],
      [0.3, -0.133333333333, 0.1, -0],
      [-0.166666666667, 0.466666666667, -0, -0]]),
    ("sapo", "seq", "seq-mean-token-mean", {},  # compute_policy_loss_sapo
     -0.400231821095, {'pg_clipfrac': 0.0, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.0875483767155, -0.0486373241448, -0.109115082895, -0.075232664214],
      [0.11740619305, 0.0665872264377, 0.0873024641286, 0],
      [-0.0485676693604, -0.0838982613137, -0, -0]]),
    ("sapo", "tok", "token-mean", {'sapo_tau_pos': 2.0, 'sapo_tau_neg': 3.0},  # compute_policy_loss_sapo
     0.151026697132, {'pg_clipfrac': 0.0, 'ppo_kl': -0.0522222221642, 'pg_clipfrac_lower': 0.0},
     [[-0.113588846214, 0.00726881646565, -0.0598618995992, 0.0812760849476],
      [0.0214313554635, -0.0375209752731, 0.0362414662339, -0],
      [-0.0577666899109, 0.251187207185, -0, -0]]),

]


@pytest.mark.parametrize("loss_name, adv, loss_agg, knobs, value, metrics, grad", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_policy_loss_matches_verl(loss_name, adv, loss_agg, knobs, value, metrics, grad):
    logp = (OLD + DELTA).clone().requires_grad_(True)
    cfg = ObjectiveConfig(policy_loss=loss_name, loss_agg=loss_agg, norm_const=NORM_CONST, **knobs)
    loss, got = objective(logp, OLD, ADVANTAGES[adv], MASK, cfg, num_tokens=float(MASK.sum()), num_seqs=3.0)
    loss.backward()
    assert float(loss) == pytest.approx(value, abs=1e-6)
    torch.testing.assert_close(logp.grad, torch.tensor(grad, dtype=F64), atol=1e-6, rtol=0)
    for name, expected in metrics.items():  # verl reports a constant 0 where a metric means nothing here
        assert got.get(name, 0.0) == pytest.approx(expected, abs=1e-6), name


def test_every_shipped_loss_has_a_parity_case():
    assert {c[0] for c in CASES} == set(BUILTIN)
