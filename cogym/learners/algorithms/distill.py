"""On-policy distillation: the student's own samples scored by a teacher's per-token log-probs.

The student (the policy trained) plays the game; for each of its response tokens y_t a teacher model
gives log pi_T(y_t | x, y_<t). The objective is the reverse KL from the student to the teacher along the
student's own samples, KL(pi || pi_T) = E_{y ~ pi} sum_t [log pi(y_t | .) - log pi_T(y_t | .)], estimated
per token by its k1 term ``d_t = logp_t - logp_T_t`` and minimised in its policy-gradient form: every
token's advantage is

    A_t = -(logp_old_t - logp_T_t)

(logp_old: the behaviour log-probs of the sampled token; no sum over later tokens, no baseline), trained
with the learner's policy-gradient objective (the PPO ratio is 1 on fresh samples, so one epoch is
REINFORCE with a per-token reward). This is the per-token reverse-KL advantage of Thinking Machines'
"On-Policy Distillation" (Lu et al. 2025) and the on-policy, reverse-KL (k1, sampled-token) case of GKD
(Agarwal et al. 2024, lambda = 1, beta = 1). The game's rewards do not enter it; they are only logged.

``distill_teacher`` names the teacher: another policy of the run (one with a seat, e.g. a frozen one), or a
model directory (or ``tiny``) loaded for the learner (on Ray a learner actor holds its own policy only,
so there the teacher is a model directory). It must share the student's vocabulary. Its
log-probs are taken at the rollout's temperature, as the student's are, so a student that matches the
teacher samples as the teacher would at that temperature. It is a per-role estimator: ``role_algorithms``
may distill one role of a policy and train another with GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from cogym.agents.errors import ModelLoadError
from cogym.agents.policy import Policy
from cogym.core.config_key import key
from cogym.learners.algorithm import Algorithm, AlgorithmConfig, Context
from cogym.learners.batch import batch_groups, batch_widths, micro_batches, response_logp
from cogym.learners.rows import Advantages, RoleRows


@dataclass
class DistillConfig(AlgorithmConfig):
    distill_teacher: Optional[str] = key(None, "The teacher: the id of another policy of the run (one with a seat, e.g. "
                                         "a frozen one), or a model directory (or tiny); it must share the student's "
                                         "vocabulary. Required.")

    def validate(self, common) -> None:
        if not isinstance(self.distill_teacher, str) or not self.distill_teacher.strip():
            raise ValueError(f"distill_teacher must name the teacher (another policy's id, or a model directory), got "
                             f"{self.distill_teacher!r}")
        if common.kl_in_reward != "off":
            raise ValueError(f"distill's advantages are the teacher's per-token log-ratios, not rewards; kl_in_reward "
                             f"must be 'off', got {common.kl_in_reward!r} (use kl_in_loss for a KL to the initial model)")


def teacher_of(name: str, ctx: Context) -> torch.nn.Module:
    """The teacher's model: policy ``name`` of the run, else the model directory ``name`` loaded on the
    student's device (frozen). ValueError (one line) for the student itself, a name that is neither, or a
    teacher of another vocabulary."""
    if name == ctx.policy.name:
        raise ValueError(f"distill_teacher {name!r} is the student itself; name another policy or a model directory")
    if name in ctx.policies:
        teacher = ctx.policies[name]
    else:
        try:
            teacher = Policy.from_pretrained(name, name="teacher", device=str(ctx.policy.device))
        except (ModelLoadError, OSError, ValueError) as exc:
            others = ", ".join(sorted(ctx.policies)) or "none loaded here"
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"distill_teacher {name!r} is neither another policy of the run ({others}) nor a model "
                             f"directory ({first})") from None
        teacher.model.eval().requires_grad_(False)
    if teacher.tokenizer.get_vocab() != ctx.policy.tokenizer.get_vocab():
        raise ValueError(f"distill_teacher {name!r} has another vocabulary than policy {ctx.policy.name!r}; the "
                         "teacher scores the student's token ids, so both need one tokenizer")
    return teacher.model


class Distill(Algorithm):
    """Per-token advantages ``-(logp_old - logp_teacher)`` on the student's response tokens."""

    Config = DistillConfig

    def __init__(self, cfg: DistillConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.teacher = teacher_of(cfg.distill_teacher, ctx)

    @torch.no_grad()
    def teacher_logp(self, rows: RoleRows) -> torch.Tensor:
        """The teacher's log-probs (n, L) of the rows' response tokens, 0 off the mask, in micro-batches."""
        b, cfg = rows.batch, self.ctx.cfg
        device = next(self.teacher.parameters()).device
        chunks = micro_batches(batch_widths(b), cfg.micro_batch_size, cfg.max_tokens_per_micro_batch, groups=batch_groups(b))
        return torch.cat([response_logp(self.teacher, b.rows(ix).to(device), self.ctx.temperature, cfg.packing)
                          .to(b.mask.device) for ix in chunks])

    def advantages(self, rows: RoleRows) -> Advantages:
        mask = rows.mask
        log_ratio = (rows.batch.logp_old - self.teacher_logp(rows)) * mask  # k1 of KL(student || teacher) per token
        tokens = mask.sum().clamp(min=1)
        return Advantages(-log_ratio, metrics={"distill_reverse_kl": float(log_ratio.sum() / tokens)})
