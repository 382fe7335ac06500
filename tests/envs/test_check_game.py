"""check_game catches each kind of broken game (each broken game breaks one rule)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from cogym.envs import register
from cogym.envs.base import CogymEnv as CogymEnvBase
from cogym.envs.checks import check_game
from cogym.envs.proposer_solver import SCRIPTED, ProposerSolverEnv


class GlobalRandom(ProposerSolverEnv):
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        np.random.random()  # the bug: global numpy state
        super().reset(seed=seed, options=options)


class SharedRng(ProposerSolverEnv):
    shared = np.random.default_rng(0)  # the bug: one generator for every copy, never reseeded

    @property
    def np_random(self) -> np.random.Generator:
        return SharedRng.shared


class NarrowRange(ProposerSolverEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = dataclasses.replace(self.spec, reward_range=(-1.0, 0.5))


class TooFewTurns(ProposerSolverEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = dataclasses.replace(self.spec, max_turns=2)


class NotZeroSum(ProposerSolverEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = dataclasses.replace(self.spec, zero_sum=True)


class LeakyObservation(ProposerSolverEnv):
    def observe(self, agent: str) -> dict[str, Any]:
        obs = super().observe(agent)
        obs["observation"][1] = len(self._answers)  # the bug: ready seats see each other's progress
        return obs


class WrongReadyOrder(ProposerSolverEnv):
    def ready_agents(self) -> list[str]:
        return list(reversed(super().ready_agents()))


class Crashy(ProposerSolverEnv):
    def step(self, action: str) -> None:
        if isinstance(action, str) and "(" in action:
            raise RuntimeError("cannot handle parentheses")
        super().step(action)


class StuckSolver(ProposerSolverEnv):
    def ready_agents(self) -> list[str]:
        return super().ready_agents()[:1]

    def step(self, action) -> None:
        if self._phase == 2 and not self.terminations.get(self.agent_selection, True):
            self._begin_turn(action)  # the bug: the answer is dropped, so the same solver is asked again and again
            return
        super().step(action)


class NoRenderText(ProposerSolverEnv):
    _render_text = CogymEnvBase._render_text  # the bug: the base's, which raises NotImplementedError


class Unexplained(ProposerSolverEnv):
    def _propose(self, proposal: str) -> None:
        super()._propose(proposal)
        self.infos["proposer"].pop("reason", None)


@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (GlobalRandom, {}, "global random"),
        (SharedRng, {"source": "dataset"}, "not deterministic|copies share RNG state|does not fully reset"),
        (NarrowRange, {}, r"got reward 1.0: a reward must be a finite number inside spec.reward_range \[-1, 0.5\]"),
        (TooFewTurns, {}, "more than spec.max_turns = 2"),
        (NotZeroSum, {}, "spec.zero_sum but the returns"),
        (LeakyObservation, {}, "observation of ready seat .* changed when another ready seat acted"),
        (WrongReadyOrder, {}, "must list distinct seats starting at agent_selection"),
        (Crashy, {}, "the game raised RuntimeError: cannot handle parentheses"),
        (Unexplained, {}, r"invalid move must be explained"),
        (StuckSolver, {}, r"did not end within .* seat 'solver_0' was asked again and again: after a seat's step, "
                          r"agent_selection must move on"),
        (NoRenderText, {}, r"render\(\) with render_mode='ansi' raised NotImplementedError; implement _render_text"),
    ],
)
def test_check_game_catches(scratch_registry, heldout_path: str, cls: type, kwargs: dict, message: str) -> None:
    if kwargs.get("source") == "dataset":
        kwargs = {**kwargs, "dataset": heldout_path}
    register("broken-v0", cls, scripted=SCRIPTED)
    with pytest.raises(AssertionError, match=message):
        check_game("broken-v0", {"num_solvers": 3, **kwargs}, episodes=12)


def test_check_game_requires_a_scripted_twin_per_role(scratch_registry) -> None:
    register("no_twins-v0", ProposerSolverEnv, scripted={"solver": SCRIPTED["solver"]})
    with pytest.raises(AssertionError, match="role 'proposer' has no scripted twin"):
        check_game("no_twins-v0")


def test_check_game_passes_the_unbroken_game_and_validates_episodes() -> None:
    check_game("proposer_solver-v0", {"num_solvers": 3}, episodes=12)
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        check_game("proposer_solver-v0", episodes=0)


class BareTextObservation(ProposerSolverEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.observation_spaces = {a: space["text"] for a, space in self.observation_spaces.items()}


def test_check_game_requires_the_dict_observation_contract(scratch_registry) -> None:
    register("bare_text-v0", BareTextObservation, scripted=SCRIPTED)
    with pytest.raises(AssertionError, match="must be a Dict with a Text 'text' entry"):
        check_game("bare_text-v0")


def test_token_level_checker_starts_every_message_afresh() -> None:
    # A message cut at max_turn_tokens must not leave its tail to open the seat's next message.
    from cogym.envs import make, scripted_strategies
    from cogym.envs.checks import _Episode

    env = make("debate-v0", granularity="token", rounds=2, max_turn_tokens=4)
    twins = scripted_strategies("debate-v0")
    _Episode(env, "t", {"debater": "honest", "judge": "oracle"}, twins, seed=0).play(seed=0)
    by_side: dict[int, list[str]] = {}
    for side, message in env.env._transcript:
        by_side.setdefault(side, []).append(message)
    for messages in by_side.values():
        assert len(messages) == 2 and messages[0] == messages[1], messages  # both rounds open the same way


def test_testing_helpers_refuse_a_seat_out_of_turn_and_an_unfinished_game() -> None:
    from cogym.envs import make
    from cogym.envs.testing import drain, step_as

    env = make("kuhn_poker-v0")
    env.reset(seed=0)
    with pytest.raises(AssertionError, match="not the seat to move"):
        step_as(env, "player_1", "check")
    with pytest.raises(AssertionError, match="still playing"):
        drain(env)
    assert step_as(env, "player_0", "check") == {"player_0": 0.0, "player_1": 0.0}
    final = step_as(env, "player_1", "check")
    assert sorted(final.values()) == [-1.0, 1.0] and drain(env) == final and env.agents == []


class _BrokenPromise(ProposerSolverEnv):
    """Declares a fact (``task``) for the solver role that it never reports."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec = dataclasses.replace(self.spec, outcomes={**self.spec.outcomes, "solver": ("correct", "task")})


class _MistypedFact(ProposerSolverEnv):
    """Reports ``correct`` as a string."""

    def step(self, action):
        super().step(action)
        for info in self.infos.values():
            if info.get("correct") is not None:
                info["correct"] = "yes"


@pytest.mark.parametrize("cls, message", [
    (_BrokenPromise, r"spec.outcomes promises \['task'\] for role 'solver'"),
    (_MistypedFact, r"\['correct'\] must be True, False \(or 1, 0\) or None, got 'yes'"),
])
def test_check_game_holds_a_game_to_the_outcome_contract(scratch_registry, cls: type, message: str) -> None:
    register("contract-v0", cls, scripted=SCRIPTED)
    with pytest.raises(AssertionError, match=message):
        check_game("contract-v0", {"num_solvers": 3}, episodes=6)


def test_a_spec_cannot_promise_an_unknown_fact_or_role() -> None:
    from cogym.envs.base import GameSpec

    with pytest.raises(ValueError, match="not contract keys"):
        GameSpec("x-v0", ("a",), (0.0, 1.0), False, 1, "x", outcomes={"a": ("score",)})
    with pytest.raises(ValueError, match="not in roles"):
        GameSpec("x-v0", ("a",), (0.0, 1.0), False, 1, "x", outcomes={"b": ("correct",)})
