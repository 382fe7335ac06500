"""Absolute Zero's TRR++ (docs/algorithms.md §8.4): REINFORCE++ returns whitened separately within
each (task, role). The task of a turn is ``turn.outcome.get(trr_task_key)``: the game's ``task`` fact, or
another info key naming the task type ("" = one task)."""

from __future__ import annotations

from dataclasses import dataclass

from cogym.core.config_key import key
from cogym.learners import advantages as adv_fns
from cogym.learners.multiagent import trr_pp_advantages
from cogym.learners.algorithm import Algorithm, Discounted, Whitened
from cogym.learners.rows import Advantages, RoleRows


@dataclass
class TRRPPConfig(Discounted, Whitened):
    trr_task_key: str = key("", "the turn's outcome fact that names its task (each task is whitened apart); "
                            "empty: one task")

    def validate(self, common) -> None:
        super().validate(common)
        if not isinstance(self.trr_task_key, str):
            raise ValueError(f"trr_task_key must be a string (a key of the game's turn info), got {self.trr_task_key!r}")


class TRRPP(Algorithm):
    Config = TRRPPConfig

    def advantages(self, rows: RoleRows) -> Advantages:
        key = self.cfg.trr_task_key
        tasks = [(t.outcome.get(key) if key else None) for t in rows.batch.turns]  # typed facts (cogym.core.outcome)
        groups = adv_fns.group_index([repr(t) for t in tasks]).to(rows.mask.device)
        adv, _ = trr_pp_advantages(rows.token_rewards, rows.mask, groups, gamma=self.cfg.gamma, whiten_mode=self.cfg.whiten)
        return Advantages(adv, metrics={"trr_tasks": float(len(set(map(repr, tasks))))})
