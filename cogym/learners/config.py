"""Configuration of one learner (one trained policy): the keys every algorithm shares, and each
algorithm's own config (docs/algorithms.md names and defaults).

In YAML every key of a learner is flat (``learners.<id>.lam: 0.95``); :func:`split_keys` sends the
common keys here and the others to the config of the algorithm that declares them
(:mod:`cogym.learners.algorithms`), so a key means one thing whichever algorithm it belongs to.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from cogym.core.names import did_you_mean
from cogym.core.config_key import key
from cogym.learners.losses import check_mismatch_options, LOSS_AGG_MODES
from cogym.learners.packing import PACKING
from cogym.learners.policy_losses import check_knobs, get as policy_loss_fn
from cogym.learners.registry import FROZEN, get, names, reserve


MULTI_TURN = ("joined", "turns")


@dataclass
class LearnerConfig:
    """How one policy is trained: the common keys, and ``algorithm_configs`` (name -> that algorithm's
    config) for the algorithms it uses (:meth:`settings` gives one, with defaults if none was set)."""

    algorithm: str = key("grpo", "A registered algorithm (the shipped ones and their own keys are listed below, under "
                         "'algorithm: <name>'), a user's (game.modules), or frozen.")
    role_algorithms: dict = key(factory=dict, help="A policy shared by several roles may use a different estimator per "
                                "role, e.g. {proposer: reinforce_pp} on a policy whose algorithm is grpo (one model, two "
                                "algorithms).")
    engine: str = key("deepspeed", "deepspeed | torch")
    lr: float = key(1e-4, "the optimizer's (AdamW's) learning rate")
    weight_decay: float = key(0.0, "the optimizer's (AdamW's) weight decay")
    max_grad_norm: float = key(1.0, "gradients are clipped to this global norm before each optimizer step")
    micro_batch_size: int = key(256, "A micro-batch (one forward/backward) holds at most micro_batch_size rows and at "
                                "most max_tokens_per_micro_batch padded tokens (rows x its longest row; null: no token "
                                "limit). It ends before a group of rows sharing a prompt rather than inside it where it "
                                "can, so a packed forward reads each prompt once. The loss is normalised over the whole "
                                "step, so the split changes memory, not the update.")
    max_tokens_per_micro_batch: Optional[int] = key(4096, "the most padded tokens (rows x its longest row) in a "
                                                    "micro-batch; null: no token limit")
    epochs: int = key(1, "passes over each rollout's rows per update")
    policy_loss: str = key("vanilla", "The policy-gradient term (docs/algorithms.md §14): vanilla (PPO's "
                           "clipped surrogate), gspo (sequence-level ratio), cispo (clipped stop-gradient IS weight), "
                           "gmpo (geometric mean of the token ratios), clip_cov, kl_cov, gpg (REINFORCE), sapo (soft "
                           "gate), or a user's. gspo and sapo aggregate seq-mean-token-mean and gmpo averages over "
                           "sequences whatever loss_agg is (as verl).")
    clip_low: float = key(0.2, "PPO clipping: the ratio's term is clipped below 1 - clip_low (also gspo's, cispo's, "
                          "gmpo's and clip_cov's bound)")
    clip_high: float = key(0.2, "PPO clipping: the ratio's term is clipped above 1 + clip_high (DAPO's clip-higher: "
                           "clip_high > clip_low; also gspo's, cispo's, gmpo's and clip_cov's bound)")
    dual_clip: Optional[float] = key(3.0, "dual-clip PPO: the loss of a token with advantage A < 0 is at most "
                                     "-A * dual_clip (> 1); null: off (vanilla only)")
    clip_cov_ratio: float = key(0.0002, "clip_cov: at most this share (and at least one) of a micro-batch's valid tokens, "
                                "drawn among those with clip_cov_lb < cov < clip_cov_ub, lose their term; in (0, 1]")
    clip_cov_lb: float = key(1.0, "clip_cov: the lower bound of the covariance (A - mean A)(logp - mean logp) of a "
                             "token it may cut")
    clip_cov_ub: float = key(5.0, "clip_cov: the upper bound of that covariance")
    kl_cov_ratio: float = key(0.0002, "kl_cov: the share (at least one) of a micro-batch's valid tokens, those of "
                              "highest covariance (A - mean A)(logp - mean logp), that get the KL penalty; in (0, 1]")
    kl_cov_coef: float = key(0.1, "kl_cov: the weight of the penalty |logp - logp_old| on those tokens (verl's "
                             "ppo_kl_coef)")
    sapo_tau_pos: float = key(1.0, "sapo: the gate's temperature on tokens with A > 0 (verl's tau_pos)")
    sapo_tau_neg: float = key(1.05, "sapo: the gate's temperature on tokens with A <= 0 (verl's tau_neg)")
    loss_agg: str = key("token-mean", "how the token losses of a step are aggregated", choices=LOSS_AGG_MODES)
    norm_const: Optional[float] = key(None, "C of the seq-mean-token-sum-norm / dr_grpo modes")
    kl_in_reward: str = key("off", "off | k1 | k2 | k3 | abs")
    kl_reward_coef: float = key(0.001, "the weight of the KL penalty in the reward (kl_in_reward)")
    kl_in_loss: str = key("off", "off | k2 | k3 | k3+ | k1+")
    kl_loss_coef: float = key(0.001, "the weight of the KL term in the loss (kl_in_loss)")
    ref_sync_every: int = key(0, "A moving KL anchor (TR-DPO; TRL's sync_ref_model): every ref_sync_every optimizer "
                              "steps each weight of the reference becomes ref_sync_mix * policy + (1 - ref_sync_mix) * "
                              "reference (dpo: its pi_ref, with KL off). 0: the reference stays the initial model. A "
                              "small mix every step keeps the policy near a slow average of itself, which damps the "
                              "cycling of self-play in zero-sum games (magnetic mirror descent with a moving magnet).")
    ref_sync_mix: float = key(1.0, "the policy's share of the moved KL reference, in (0, 1] (1: a copy)")
    entropy_coef: float = key(0.0, "the weight of an entropy bonus in the loss (0: off)")
    tis_cap: Optional[float] = key(None, "Truncated importance sampling against a sampler/trainer mismatch "
                                   "(docs/algorithms.md §5.6; verl's TIS): each token's policy-gradient term is weighted "
                                   "by min(exp(logp_trainer_old - logp_behaviour), tis_cap), logp_trainer_old being the "
                                   "trainer's own log-prob before the update (the first epoch's forward), and the PPO "
                                   "ratio is taken against logp_trainer_old. A number > 0 (e.g. 2); null: off.")
    mismatch_mask: Optional[Sequence[float]] = key(None, "Masking against a sampler/trainer mismatch (§5.6): [low, high] "
                                                   "with 0 < low < 1 < high; tokens whose exp(logp_trainer_old - "
                                                   "logp_behaviour) is outside it get weight 0 in the policy-gradient "
                                                   "term (they stay in the loss's denominators) and the PPO ratio is "
                                                   "taken against logp_trainer_old. null: off. With tis_cap as well, the "
                                                   "kept tokens are weighted as TIS weights them.")
    dynamic_sampling: str = key("off", "DAPO dynamic sampling (§7.2): off | std_gt_0 | mean_in_open | mean_in_closed. "
                                "Groups failing the predicate are dropped and more episodes are played (at most "
                                "max_sampling_rounds rollouts in all) until as many groups survive as one rollout makes; "
                                "the surplus is trimmed.")
    dynamic_sampling_low: Optional[float] = key(None, "the low bound of the mean predicates; null: the predicate's "
                                                "default (0 open, 0.2 closed)")
    dynamic_sampling_high: Optional[float] = key(None, "the high bound of the mean predicates; null: the predicate's "
                                                 "default (1 open, 0.8 closed)")
    max_sampling_rounds: int = key(10, "dynamic sampling: the most rollouts played for one update")
    overlong_buffer: int = key(0, "DAPO overlong shaping (§7.4): with overlong_buffer > 0, a response longer than "
                               "max_new_tokens - overlong_buffer loses (excess / overlong_buffer) * overlong_penalty, up "
                               "to overlong_penalty at max_new_tokens.")
    overlong_penalty: float = key(1.0, "overlong shaping: what a response of max_new_tokens tokens loses")
    mask_truncated: bool = key(False, "drop every unfinished response (cut at max_new_tokens; at token level also one "
                               "the game interrupted or max_turn_tokens cut) from the loss")
    reward_from: str = key("", "A policy of this run whose learner is a reward_model: this policy's turns are rewarded by "
                           "its score (its current weights, before it trains on them) instead of the game's reward, and "
                           "it trains on them with the game's reward (docs/algorithms.md §17). \"\": the "
                           "game's reward.")
    multi_turn: str = key("joined", "A conversation role's moves of one game (cogym.agents.conversation): \"joined\" "
                          "trains them as one sequence whose loss covers only the ids the model wrote; \"turns\" trains "
                          "each move as a row of its own.", choices=MULTI_TURN)
    packing: str = key("auto", "The training forward's layout (cogym.learners.packing): rows packed end to end and the "
                       "rows of a group that share a prompt reading one copy of it. auto: where the cost model says it "
                       "pays, after a one-time check that the model's packed log-probs equal its plain ones (else plain, "
                       "with a warning); on: whenever the rows fit a packed row (an error for a model that cannot take "
                       "it); off: plain right-padded rows.", choices=PACKING)
    zero_stage: int = key(0, "DeepSpeed ZeRO stage, 0 to 3 (engine: deepspeed)")
    offload_optimizer: bool = key(False, "ZeRO-Offload: the optimizer state in CPU memory (zero_stage >= 1)")
    offload_params: bool = key(False, "the parameters in CPU memory (zero_stage: 3)")
    algorithm_configs: dict = key(factory=dict, help="name -> the algorithm's own config (its keys are flat in YAML; "
                                  "see split_keys)", repr=False)

    def __post_init__(self) -> None:
        """The mismatch options, the policy loss and its knobs are checked as the config is made (a config
        file's bad value is then a one-line error naming the key); ``mismatch_mask`` is kept as a list, as
        YAML writes it."""
        self.check_mismatch()
        self.check_policy_loss()
        if self.mismatch_mask is not None:
            self.mismatch_mask = list(self.mismatch_mask)

    def check_policy_loss(self) -> None:
        """ValueError for a ``policy_loss`` no module registered, or a loss's knob out of range."""
        policy_loss_fn(self.policy_loss)
        check_knobs(self)

    def check_mismatch(self) -> None:
        """ValueError for a ``tis_cap`` or ``mismatch_mask`` that cannot run (§5.6)."""
        check_mismatch_options(self.tis_cap, self.mismatch_mask)

    def algorithm_names(self) -> tuple[str, ...]:
        """The algorithms this learner trains with: the policy's, then each role's (no repeats)."""
        names = [self.algorithm, *self.role_algorithms.values()]
        return tuple(n for i, n in enumerate(names) if n not in names[:i] and n != FROZEN)

    def settings(self, name: str) -> Any:
        """The config of algorithm ``name`` (created with its defaults on first use)."""
        if name not in self.algorithm_configs:
                self.algorithm_configs[name] = get(name).Config()
        return self.algorithm_configs[name]

    def validate(self) -> None:
        """ValueError (what, why, fix) for an unknown algorithm or policy loss, one that cannot train a single role,
        or a value an algorithm's config refuses."""
        get(self.algorithm) if self.algorithm != FROZEN else None
        self.check_policy_loss()
        if self.multi_turn not in MULTI_TURN:
            raise ValueError(f"multi_turn must be one of {', '.join(MULTI_TURN)}, got {self.multi_turn!r}: 'joined' trains a "
                             "seat's conversation moves of one game as one sequence, 'turns' each move as its own row")
        if self.packing not in PACKING:
            raise ValueError(f"packing must be one of {', '.join(PACKING)}, got {self.packing!r}: 'auto' packs the "
                             "training forward where it pays and is exact, 'on' always, 'off' never")
        self.check_ref_sync()
        self.check_mismatch()
        for role, name in self.role_algorithms.items():
            if not get(name).per_role:
                raise ValueError(f"role_algorithms.{role}: {name} trains a whole policy with its own loss and cannot "
                                 f"train one role of it; set algorithm: {name} for this policy instead")
        for name in self.algorithm_names():
            self.settings(name).validate(self)

    def check_ref_sync(self) -> None:
        """ValueError for a moving KL reference that cannot run: a bad period or mix, or KL off."""
        if isinstance(self.ref_sync_every, bool) or not isinstance(self.ref_sync_every, int) or self.ref_sync_every < 0:
            raise ValueError(f"ref_sync_every must be an integer >= 0 (optimizer steps between moves of the KL "
                             f"reference; 0: it stays the initial model), got {self.ref_sync_every!r}")
        mix = self.ref_sync_mix
        if isinstance(mix, bool) or not isinstance(mix, (int, float)) or not 0 < mix <= 1:
            raise ValueError(f"ref_sync_mix must be a number in (0, 1] (the policy's share of the moved reference; "
                             f"1: a copy), got {mix!r}")
        if self.ref_sync_every and self.kl_in_reward == "off" and self.kl_in_loss == "off" \
                and not (self.algorithm != FROZEN and get(self.algorithm).own_reference):  # DPO's pi_ref, KL off
            raise ValueError(f"ref_sync_every={self.ref_sync_every} moves the KL reference, but KL is off; set "
                             "kl_in_loss (e.g. k3) or kl_in_reward, or ref_sync_every: 0")

    @classmethod
    def from_flat(cls, **keys: Any) -> "LearnerConfig":
        """A config from flat keys, as YAML writes them: ``from_flat(algorithm="ppo", lam=0.95)``."""
        common, parts = split_keys(keys)
        return cls(**common, algorithm_configs={n: get(n).Config(**p) for n, p in parts.items()})

    def flat(self) -> dict:
        """The flat keys of this config (common keys, then the algorithms'): ``from_flat(**c.flat())`` == c."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "algorithm_configs"}
        ordered = [*self.algorithm_names(), *(n for n in self.algorithm_configs if n not in self.algorithm_names())]
        for name in ordered:
            if name in self.algorithm_configs:
                for key, value in dataclasses.asdict(self.algorithm_configs[name]).items():
                    out.setdefault(key, value)
        return out


def common_keys() -> frozenset[str]:
    """The keys of :class:`LearnerConfig` a user writes (every algorithm's own keys are elsewhere)."""
    return frozenset(f.name for f in dataclasses.fields(LearnerConfig)) - {"algorithm_configs"}


class UnknownKey(ValueError):
    """A learner key neither common nor declared by any registered algorithm."""

    def __init__(self, key: str, known: list[str]) -> None:
        self.key = key
        self.hint = did_you_mean(key, known, form="did you mean {}?") or f"known keys: {', '.join(known)}"
        super().__init__(f"unknown learner key {key!r} ({self.hint})")


def split_keys(keys: dict) -> tuple[dict, dict[str, dict]]:
    """Split a learner's flat keys into ``(common, {algorithm: its keys})``.

    A key that is not common goes to the algorithms this learner uses that declare it (``gamma`` to
    both reinforce_pp and ppo of one learner); a key only an unused registered algorithm declares
    is kept for that algorithm (``learners.x.algorithm=rloo`` on a config written for prime still
    loads). Any other key is a ValueError naming the closest known key.
    """
    common = {k: v for k, v in keys.items() if k in common_keys()}
    chosen = [n for n in (keys.get("algorithm", LearnerConfig.algorithm), *dict(keys.get("role_algorithms") or {}).values())
              if isinstance(n, str) and n != FROZEN]
    for name in chosen:
        get(name)  # an unknown algorithm is named before its keys are
    fields = {n: {f.name for f in dataclasses.fields(get(n).Config)} for n in names()}
    parts: dict[str, dict] = {}
    for key, value in keys.items():
        if key in common:
            continue
        owners = [n for n in dict.fromkeys(chosen) if key in fields[n]] or [n for n in fields if key in fields[n]][:1]
        if not owners:
            raise UnknownKey(str(key), sorted(common_keys().union(*fields.values())))
        for name in owners:
            parts.setdefault(name, {})[key] = value
    return common, parts


reserve(common_keys())
