"""A novelty filter for proposed problems (SeRL's self-instruction filter): a bounded pool of accepted
problems and a nearest-neighbour test against it.

A problem is embedded with :class:`cogym.envs.search.NgramEmbedder` (hashed character n-gram
vectors, L2-normalised, so an inner product is a cosine similarity; the idf is left at 1 because the
pool keeps changing) and searched in a faiss ``IndexFlatIP`` over the pool. A problem whose nearest
pool entry has a cosine similarity of at least ``threshold`` is a near-duplicate. On canonical
arithmetic problems the scale reads: the same problem 1.0, one digit changed about 0.5 (``37+45`` /
``37+46``), operands swapped 0.0 (character n-grams see text, not meaning).

Bounded: the pool holds at most ``capacity`` accepted problems; adding one to a full pool first forgets
the oldest tenth. A problem already in the pool is not added twice. Seed problems (:meth:`NoveltyFilter.seed`,
the examples a game shows its proposer) are part of the pool for good: never forgotten, not counted
against the capacity, so copying an example is never novel.

Shared pools. :func:`shared_pool` returns the one filter of this *process* for a (name, threshold,
capacity): the game copies of a training run (``game.num_games`` of them, plus any evaluator copies
built with the same kwargs) that name the same pool with the same settings judge against one pool
and feed it. The scope is the process: each Ray rollout worker and each ``--nproc`` rank has a pool
of its own, a resumed run starts from an empty one, and a second run in the same process (tests)
starts from the first run's (:func:`clear_pools` empties them). Within a process the pool's content,
and so every verdict, is a deterministic function of the order in which games are stepped.

Episodes. :meth:`NoveltyFilter.judge` takes the episode's key (the game's reset seed and the number of
unseeded resets since; None for a game never seeded) and

* judges a proposal only against entries added by *other* episodes: the games of one GRPO group
  share a reset seed, and a sibling is not rejected as a copy of a sibling, so each verdict is the
  same whichever sibling is stepped first;
* remembers its verdict per (episode key, problem) (the ``4 * capacity`` most recently used): replaying an
  episode (the same seed and the same proposal, in a fresh copy or after re-resetting, as
  ``check_game`` does) gets the verdict of its first play, instead of finding its own problem in
  the pool. Training draws a fresh seed for every group, so this never hides a real duplicate there.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Hashable, Iterable

import numpy as np

from cogym.envs.search import NgramEmbedder, import_faiss

TOLERANCE = 1e-6  # float32 inner products of identical unit vectors may read 0.99999994
MAX_TEXT_CHARS = 256  # a problem is embedded from at most this many characters (canonical problems are shorter)


@dataclass(frozen=True)
class Verdict:
    """A proposal's test: ``novel``, its nearest pool entry (None if the pool held nothing to compare
    with), their cosine similarity, and whether that entry is a seed problem."""

    novel: bool
    neighbour: str | None
    similarity: float | None
    seed: bool = False


class NoveltyFilter:
    """A bounded pool of accepted problems; :meth:`check` finds a proposal's nearest entry, :meth:`add`
    puts one in, :meth:`judge` does both for a game's episode (see the module's doc)."""

    def __init__(self, threshold: float, capacity: int = 1024, embedder: NgramEmbedder | None = None) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < float(threshold) <= 1.0:
            raise ValueError(f"threshold must be a cosine similarity in (0, 1], got {threshold!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        self.threshold, self.capacity = float(threshold), int(capacity)
        self.embedder = embedder or NgramEmbedder()
        self._index = import_faiss().IndexFlatIP(self.embedder.dim)
        self._texts: list[str] = []  # position i of the index holds _texts[i]
        self._tags: list[Hashable] = []  # the episode that added each entry (None: seeds, direct adds)
        self._present: set[str] = set()
        self._seed_index = import_faiss().IndexFlatIP(self.embedder.dim)
        self._seeds: list[str] = []
        self._seed_set: set[str] = set()
        self._tag_counts: Counter = Counter()
        self._memo: OrderedDict[tuple[Hashable, str], Verdict] = OrderedDict()
        self._lock = threading.Lock()  # in case the games of a process are stepped from several threads

    def __len__(self) -> int:
        return len(self._texts)

    @property
    def texts(self) -> list[str]:
        """The accepted problems in the pool, oldest first (the seeds are :attr:`seeds`)."""
        return list(self._texts)

    def _vector(self, text: str) -> np.ndarray:
        return self.embedder.embed([text[:MAX_TEXT_CHARS]])

    # ------------------------------------------------------------------ the two operations
    def check(self, text: str, exclude: Hashable = None) -> Verdict:
        """``text``'s nearest pool entry (ignoring entries added under the tag ``exclude``, unless it
        is None) and whether it is far enough to be novel."""
        with self._lock:
            return self._check(text, exclude)

    def add(self, text: str, tag: Hashable = None) -> bool:
        """Put ``text`` in the pool (forgetting the oldest tenth first when it is full); False if it
        was there already."""
        with self._lock:
            return self._add(text, tag)

    def seed(self, texts: Iterable[str]) -> None:
        """Make ``texts`` permanent pool entries (in order; those there already are skipped)."""
        with self._lock:
            for t in texts:
                if t not in self._seed_set:
                    self._seed_index.add(self._vector(t))
                    self._seeds.append(t)
                    self._seed_set.add(t)

    @property
    def seeds(self) -> list[str]:
        """The permanent entries, in the order they came."""
        return list(self._seeds)

    def judge(self, text: str, episode: Hashable = None) -> Verdict:
        """The verdict on a proposal of episode ``episode``; a novel one joins the pool. Same
        (episode, text) as before: the remembered verdict (see the module's doc)."""
        with self._lock:
            key = (episode, text)
            if episode is not None and key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]
            verdict = self._check(text, episode)
            if verdict.novel:
                self._add(text, episode)
            if episode is not None:
                self._memo[key] = verdict
                while len(self._memo) > 4 * self.capacity:
                    self._memo.popitem(last=False)
            return verdict

    # ------------------------------------------------------------------ internals (lock held)
    def _check(self, text: str, exclude: Hashable) -> Verdict:
        vector = self._vector(text)
        best: tuple[float, str, bool] | None = None
        if self._seeds:
            sims, ids = self._seed_index.search(vector, 1)
            best = (float(sims[0, 0]), self._seeds[int(ids[0, 0])], True)
        skipped = self._tag_counts[exclude] if exclude is not None else 0
        n = len(self._texts)
        if n - skipped > 0:
            # The k = skipped + 1 nearest hold at most `skipped` excluded entries: the best other one is among them.
            sims, ids = self._index.search(vector, min(n, skipped + 1))
            for sim, i in zip(sims[0].tolist(), ids[0].tolist()):
                if i >= 0 and (exclude is None or self._tags[i] != exclude):
                    if best is None or sim > best[0]:
                        best = (float(sim), self._texts[i], False)
                    break
        if best is None:
            return Verdict(True, None, None)
        return Verdict(best[0] < self.threshold - TOLERANCE, best[1], best[0], best[2])

    def _add(self, text: str, tag: Hashable) -> bool:
        if text in self._present or text in self._seed_set:
            return False
        if len(self._texts) >= self.capacity:
            drop = max(1, self.capacity // 10)
            self._index.remove_ids(import_faiss().IDSelectorRange(0, drop))  # positions shift down by `drop`
            for t, g in zip(self._texts[:drop], self._tags[:drop]):
                self._present.discard(t)
                self._tag_counts[g] -= 1
                if not self._tag_counts[g]:
                    del self._tag_counts[g]
            del self._texts[:drop], self._tags[:drop]
        self._index.add(self._vector(text))
        self._texts.append(text)
        self._tags.append(tag)
        self._present.add(text)
        self._tag_counts[tag] += 1
        return True


# ---------------------------------------------------------------------- the process's pools
_POOLS: dict[tuple[str, float, int], NoveltyFilter] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(name: str, threshold: float, capacity: int) -> NoveltyFilter:
    """This process's filter for (``name``, ``threshold``, ``capacity``), made on first use."""
    key = (str(name), float(threshold), int(capacity))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = NoveltyFilter(threshold, capacity)
        return pool


def clear_pools() -> None:
    """Forget every shared pool of this process (a fresh start for the next run)."""
    with _POOLS_LOCK:
        _POOLS.clear()
