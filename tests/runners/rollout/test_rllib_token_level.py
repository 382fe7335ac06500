"""RLlib wraps a cogym token-level game and trains on it.

``ray.rllib.env.wrappers.pettingzoo_env.PettingZooEnv`` is used as RLlib ships it, on
``make("interruptible_verifier-v0", granularity="token")``: one token id per step, so RLlib's
ordinary discrete-action machinery drives the game. The token observation is a ``Dict``
(``"observation"``, ``"length"``); RLlib's own ``FlattenObservations`` env-to-module connector
(new API stack) flattens it for the default MLP. Nothing in cogym is adapted for RLlib.

Skipped when RLlib is not installed (``pip install 'cogym[rllib]'``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("ray.rllib", reason="needs RLlib: pip install 'cogym[rllib]'")

import ray
from cogym.envs import make
from cogym.envs.arithmetic import Domain
from cogym.envs.interruptible_verifier import solver_reward
from cogym.envs.token_level import ByteCodec
from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv
from ray.tune.registry import register_env

GAME = "interruptible_verifier-v0"
NUM_SOLVERS = 2
MAX_TURN_TOKENS = 4
PARTIAL_CREDIT = 0.5
ENV_CONFIG = {"num_solvers": NUM_SOLVERS, "max_turn_tokens": MAX_TURN_TOKENS, "max_operand": 9, "partial_credit": PARTIAL_CREDIT}
ENV_NAME = "cogym_interruptible_verifier_token"
SOLVERS = [f"solver_{i}" for i in range(NUM_SOLVERS)]
CODEC = ByteCodec()
TRAIN_BATCH = 128
ITERATIONS = 3


def rllib_env(config: dict | None = None) -> PettingZooEnv:
    """RLlib's PettingZoo wrapper, unmodified, around the token-level game."""
    return PettingZooEnv(make(GAME, granularity="token", **{**ENV_CONFIG, **dict(config or {})}))


# ------------------------------------------------------------------ the wrapper alone
def test_pettingzoo_wrapper_plays_whole_token_level_episodes() -> None:
    """reset/step with (partly random) token actions: whole episodes, the game's rewards and terminations."""
    env = rllib_env()
    assert set(env.possible_agents) == set(SOLVERS)
    for agent in SOLVERS:
        assert env.action_space[agent].n == CODEC.vocab_size
        assert env.observation_space[agent] == env.env.observation_space(agent)

    rng = np.random.default_rng(0)
    max_steps = env.env.spec.max_turns  # NUM_SOLVERS * MAX_TURN_TOKENS tokens at most
    seen_rewards = []
    for episode in range(40):
        obs, infos = env.reset(seed=episode)
        assert isinstance(infos, dict)
        assert list(obs) == [SOLVERS[0]]
        ctx = obs[SOLVERS[0]]
        assert env.observation_space[SOLVERS[0]].contains(ctx)
        assert ctx["length"][1] == 0
        problem = CODEC.decode(ctx["observation"][: ctx["length"][0]])
        reference = str(Domain(max_operand=999_999).parse(problem).answer)

        emitted: dict[str, list[int]] = {a: [] for a in SOLVERS}
        for _ in range(1, max_steps + 1):
            (agent,) = obs  # one seat acts at a time
            assert CODEC.decode(obs[agent]["observation"][: obs[agent]["length"][0]]).startswith(problem)
            # Half the time the right next token (the answer's bytes, then end of message), else a
            # uniformly random token id: rewards of every kind (0, partial, 1) come out, and random
            # bytes exercise interruption.
            right = [*CODEC.encode(reference), CODEC.eos_id][min(len(emitted[agent]), len(reference))]
            token = right if rng.random() < 0.5 else int(rng.integers(CODEC.vocab_size))
            emitted[agent].append(token)
            obs, rewards, terms, truncs, infos = env.step({agent: token})
            if terms["__all__"] or truncs["__all__"]:
                break
            assert set(rewards.values()) == {0.0}  # nobody is paid before the game ends
            assert not any(terms.values()) and not any(truncs.values())
        else:
            pytest.fail(f"episode {episode} did not end within spec.max_turns={max_steps} token steps")

        # The final step reports every seat once: terminated, with the game's reward for its message.
        assert terms == {**{a: True for a in SOLVERS}, "__all__": True}
        assert truncs == {**{a: False for a in SOLVERS}, "__all__": False}
        assert set(obs) == set(rewards) == set(infos) == set(SOLVERS)
        for agent in SOLVERS:
            message = CODEC.decode([t for t in emitted[agent] if t != CODEC.eos_id])
            expected = solver_reward(message, reference, PARTIAL_CREDIT)
            assert rewards[agent] == pytest.approx(expected), (problem, agent, message)
            assert infos[agent]["correct"] == (expected == 1.0)
            assert infos[agent]["problem"] == problem
            seen_rewards.append(rewards[agent])
    # The mix above reaches all three kinds of outcome (fixed seeds: deterministic).
    assert 0.0 in seen_rewards and 1.0 in seen_rewards
    assert any(0.0 < r < 1.0 for r in seen_rewards)
    env.close()


# ------------------------------------------------------------------ an RLlib algorithm
@pytest.fixture(scope="module")
def ray_session():
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    if started:
        ray.shutdown()


def test_rllib_ppo_samples_and_trains_on_token_level_game(ray_session) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import FlattenObservations
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        EPISODE_RETURN_MAX,
        EPISODE_RETURN_MEAN,
        EPISODE_RETURN_MIN,
        LEARNER_RESULTS,
        NUM_ENV_STEPS_SAMPLED,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        NUM_EPISODES,
    )

    register_env(ENV_NAME, rllib_env)
    config = (
        PPOConfig()
        .environment(ENV_NAME, env_config=ENV_CONFIG)
        .framework("torch")
        # All seats share one role: one shared policy. RLlib's own connector flattens the Dict observation.
        .multi_agent(policies={"solver"}, policy_mapping_fn=lambda agent_id, *args, **kwargs: "solver")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1,
                     env_to_module_connector=lambda env, spaces=None, device=None: FlattenObservations(multi_agent=True))
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=TRAIN_BATCH, minibatch_size=64, num_epochs=1, lr=1e-3)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[32], vf_share_layers=True))
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        before = {k: np.array(v, copy=True) for k, v in algo.get_module("solver").get_state().items()}
        lifetime = 0
        for _ in range(ITERATIONS):
            result = algo.train()
            runners = result[ENV_RUNNER_RESULTS]
            assert runners[NUM_ENV_STEPS_SAMPLED] >= TRAIN_BATCH
            assert runners[NUM_ENV_STEPS_SAMPLED_LIFETIME] > lifetime  # sampling goes on every iteration
            lifetime = runners[NUM_ENV_STEPS_SAMPLED_LIFETIME]
            # Whole episodes completed; an episode's return is the sum over seats of rewards in [0, 1].
            assert runners[NUM_EPISODES] > 0
            for key in (EPISODE_RETURN_MIN, EPISODE_RETURN_MEAN, EPISODE_RETURN_MAX):
                assert 0.0 <= runners[key] <= NUM_SOLVERS, (key, runners[key])
            per_agent = runners["agent_episode_returns_mean"]
            assert set(per_agent) == set(SOLVERS)
            assert all(0.0 <= r <= 1.0 for r in per_agent.values()), per_agent
            # An episode is at most spec.max_turns token steps.
            assert 1 <= runners["episode_len_min"] <= runners["episode_len_max"] <= NUM_SOLVERS * MAX_TURN_TOKENS
            losses = result[LEARNER_RESULTS]["solver"]
            assert math.isfinite(float(losses["total_loss"]))
        assert lifetime >= ITERATIONS * TRAIN_BATCH
        after = algo.get_module("solver").get_state()
        assert set(after) == set(before)
        changed = [k for k in before if not np.array_equal(before[k], np.asarray(after[k]))]
        assert changed, "PPO updates left every weight of the policy unchanged"
        assert any(k.startswith("pi.") for k in changed) and any(k.startswith("encoder.") for k in changed), changed
    finally:
        algo.stop()
