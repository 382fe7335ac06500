"""Every seed of cogym, derived in one place: from a run's seed and a *salt name* that says which stream it is.

A run has one seed (``run.seed``, a tournament's ``seed``, an evaluator's ``seed``). Every stream of random
numbers (a rollout's game seeds, a rank's sampling, a league's draw, a tournament's pairings, a scripted
twin's moves, a LoRA adapter's init, a game's own generator, ...) is named in :data:`SALTS`, declared once
below with what it seeds and the formula of its seed material, and a site asks for it by name:

    seeds("rollout.games", run_seed, iteration, n=32)      # the 32 game seeds of an iteration
    rng("league.draw", seed, iteration, round_)            # a numpy Generator on that stream
    torch_seed("rollout.sampling", seed, iteration, rank)  # seeds torch's global generator
    key("rollout.key", seed, iteration, round_)            # a 63-bit sampling key (agents/sampling.py)

An unknown name raises (a typo is an error, never a fresh stream), and so does a name used for another
kind of stream than its own (``rng`` of a torch salt). The same name and parts always give the same
numbers, on every machine and in every process. No other module of cogym seeds numpy, torch or
``random`` itself (tests/core/test_seed_plan.py checks), but for envs/_reasoning_gym_worker.py, which
imports nothing from cogym (a sandbox loads it by path): it seeds ``random`` with an item's seed and
``numpy.random`` with that seed modulo 2**32 around each generation.

The formulas are the ones recorded runs followed (golden runs, tournaments, leagues, evaluations), each
kept bit for bit under a name that says what it is for: they differ (a salt constant at the end, in the
middle or none; a linear formula; a hash) because they were written at different times, and changing one
would change every recorded run's numbers. So two of them can give equal numbers for equal parts (both
``"game.reset"`` and ``"ratings.bootstrap"`` seed with the number as given): they are apart by purpose.
A new stream takes :func:`salted` with a constant of its own (non-zero: ``SeedSequence`` pads its
entropy with zeros, so a trailing 0 names no stream of its own), which makes it independent of the rest.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

KINDS = ("numpy", "torch", "key", "globals")
KEY_BITS = 63  # a sampling key's bits (agents/sampling.py's row_uniforms takes them)
GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment (2**64 / golden ratio)
_MASK64 = 0xFFFFFFFFFFFFFFFF


# ----------------------------------------------------------------------------- the formulas
def listed(seed: int, *parts: int) -> list[int]:
    """``[seed, *parts]`` as ``SeedSequence`` entropy (all >= 0): a rollout's game seeds are ``(seed, iteration)``,
    a refill round's ``(seed, iteration, round)``. A trailing 0 is the same stream (numpy pads with zeros)."""
    entropy = [int(seed), *(int(p) for p in parts)]
    if any(v < 0 for v in entropy):
        raise ValueError(f"seeds and salts must be >= 0, got {entropy}")
    return entropy


def salted(constant: int) -> Callable[..., list[int]]:
    """The formula ``[*parts, constant]``: the stream ``constant`` names, independent of every other."""
    return lambda *parts: [*parts, constant]


def as_given(seed: Any) -> Any:
    """The seed itself (an int, a list of ints, or None for fresh entropy from the OS)."""
    return seed


def offset(by: int) -> Callable[[int], int]:
    """The formula ``seed + by`` (the tiny model's test split, 10_000 apart from its training draws)."""
    return lambda seed: seed + by


def linear(multiplier: int) -> Callable[[int, int], int]:
    """The formula ``seed * multiplier + n`` (torch sampling seeds of an iteration or a tournament batch)."""
    return lambda seed, n: seed * multiplier + n


def rank_sampling(seed: int, iteration: int, rank: int = 0) -> int:
    """Torch's sampling seed of an iteration: ``seed * 100_003 + iteration`` on rank 0 (it predates the
    SeedSequence streams; every recorded run's draws follow it), the ``(seed, iteration, rank)`` stream's on a
    data-parallel rank r > 0."""
    if rank == 0:
        return seed * 100_003 + iteration
    return int(np.random.SeedSequence(listed(seed, iteration, rank)).generate_state(1)[0])


def name_hash(seed: int, name: str) -> int:
    """A 63-bit seed fixed by (seed, name): the first 8 bytes of sha256("seed:name"), little-endian, halved."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


def spawned(entropy: int | list[int], k: int) -> np.random.SeedSequence:
    """Child ``k`` of ``SeedSequence(entropy)``, as its ``spawn`` numbers children."""
    return np.random.SeedSequence(entropy, spawn_key=(k,))


def scripted_entropy(seed: int, iteration: int, k: int, rank: int = 0) -> list[int]:
    """``[seed, iteration, k]``, and ``rank`` after it on a data-parallel rank r > 0."""
    return [seed, iteration, k] + ([rank] if rank else [])


def _mix64(x: int) -> int:
    """The splitmix64 finalizer on an int in [0, 2**64) (wrapping arithmetic): a bijection that scatters bits."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def derive_key(*parts: int) -> int:
    """One 63-bit key from integers (a run seed, a game index, a move number, ...); order matters: the
    splitmix64 chain modulo 2**64 (plain int arithmetic: every seat of every game derives keys, and numpy
    on one number costs ~15 us an operation)."""
    x = 0
    for p in parts:
        x = _mix64(x ^ (((int(p) & _MASK64) + GOLDEN) & _MASK64))
    return x >> (64 - KEY_BITS)


def per_learner(constant: int) -> Callable[..., int]:
    """The formula of a learner's draws, ``(run seed, learner name, *numbers)``: the splitmix64 chain of
    (:func:`name_hash` of the seed and the name, *numbers, ``constant``), so two runs' seeds, two learners
    of a run and two streams (``constant``) draw apart."""
    return lambda seed, learner, *parts: derive_key(name_hash(seed, learner), *parts, constant)


def py_and_np(py_seed: int, np_seed: int) -> tuple[int, int]:
    """(``random``'s seed, ``numpy.random``'s seed), each given."""
    return py_seed, np_seed


# ----------------------------------------------------------------------------- the salts
@dataclass(frozen=True)
class Salt:
    """One named stream: its kind, the formula of its seed material, and what it seeds."""

    kind: str  # "numpy": rng/seeds; "torch": torch_seed/torch_generator; "key": key; "globals": global_states
    formula: Callable[..., Any]  # the seed material from the parts a site passes
    seeds: str  # what the stream seeds (docs/training.md lists them)


SALTS: dict[str, Salt] = {
    # training
    "rollout.games": Salt("numpy", listed, "the game seeds of a training rollout: (run seed, iteration); "
                          "dynamic sampling's refill round r >= 1: (run seed, iteration, r)"),
    "rollout.sampling": Salt("torch", rank_sampling, "torch's global generator for an iteration's unkeyed draws "
                             "(run seed, iteration, data-parallel rank; Ray rollout workers: rank 0's)"),
    "rollout.key": Salt("key", derive_key, "a rollout's sampling key (run seed, iteration, round)"),
    "rollout.move": Salt("key", derive_key, "one request's draws (rollout key, game index, move number, seat)"),
    "scripted.init": Salt("numpy", as_given, "a scripted twin's generator for unkeyed requests, until reseeded"),
    "scripted.iteration": Salt("numpy", scripted_entropy, "a scripted twin's generator for an iteration "
                               "(run seed, iteration, twin number, rank)"),
    "scripted.move": Salt("numpy", as_given, "a scripted twin's move for a keyed request (the request's key)"),
    "league.draw": Salt("numpy", salted(0x1EA6), "a league's opponent draw (league seed, iteration, round)"),
    "stage.build": Salt("torch", lambda seed, stage: derive_key(seed, stage, 0x57A6), "torch's global generator as "
                        "a later stage builds its learners (run seed, stage index)"),
    "adapter.init": Salt("torch", name_hash, "a LoRA adapter's initial weights (seed, adapter name)"),
    # tournaments
    "tournament.games": Salt("numpy", salted(0xC06), "a tournament's game seeds (tournament seed)"),
    "tournament.pairings": Salt("numpy", lambda seed, round_no: [seed, 1, round_no],
                                "a Swiss tournament's pairings of a round (tournament seed, round)"),
    "tournament.scripted": Salt("numpy", listed, "a scripted player's generator in a tournament batch "
                                "(tournament seed, batch, twin number)"),
    "tournament.sampling": Salt("torch", linear(1_000_003), "torch's global generator for a tournament batch "
                                "(tournament seed, batch)"),
    "tournament.key": Salt("key", derive_key, "a tournament's sampling key (tournament seed)"),
    "ratings.bootstrap": Salt("numpy", as_given, "the bootstrap draws of rating intervals (the given seed)"),
    # evaluation
    "eval.games": Salt("numpy", listed, "an evaluator's game seeds (its seed)"),
    "eval.sampling": Salt("torch", as_given, "torch's generator while an evaluator plays (its seed), forked"),
    # games
    "game.reset": Salt("numpy", as_given, "a game's own generator, from the seed its reset is given"),
    "game.unseeded": Salt("numpy", as_given, "a game's generator before any seeded reset (None: fresh entropy)"),
    "game.spaces": Salt("numpy", spawned, "seat i's action (child 2i) and observation (child 2i + 1) spaces"),
    "game.checks": Salt("numpy", as_given, "the players of a game check's episodes (the seed; [seed, play])"),
    "game.stress": Salt("numpy", as_given, "the twin that plays a stress episode (the episode's seed)"),
    "textarena.globals": Salt("globals", py_and_np, "TextArena's private random and numpy.random states (drawn from "
                              "the game's generator)"),
    "arithmetic.heldout": Salt("numpy", as_given, "the fixed held-out arithmetic problems"),
    "search.corpus": Salt("numpy", as_given, "a synthetic search corpus"),
    "search.index": Salt("numpy", as_given, "the training sample of an IVF search index"),
    # learners and research tools
    "learners.packing_check": Salt("torch", as_given, "the fixed batch of the packing check (0)"),
    "learners.sft_data": Salt("numpy", per_learner(0x5F7), "the order of an SFT file's rows in a pass over it "
                              "(run seed, learner, pass number)"),
    "learners.dpo_data": Salt("numpy", per_learner(0xD90), "the order of a DPO file's pairs in a pass over it "
                              "(run seed, learner, pass number)"),
    "learners.pf_ppo": Salt("torch", per_learner(0x9F99), "PF-PPO's resampling of a batch (run seed, learner, "
                            "update number)"),
    "learners.policy_loss": Salt("torch", per_learner(0xC1C0), "a policy loss's draws, clip_cov's (run seed, learner, "
                                 "optimizer step, micro-batch, data-parallel rank)"),
    "learners.plugin": Salt("numpy", per_learner(0x9106), "a user's algorithm plug-in's numpy draws (run seed, learner, "
                            "a stream number of the plug-in's own, ...)"),
    "learners.plugin_torch": Salt("torch", per_learner(0x9107), "a user's algorithm plug-in's torch draws (run seed, "
                                  "learner, a stream number of the plug-in's own, ...)"),
    "tiny_model.init": Salt("torch", as_given, "a tiny model's initial weights (build_tiny_model)"),
    "tiny_model.data": Salt("numpy", as_given, "a tiny model's training draws"),
    "tiny_model.test": Salt("numpy", offset(10_000), "a tiny model's test split (seed + 10_000)"),
}


def salt(name: str, kind: str) -> Salt:
    """The salt ``name`` of ``kind``; ValueError (one line) for a name not in :data:`SALTS` or of another kind."""
    found = SALTS.get(name)
    if found is None:
        raise ValueError(f"unknown seed salt {name!r}: declare it in cogym/core/seeding.py SALTS "
                         f"(known: {', '.join(sorted(SALTS))})")
    if found.kind != kind:
        raise ValueError(f"seed salt {name!r} is a {found.kind} stream, not a {kind} one")
    return found


def material(name: str, kind: str, *parts: Any) -> Any:
    """The seed material of stream ``name`` for ``parts`` (its formula's result)."""
    return salt(name, kind).formula(*parts)


# ----------------------------------------------------------------------------- numpy
def rng(name: str, *parts: Any) -> np.random.Generator:
    """A numpy Generator on stream ``name``: ``np.random.default_rng`` of its seed material."""
    return np.random.default_rng(material(name, "numpy", *parts))


def seeds(name: str, *parts: Any, n: int) -> list[int]:
    """``n`` seeds (32-bit) of stream ``name``: ``SeedSequence(material).generate_state(n)``."""
    m = material(name, "numpy", *parts)
    sequence = m if isinstance(m, np.random.SeedSequence) else np.random.SeedSequence(m)
    return [int(x) for x in sequence.generate_state(n)]


def seed(name: str, *parts: Any) -> int:
    """One seed (32-bit) of stream ``name``: ``seeds(name, *parts, n=1)[0]``."""
    return seeds(name, *parts, n=1)[0]


# ----------------------------------------------------------------------------- torch
def torch_seed(name: str, *parts: Any) -> int:
    """Seed torch's global generator (CPU and every CUDA device) from stream ``name``; returns the seed."""
    import torch  # here, not at the top: games import this module and never load torch

    value = material(name, "torch", *parts)
    torch.manual_seed(value)
    return value


def torch_generator(name: str, *parts: Any):
    """A CPU ``torch.Generator`` seeded from stream ``name`` (the global one is left alone)."""
    import torch  # see torch_seed

    return torch.Generator().manual_seed(material(name, "torch", *parts))


# ----------------------------------------------------------------------------- keys and globals
def key(name: str, *parts: int) -> int:
    """The 63-bit sampling key of stream ``name`` for ``parts``."""
    return material(name, "key", *parts)


def global_states(name: str, *parts: Any) -> dict[str, Any]:
    """The states ``random`` and ``numpy.random`` would have if seeded from stream ``name`` (``{"py", "np"}``),
    without touching them."""
    py_seed, np_seed = material(name, "globals", *parts)
    return {"py": random.Random(py_seed).getstate(), "np": np.random.RandomState(np_seed).get_state()}
