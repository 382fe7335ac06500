"""reset(seed) seeds action spaces at once and observation spaces on first access: what they sample
is fixed by the seed and the seat, whatever order the seats' spaces are asked for in, equals eager
seeding, and an action space object fetched before the reset is seeded too."""

from __future__ import annotations

import numpy as np

from cogym.envs import make


def _samples(env, seats):
    return {s: (env.action_space(s).sample(), str(env.observation_space(s).sample())) for s in seats}


def test_lazy_space_seeding_is_the_eager_seeding_in_any_order() -> None:
    env = make("proposer_solver-v0", num_solvers=3)
    seats = list(env.possible_agents)
    env.reset(seed=11)
    forward = _samples(env, seats)
    env.reset(seed=11)
    backward = _samples(env, list(reversed(seats)))
    assert forward == backward
    # Eager seeding, as SeedSequence(seed).spawn numbers the children: seat i gets 2i and 2i + 1.
    eager = make("proposer_solver-v0", num_solvers=3)
    children = np.random.SeedSequence(11).spawn(2 * len(seats))
    for i, s in enumerate(seats):
        eager.action_spaces[s].seed(int(children[2 * i].generate_state(1)[0]))
        eager.observation_spaces[s].seed(int(children[2 * i + 1].generate_state(1)[0]))
    assert {s: (eager.action_spaces[s].sample(), str(eager.observation_spaces[s].sample())) for s in seats} == forward
    env.reset(seed=12)
    assert _samples(env, seats) != forward


def test_an_action_space_held_from_before_the_reset_is_seeded_by_it() -> None:
    import copy
    import pickle

    env = make("kuhn_poker-v0")
    held = env.action_spaces["player_0"]  # as RLlib's PettingZoo adapter keeps them
    env.reset(seed=3)
    first = [held.sample() for _ in range(3)]
    env.reset(seed=3)
    assert [env.action_space("player_0").sample() for _ in range(3)] == first
    assert hash(env.spec) == hash(copy.deepcopy(env.spec)) and pickle.loads(pickle.dumps(env.spec)) == env.spec
