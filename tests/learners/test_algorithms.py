"""Algorithms as plug-ins: the registry, the split of a learner's flat keys between the common config
and the algorithm's, each algorithm's self-validation, and the state of every stateful algorithm
saved and loaded with the learner's checkpoint."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pytest
import torch
from test_learner import _turns

from cogym.learners import registry
from cogym.learners.algorithms import Advantages, Algorithm, AlgorithmConfig, get, names, register, unregister
from cogym.learners.config import LearnerConfig, UnknownKey, common_keys, split_keys
from cogym.learners.learner import Learner
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError

SHIPPED = ("grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo", "rae", "trr_pp", "prime", "spin", "sft", "dpo", "distill",
           "grpo_passk", "opo", "gpg", "otb", "reward_model", "pf_ppo", "vapo", "remax")


@pytest.fixture
def scratch_registry():
    """A private copy of the registry: registrations made in a test are undone afterwards."""
    saved = registry._REGISTRY
    registry._REGISTRY = dict(saved)
    yield
    registry._REGISTRY = saved


@dataclass
class HalfConfig(AlgorithmConfig):
    half_scale: float = 0.5

    def validate(self, common) -> None:
        if not self.half_scale > 0:
            raise ValueError(f"half_scale must be > 0, got {self.half_scale}")


class Half(Algorithm):
    """Every token's advantage is half_scale * (reward - 0.5)."""

    Config = HalfConfig

    def advantages(self, rows):
        return Advantages((rows.batch.scores[:, None] - 0.5) * self.cfg.half_scale * rows.mask, metrics={"half": 1.0})


# ------------------------------------------------------------------ the registry
def test_every_shipped_algorithm_is_registered_in_order():
    assert names()[:len(SHIPPED)] == SHIPPED
    assert {n for n in SHIPPED if get(n).grouped} == {"grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "dpo",
                                                      "grpo_passk", "opo", "gpg", "otb"}
    assert [n for n in SHIPPED if not get(n).per_role] == ["spin", "sft", "dpo", "reward_model"]


def test_unknown_algorithm_suggests_the_closest():
    with pytest.raises(ValueError, match="did you mean 'rloo'"):
        get("rlooo")


def test_user_algorithm_registers_and_trains(scratch_registry, policy):
    register("half")(Half)
    assert get("half") is Half and "half" in names() and Half.name == "half"
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="half", engine="torch", lr=1e-3, half_scale=2.0))
    metrics = learner.update(_turns(policy))
    assert metrics["solver/half"] == 1.0 and metrics["adv_abs_mean"] == pytest.approx(1.0)


def test_a_name_is_registered_once(scratch_registry):
    register("half")(Half)
    register("half")(Half)  # the same class again (a module imported twice): fine
    with pytest.raises(ValueError, match="already registered"):
        register("half")(type("Other", (Half,), {}))
    with pytest.raises(ValueError, match="already registered"):
        register("grpo")(type("MyGRPO", (Half,), {}))


def test_registration_refuses_frozen_non_algorithms_and_shadowed_common_keys(scratch_registry):
    with pytest.raises(ValueError, match="frozen"):
        register("frozen")(Half)
    with pytest.raises(TypeError, match="subclass"):
        register("thing")(object)

    @dataclass
    class Shadow(AlgorithmConfig):
        lr: float = 1.0

    with pytest.raises(ValueError, match="common learner keys"):
        register("shadow")(type("Shadowing", (Half,), {"Config": Shadow}))
    unregister("shadow")
    assert "shadow" not in names()


# ------------------------------------------------------------------ flat keys
def test_flat_keys_split_between_common_and_the_algorithms_in_use():
    common, parts = split_keys({"algorithm": "grpo", "role_algorithms": {"p": "ppo"}, "lr": 0.1, "gamma": 0.9,
                                "lam": 0.95, "grpo_eps": 1e-4})
    assert common == {"algorithm": "grpo", "role_algorithms": {"p": "ppo"}, "lr": 0.1}
    assert parts == {"grpo": {"grpo_eps": 1e-4}, "ppo": {"gamma": 0.9, "lam": 0.95}}


def test_a_shared_key_goes_to_every_algorithm_in_use_and_round_trips():
    lc = LearnerConfig.from_flat(algorithm="reinforce_pp", role_algorithms={"p": "ppo"}, gamma=0.9)
    assert lc.settings("reinforce_pp").gamma == lc.settings("ppo").gamma == 0.9
    assert LearnerConfig.from_flat(**lc.flat()) == lc
    assert set(lc.flat()) >= common_keys() | {"gamma", "lam", "whiten"}


def test_a_key_of_an_unused_algorithm_is_kept_for_it():
    lc = LearnerConfig.from_flat(algorithm="rloo", prime_beta=0.2)  # a prime config run with rloo
    assert lc.algorithm_names() == ("rloo",) and lc.settings("prime").prime_beta == 0.2


def test_unknown_learner_key_suggests_over_common_and_algorithm_keys():
    with pytest.raises(UnknownKey, match="did you mean 'rae_decay'"):
        split_keys({"algorithm": "rae", "rae_decy": 0.5})
    with pytest.raises(UnknownKey, match="did you mean 'kl_loss_coef'"):
        split_keys({"kl_los_coef": 0.5})


@pytest.mark.parametrize("override, message", [
    ("learners.proposer.lamm=0.9", "unknown config key 'learners.proposer.lamm' (did you mean 'lam'?)"),
    ("learners.proposer.gamma=2", "learners.proposer.gamma must be a finite number in [0.0, 1.0], got 2.0"),
    ("learners.proposer.gamma=abc", "learners.proposer.gamma must be a number"),
    ("learners.solver.algorithm=ppo ; learners.solver.value_clip=-1", "learners.solver.value_clip must be > 0 or null"),
    ("learners.solver.algorithm=rae ; learners.solver.rae_order=later", "learners.solver.rae_order must be one of pre"),
    ("learners.solver.algorithm=rae ; learners.solver.kl_in_reward=k1", "learners.solver: rae computes advantages"),
    ("learners.solver.role_algorithms={solver: spin}", "learners.solver.role_algorithms.solver must be one of"),
])
def test_algorithm_config_errors_name_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, override.split(" ; "))
    assert message in str(err.value)


def test_config_yaml_round_trips_flat(tmp_path):
    import yaml

    cfg = load_config(None, ["learners.proposer.algorithm=ppo", "learners.proposer.lam=0.9"])
    written = cfg.to_dict()
    assert written["learners"]["proposer"]["lam"] == 0.9 and "algorithm_configs" not in written["learners"]["proposer"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(written, sort_keys=False))
    assert load_config(path).learners == cfg.learners


def test_config_accepts_an_algorithm_registered_by_a_game_module(scratch_registry, tmp_path):
    module = tmp_path / "my_algo.py"
    module.write_text((
        "from dataclasses import dataclass\n"
        "from cogym.learners.algorithms import Advantages, Algorithm, AlgorithmConfig, register\n"
        "@dataclass\nclass Cfg(AlgorithmConfig):\n    my_scale: float = 1.0\n"
        "@register('my_algo_from_module')\nclass My(Algorithm):\n    Config = Cfg\n"
        "    def advantages(self, rows):\n        return Advantages(rows.mask * self.cfg.my_scale)\n"))
    cfg = load_config(None, [f"game.modules=[{module}]", "learners.solver.algorithm=my_algo_from_module",
                             "learners.solver.my_scale=3"])
    assert cfg.learners["solver"].settings("my_algo_from_module").my_scale == 3.0


# ------------------------------------------------------------------ state with the checkpoint
def _with_reference(turns):
    return [dataclasses.replace(t, info={"reference": "12"}) for t in turns]


def _state(name: str, learner: Learner):
    alg = learner.algorithms[name]
    if name == "rae":
        return dict(alg.baselines.values)
    if name == "ppo":
        return {k: v.clone() for k, v in alg.critic.model.state_dict().items()}
    if name == "prime":
        return {k: v.clone() for k, v in alg.prm.model.state_dict().items()}
    return ({k: v.clone() for k, v in alg.opponent.state_dict().items()}, alg.updates)


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and a and isinstance(next(iter(a.values())), torch.Tensor):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("name, files", [("rae", ["rae_baselines.json"]), ("ppo", ["critic"]), ("prime", ["prm"]),
                                         ("spin", ["spin_opponent.safetensors"])])
def test_stateful_algorithms_save_and_load_their_state(policy, tmp_path, name, files):
    extra = {"spin_refresh": 1} if name == "spin" else {"prime_lr": 1e-2} if name == "prime" else {}
    cfg = LearnerConfig.from_flat(algorithm=name, engine="torch", lr=1e-3, micro_batch_size=4, **extra)
    turns = _with_reference(_turns(policy))
    learner = Learner(policy, cfg, game_id="g")
    fresh = _state(name, learner)
    learner.update(turns)
    learner.save(tmp_path)
    assert all((tmp_path / f).exists() for f in files)
    saved = _state(name, learner)
    assert not _same(saved, fresh), "one update changes the algorithm's state"
    resumed = Learner(policy, cfg, game_id="g", critic_weights=tmp_path / "critic" if name == "ppo" else None)
    resumed.load(tmp_path)
    assert _same(_state(name, resumed), saved) and resumed.steps == learner.steps == 1
    assert json.loads((tmp_path / "state.json").read_text())["steps"] == 1
