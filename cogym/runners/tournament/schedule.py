"""Who meets whom, on which seeds: round robin, gauntlet and Swiss pairings, the keys of games and
their seeds, and batches of games that hold at most a few model players."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from cogym.core import seeding
from cogym.runners import rundir
from cogym.runners.tournament.results import ResultsLog, write_json
from cogym.runners.results.scoring import paired_rows
from cogym.runners.tournament.spec import TournamentSpec


# ---------------------------------------------------------------------------------------- schedules
def round_robin(names: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair once (each pairing is then played in both seat orders)."""
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def gauntlet(new: Sequence[str], pool: Sequence[str]) -> list[tuple[str, str]]:
    """Each new player against each player of the (anchored) pool; pool players do not meet each other."""
    return [(n, p) for n in new for p in pool if n != p]


def swiss_round(names: Sequence[str], points: dict[str, float], met: set[frozenset], rng: np.random.Generator
                ) -> list[tuple[str, str]]:
    """One Swiss round: players sorted by points (ties broken by a seeded shuffle) are paired top
    down with the nearest player they have not met; with an odd count the lowest unpaired sits out."""
    order = list(names)
    rng.shuffle(order)
    order.sort(key=lambda n: -points.get(n, 0.0))
    pairs, left = [], list(order)
    while len(left) > 1:
        a = left.pop(0)
        k = next((i for i, b in enumerate(left) if frozenset((a, b)) not in met), 0)
        pairs.append((a, left.pop(k)))
    return pairs


# ------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class GameKey:
    """One game: pairing (a, b), the seed index k, the seat order (0: a on side 0), and for Swiss the
    round (a rematch in a later round is a new game)."""

    a: str
    b: str
    k: int
    order: int
    round: int | None = None

    @property
    def id(self) -> str:
        parts = [self.a, self.b, self.k, self.order] + ([self.round] if self.round is not None else [])
        return json.dumps(parts)


@dataclass(frozen=True)
class SoloKey:
    """Paired scoring: one game of ``player`` in the rated seats on seed ``k`` (for Swiss, in a round:
    a rematch is new games), shared by every pairing of the player. ``a``, ``b`` and ``order`` let it
    stand where a :class:`GameKey` does (batching, loading, transcripts)."""

    player: str
    k: int
    round: int | None = None
    order: int = 0

    @property
    def a(self) -> str:
        return self.player

    @property
    def b(self) -> str:
        return self.player

    @property
    def id(self) -> str:
        return json.dumps(["paired", self.player, self.k] + ([self.round] if self.round is not None else []))


def game_index(key: GameKey) -> int:
    """A game's number in the rollout that plays it (63 bits of a hash of its id): its draws derive
    from it and the tournament seed, so they do not depend on the batch or worker it lands in. A paired
    game's number leaves the player out: every player's game on a seed draws the same numbers, so the
    fixed partners (a random twin, a sampled model) play alike for each of them."""
    ident = json.dumps(["paired", key.k, key.round]) if isinstance(key, SoloKey) else key.id
    return int.from_bytes(hashlib.blake2b(ident.encode(), digest_size=8).digest(), "little") >> 1


def game_seeds(seed: int, n: int) -> list[int]:
    """The seeds of a pairing's games: the same for every pairing (paired comparisons)."""
    return seeding.seeds("tournament.games", seed, n=n)


def batches(todo: list[GameKey], size: int, max_loaded: int, models: set[str]) -> Iterable[list[GameKey]]:
    """Consecutive games of ``todo`` in batches of at most ``size``; with ``max_loaded`` > 0 a batch
    also holds games of at most ``max_loaded`` model players (the schedule keeps a pairing's games
    together, so a batch is a few pairings)."""
    batch: list[GameKey] = []
    players: set[str] = set()
    for key in todo:
        new = players | ({key.a, key.b} & models)
        if batch and (len(batch) == size or (max_loaded and len(new) > max_loaded)):
            yield batch
            batch, new = [], {key.a, key.b} & models
        batch.append(key)
        players = new
    if batch:
        yield batch


def _pairings(spec: TournamentSpec, names: list[str], log: ResultsLog, rng: np.random.Generator,
              rounds: Sequence = ()) -> list[tuple[str, str]]:
    """This round's pairings (Swiss: from the results so far; paired scoring reads them from the
    players' games and the ``rounds`` already paired)."""
    if spec.schedule == "round_robin":
        return round_robin(names)
    if spec.schedule == "gauntlet":
        return gauntlet([n for n in names if n not in spec.pool], spec.pool)
    points: dict[str, float] = {}
    met: set[frozenset] = set()
    scored = log.rows if spec.scoring != "paired" else paired_rows(log.rows, rounds, spec.games_per_pairing // 2, True)
    for r in (r for r in scored if r.get("a") in names and r.get("b") in names):
        points[r["a"]] = points.get(r["a"], 0.0) + r["score"]
        points[r["b"]] = points.get(r["b"], 0.0) + 1.0 - r["score"]
        met.add(frozenset((r["a"], r["b"])))
    return swiss_round(names, points, met, rng)


class Schedule:
    """Each round's pairings, written down before the round is played, so a rerun replays the same
    schedule (Swiss pairings depend on the results so far, which a rerun would otherwise see more of)."""

    def __init__(self, spec: TournamentSpec, out_dir: Path) -> None:
        self.spec, self.file = spec, out_dir / "schedule.json"
        self.stamp = {"players": [p.name for p in spec.players], "schedule": spec.schedule, "pool": spec.pool}
        try:
            saved = rundir.parse_json(rundir.read_text(self.file, out_dir)) if self.file.is_file() else {}
        except rundir.RunDirError:
            raise  # a symbolic link out of the directory, bytes that are not text: one line
        except ValueError:  # (also nested too deeply, a number too long to read)
            saved = {}  # cut by a kill while written: the rounds not yet played are paired again
        if not isinstance(saved, dict) or not all(saved.get(k) == v for k, v in self.stamp.items()):
            saved = {}  # another tournament's (or not a schedule at all): paired anew
        rounds = saved.get("rounds", [])
        names = set(self.stamp["players"])
        well_formed = isinstance(rounds, list) and all(
            isinstance(r, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                                        and set(p) <= names for p in r) for r in rounds)
        self.rounds: list = rounds if well_formed else []

    def pairs(self, round_no: int, log: ResultsLog) -> list[tuple[str, str]]:
        if round_no < len(self.rounds):
            return [tuple(p) for p in self.rounds[round_no]]
        pairs = _pairings(self.spec, self.stamp["players"], log, seeding.rng("tournament.pairings", self.spec.seed, round_no),
                          self.rounds)
        self.rounds.append([list(p) for p in pairs])
        write_json(self.file, {**self.stamp, "rounds": self.rounds})
        return pairs
