"""One seed plan: every seed of cogym comes from core/seeding.py by a named salt, and each salt gives the
numbers the inline formula it replaced gave (so recorded runs keep theirs)."""

import ast
import hashlib
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from cogym.core import seeding

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cogym"
SEEDING = PACKAGE / "core" / "seeding.py"
# It imports nothing from cogym (a sandbox loads the file by path), so it seeds random/numpy.random itself.
EXEMPT = {PACKAGE / "envs" / "_reasoning_gym_worker.py"}
SEEDERS = {"SeedSequence", "default_rng", "RandomState", "manual_seed"}  # whatever they are called on
GLOBAL_SEEDERS = {("random", "seed"), ("random", "Random")}  # random.seed, np.random.seed, random.Random


def _seeding_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        owner = func.value if isinstance(func, ast.Attribute) else None
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
        if name in SEEDERS or (owner_name, name) in GLOBAL_SEEDERS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(func)}(...)")
    return found


def test_no_module_but_seeding_seeds_numpy_torch_or_random():
    sources = [p for p in sorted(PACKAGE.rglob("*.py")) if p != SEEDING and p not in EXEMPT]
    assert len(sources) > 100
    found = [call for p in sources for call in _seeding_calls(p)]
    assert found == [], "seed through cogym/core/seeding.py with a named salt:\n" + "\n".join(found)
    assert _seeding_calls(SEEDING)  # the check sees the calls where they are


def test_every_salt_is_used_and_documented():
    text = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py") if p != SEEDING)
    docs = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    for name in seeding.SALTS:
        assert f'"{name}"' in text, f"salt {name!r} is declared but no module uses it"
        assert f"`{name}`" in docs, f"salt {name!r} is not in docs/training.md's Seeds table"


def test_an_unknown_salt_fails_with_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown seed salt 'tournament\.schedul': declare it in cogym/core/seeding\.py"):
        seeding.rng("tournament.schedul", 0, 1)
    with pytest.raises(ValueError, match="unknown seed salt"):
        seeding.torch_seed("learner.init", 0)


def test_two_salts_give_two_streams():
    draw = lambda name: seeding.rng(name, 7, 1, 2).integers(1 << 30, size=8).tolist()  # noqa: E731
    assert draw("league.draw") != draw("scripted.iteration")  # a salted stream is apart from the rest
    # two old formulas that are one ([seed, n, k]): their streams are apart by purpose only, as they were
    assert draw("tournament.scripted") == draw("scripted.iteration")
    assert seeding.seeds("tournament.games", 7, n=8) != seeding.seeds("eval.games", 7, n=8)
    assert seeding.key("rollout.key", 7) == seeding.key("tournament.key", 7)  # one formula (derive_key) ...
    assert seeding.key("rollout.key", 7, 1, 0) != seeding.key("tournament.key", 7)  # ... told apart by its parts


# ------------------------------------------------------------------ the old inline formulas, copied literally
def _old_derive_key(*parts):  # agents/sampling.py before the move
    mask, golden = 0xFFFFFFFFFFFFFFFF, 0x9E3779B97F4A7C15

    def mix(x):
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)
    x = 0
    for p in parts:
        x = mix(x ^ (((int(p) & mask) + golden) & mask))
    return x >> 1


def _draws(g: np.random.Generator) -> list:
    return g.integers(1 << 62, size=6).tolist()


@pytest.mark.parametrize("seed", [0, 3, 2**32 - 1])
def test_numpy_salts_give_the_old_inline_numbers(seed):
    old = np.random.default_rng
    assert seeding.seeds("rollout.games", seed, 4, n=5) == [int(x) for x in np.random.SeedSequence([seed, 4]).generate_state(5)]
    assert seeding.seeds("rollout.games", seed, 4, 2, n=5) == [int(x) for x in np.random.SeedSequence([seed, 4, 2]).generate_state(5)]
    assert seeding.seeds("tournament.games", seed, n=5) == [int(x) for x in np.random.SeedSequence([seed, 0xC06]).generate_state(5)]
    assert seeding.seeds("eval.games", seed, n=5) == [int(s) for s in np.random.SeedSequence([seed]).generate_state(5)]
    for k in (0, 1, 5):
        assert seeding.seed("game.spaces", seed, k) == int(np.random.SeedSequence(seed, spawn_key=(k,)).generate_state(1)[0])
        assert seeding.seed("game.spaces", [seed, 2], k) == int(np.random.SeedSequence([seed, 2], spawn_key=(k,)).generate_state(1)[0])
    assert _draws(seeding.rng("league.draw", seed, 3, 1)) == _draws(old([seed, 3, 1, 0x1EA6]))
    assert _draws(seeding.rng("tournament.pairings", seed, 2)) == _draws(old([seed, 1, 2]))
    assert _draws(seeding.rng("tournament.scripted", seed, 4, 1)) == _draws(old([seed, 4, 1]))
    for rank in (0, 1, 3):
        assert _draws(seeding.rng("scripted.iteration", seed, 5, 2, rank)) == _draws(old([seed, 5, 2] + ([rank] if rank else [])))
    assert _draws(seeding.rng("game.checks", [seed, 2])) == _draws(old([seed, 2]))
    assert _draws(seeding.rng("tiny_model.test", seed)) == _draws(old(seed + 10_000))
    for name in ("scripted.init", "scripted.move", "ratings.bootstrap", "game.reset", "game.checks", "game.stress",
                 "arithmetic.heldout", "search.corpus", "search.index", "tiny_model.data"):
        assert _draws(seeding.rng(name, seed)) == _draws(old(seed)), name
    states = seeding.global_states("textarena.globals", seed, seed // 3)
    assert states["py"] == random.Random(seed).getstate()
    old_np = np.random.RandomState(seed // 3).get_state()  # (name, the 624 keys, position, gauss flag, gauss)
    assert np.array_equal(states["np"][1], old_np[1]) and states["np"][::2] + states["np"][3:] == old_np[::2] + old_np[3:]


@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1])
def test_torch_salts_give_the_old_inline_seeds(seed):
    adapter = int.from_bytes(hashlib.sha256(f"{seed}:solver".encode()).digest()[:8], "little") >> 1
    old = {("rollout.sampling", seed, 9): seed * 100_003 + 9,
           ("rollout.sampling", seed, 9, 0): seed * 100_003 + 9,
           ("rollout.sampling", seed, 9, 2): int(np.random.SeedSequence([seed, 9, 2]).generate_state(1)[0]),
           ("tournament.sampling", seed, 4): seed * 1_000_003 + 4,
           ("adapter.init", seed, "solver"): adapter,
           ("eval.sampling", seed): seed,
           ("tiny_model.init", seed): seed}
    state = torch.random.get_rng_state()
    try:
        for (name, *parts), value in old.items():
            assert seeding.torch_seed(name, *parts) == value and torch.initial_seed() == value, name
    finally:
        torch.random.set_rng_state(state)
    g = seeding.torch_generator("learners.packing_check", 0)
    assert torch.equal(torch.randint(4, 100, (8,), generator=g), torch.randint(4, 100, (8,), generator=torch.Generator().manual_seed(0)))


def test_key_salts_are_the_old_splitmix_chain():
    rng = np.random.default_rng(1)
    for _ in range(200):
        parts = rng.integers(0, 2**63, size=int(rng.integers(1, 5))).tolist()
        assert seeding.key("rollout.move", *parts) == _old_derive_key(*parts)
    assert seeding.key("rollout.key", 3, 1, 0) == _old_derive_key(3, 1, 0)
    assert seeding.key("tournament.key", 2**40 + 5) == _old_derive_key(2**40 + 5)
