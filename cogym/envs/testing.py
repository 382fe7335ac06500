"""Helpers for testing a game by hand: play a seat's move, then let the finished seats leave.

A playthrough test steps each seat with :func:`step_as` and asserts the rewards after every turn,
then calls :func:`drain` to walk the finished seats out of the game as PettingZoo's AEC protocol
requires (each is stepped with ``None`` after it has seen its last reward)::

    env.reset(seed=0)
    assert step_as(env, "proposer", "37+45") == {"proposer": 0.0, "solver_0": 0.0}
    final = step_as(env, "solver_0", "82")
    assert drain(env) == final
"""

from __future__ import annotations

from typing import Any


def step_as(env: Any, agent: str, action: Any) -> dict[str, float]:
    """Step ``agent``, which must be the seat to move, with ``action``; return this step's rewards."""
    assert env.agent_selection == agent, f"{agent!r} is not the seat to move; {env.agent_selection!r} is"
    assert env.ready_agents()[:1] == [agent], f"ready_agents() {env.ready_agents()} does not start at {agent!r}"
    env.step(action)
    return dict(env.rewards)


def drain(env: Any) -> dict[str, float]:
    """Step every finished seat with None until none is left; return the reward each saw in ``last()``."""
    seen = {}
    while env.agents:
        agent = env.agent_selection
        _, reward, terminated, truncated, _ = env.last()
        assert terminated and not truncated, f"{agent!r} is still playing; drain() is for a finished game"
        seen[agent] = reward
        env.step(None)
    return seen
