"""SPIRAL's role-conditioned advantage estimation (docs/algorithms.md §8.2): one EMA baseline per
(game, seat), ``A = R - b`` with ``b <- decay * b + (1 - decay) * R``; each of a seat's turns in a game
gets ``A * gamma**(turns after it)`` on every token; turns whose advantage is exactly 0 may be
dropped. The baselines are this algorithm's state, saved as ``rae_baselines.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from cogym.core.config_key import key
from cogym.learners.multiagent import RAE_ORDERS, RAEBaselines, nonzero_rows, rae_turn_discount
from cogym.learners.algorithm import Algorithm, Context, Discounted, check_choice
from cogym.learners.rows import Advantages, RoleRows

STATE_FILE = "rae_baselines.json"


@dataclass
class RAEConfig(Discounted):
    rae_decay: float = key(0.95, "EMA decay of the baselines")
    rae_order: str = key("pre", 'subtract before ("pre") or after ("update_first") updating the baseline', choices=RAE_ORDERS)
    rae_filter_zero_adv: bool = key(True, "drop turns whose advantage is exactly 0")

    def validate(self, common) -> None:
        super().validate(common)
        if not (isinstance(self.rae_decay, (int, float)) and 0 <= self.rae_decay <= 1):
            raise ValueError(f"rae_decay must be in [0, 1] (the EMA decay of the RAE baselines), got {self.rae_decay}")
        check_choice(self.rae_order, RAE_ORDERS, "rae_order")
        if common.kl_in_reward != "off":
            raise ValueError("rae computes advantages from the outcome alone and would ignore kl_in_reward; use "
                             "kl_in_loss (e.g. kl_in_loss: k3) to keep the policy near its reference")


def _turn_positions(turns) -> tuple[torch.Tensor, torch.Tensor]:
    """(k, n) per row: the turn's index among its seat's turns in its episode, and their number."""
    count: dict[tuple, int] = {}
    index = []
    for t in turns:
        key = (t.episode_id, t.seat)
        index.append(count.get(key, 0))
        count[key] = index[-1] + 1
    return torch.tensor(index), torch.tensor([count[(t.episode_id, t.seat)] for t in turns])


class RAE(Algorithm):
    Config = RAEConfig
    per_move_rows = True  # gamma ** (moves after this one) per move

    def __init__(self, cfg: RAEConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.baselines = RAEBaselines(cfg.rae_decay, cfg.rae_order)

    def advantages(self, rows: RoleRows) -> Advantages:
        b = rows.batch
        outcomes: dict[tuple, float] = {}
        for t, score in zip(b.turns, b.scores.tolist()):  # the outcome as scored (overlong shaping included)
            outcomes.setdefault((t.episode_id, t.seat), float(score))
        keys = [(self.ctx.game_id, seat) for _, seat in outcomes]
        adv_game, self.baselines = self.baselines.update(keys, torch.tensor(list(outcomes.values()), dtype=torch.float64))
        by_outcome = dict(zip(outcomes, adv_game.tolist()))
        a = torch.tensor([by_outcome[(t.episode_id, t.seat)] for t in b.turns], dtype=torch.float64)
        k, n = _turn_positions(b.turns)
        per_turn = rae_turn_discount(a, k, n, gamma=self.cfg.gamma).to(device=b.mask.device, dtype=b.mask.dtype)
        metrics = {f"rae_baseline/{seat}": self.baselines.get((self.ctx.game_id, seat))
                   for seat in sorted({s for _, s in outcomes})}
        keep = nonzero_rows(per_turn) if self.cfg.rae_filter_zero_adv else torch.ones(len(b.turns), dtype=torch.bool)
        metrics["rae_dropped"] = float((~keep).sum())
        return Advantages(per_turn[:, None] * b.mask, keep=keep.to(b.mask.device), metrics=metrics)

    def save(self, directory: Path) -> dict:
        values = [[list(k), v] for k, v in self.baselines.values.items()]  # keys are (game id, seat)
        state = {"alpha": self.baselines.alpha, "order": self.baselines.order, "values": values}
        (Path(directory) / STATE_FILE).write_text(json.dumps(state))
        return {}

    def load(self, directory: Path, state: dict) -> None:
        saved = json.loads((Path(directory) / STATE_FILE).read_text())
        # The baselines resume; decay and order are the config's (a resumed run may change them).
        values = {tuple(k): float(v) for k, v in saved["values"]}
        self.baselines = RAEBaselines(self.baselines.alpha, self.baselines.order, values)
