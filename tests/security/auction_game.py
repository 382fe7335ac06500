"""``sealed_auction-v0``: a user's game (loaded through ``game.modules``), written from
docs/write_your_own_game.md, with the faults a new user's first game has, for the play-limit tests.

Seats ``bidder_0``, ``bidder_1``, ``bidder_2`` (role ``bidder``). Not zero-sum; rewards in ``[-1, 1]``,
max turns 3. Each bidder in turn writes a sealed bid 0-9 for an item worth 9 (nobody sees the others'
bids); the highest bid wins (the first of equal bids), the winner gets ``(9 - bid) / 9``, the others 0.
A reply that is not a digit is a bid of 0. End infos: role, bid, metrics.won.

``variant`` (a game argument) picks the fault: ``"fair"`` (none), ``"endless"`` (the bidders bid again
and again; ``max_turns`` still says 3), ``"huge"`` (the observation is ``huge_chars`` characters, inside
its observation space), ``"skip_last"`` (the game ends after two bids: ``bidder_2`` never gets a turn).
The twin ``broken`` raises on every observation.
"""

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.envs import CogymEnv, GameSpec, register
from cogym.envs.base import text_space

GAME_ID = "sealed_auction-v0"
SEATS = ["bidder_0", "bidder_1", "bidder_2"]
VARIANTS = ("fair", "endless", "huge", "skip_last")
HUGE_CHARS = 10_000_000


def parse_bid(reply: str) -> int:
    reply = reply.strip()[:4]
    return int(reply[0]) if reply[:1].isdigit() else 0


class SealedAuction(CogymEnv):
    metadata = {"name": "sealed_auction", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, variant: str = "fair", huge_chars: int = HUGE_CHARS, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.variant, self.huge_chars = variant, int(huge_chars)
        self.possible_agents = list(SEATS)
        self._seat_roles = {a: "bidder" for a in SEATS}
        max_text = self.huge_chars + 32 if variant == "huge" else 32
        self.observation_spaces = {a: Dict({"observation": Box(0, 10**6, shape=(1,), dtype=np.int64),
                                            "text": text_space(max_text)}) for a in SEATS}
        self.action_spaces = {a: text_space(8) for a in SEATS}
        self.spec = GameSpec(GAME_ID, ("bidder",), (-1.0, 1.0), zero_sum=False, max_turns=3,
                             description="Three bidders write sealed bids; the highest wins the item.")
        self.bids: dict[str, int] = {}
        self.rounds = 0

    def reset(self, seed=None, options=None) -> None:
        self._seed(seed)
        self.bids, self.rounds = {}, 0
        self._start_episode({a: {"role": "bidder"} for a in SEATS})

    def observe(self, agent):
        self._check_seat(agent)
        text = "Bid 0-9 for an item worth 9."
        if self.variant == "huge":
            text += " " + "x" * (self.huge_chars - 1)
        return {"observation": np.array([len(self.bids)], dtype=np.int64), "text": text}

    def step(self, action) -> None:
        if (agent := self._begin_turn(action)) is None:
            return
        self.bids[agent] = parse_bid(action)
        last = SEATS[1] if self.variant == "skip_last" else SEATS[2]
        if agent != last:
            self.agent_selection = SEATS[SEATS.index(agent) + 1]
            return self._accumulate_rewards()
        if self.variant == "endless":  # the user forgot to end the game: another round, for ever
            self.rounds += 1
            self.agent_selection = SEATS[0]
            return self._accumulate_rewards()
        winner = max(self.bids, key=lambda s: (self.bids[s], -SEATS.index(s)))
        rewards = {a: (9 - self.bids[a]) / 9 if a == winner else 0.0 for a in SEATS}
        for a in SEATS:
            self.infos[a] = {"role": "bidder", "bid": self.bids.get(a), "metrics": {"won": a == winner}}
        self._end_game(rewards)

    def _render_text(self) -> str:
        return f"[{GAME_ID}] bids={self.bids}"


def _broken(text: str, rng) -> str:
    raise ValueError("cannot read the bid prompt")


SCRIPTED = {"bidder": {"random": lambda text, rng: str(rng.integers(0, 10)), "broken": _broken}}
register(GAME_ID, SealedAuction, scripted=SCRIPTED)
