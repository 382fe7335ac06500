"""Config loading: the shipped default, dotted overrides, and errors that say what, where and how to fix."""

from __future__ import annotations

import pytest
import yaml

from cogym.learners.config import LearnerConfig
from cogym.runners.config.load import load_config, parse_override
from cogym.core.errors import ConfigError
from cogym.runners.config.schema import ALGORITHMS, ENGINES, Config, PolicyConfig, default_config_path


def _error(overrides: list[str], path=None) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    msg = str(err.value)
    assert "\n" not in msg, "config errors are one line"
    return msg


# ------------------------------------------------------------------ the shipped default
def test_shipped_default_loads():
    cfg = load_config(None)
    assert isinstance(cfg, Config)
    assert default_config_path().name == "proposer_solver.yaml" and default_config_path().is_file()
    assert cfg.game.id == "proposer_solver-v0"
    assert cfg.seats == {"proposer": "proposer", "solver": "solver"}
    assert set(cfg.policies) == {"proposer", "solver"} == set(cfg.learners)
    assert all(isinstance(p, PolicyConfig) for p in cfg.policies.values())
    assert all(isinstance(lc, LearnerConfig) for lc in cfg.learners.values())
    assert cfg.learners["solver"].algorithm == "grpo" and cfg.learners["proposer"].algorithm == "reinforce_pp"
    assert cfg.learners["solver"].lr == 5e-5 and isinstance(cfg.learners["solver"].lr, float)
    assert cfg.prompts["solver"].system == "Solve."
    assert cfg.game.kwargs["num_solvers"] == 8


def test_loading_the_same_file_by_path_gives_the_same_config():
    assert load_config(default_config_path()).to_dict() == load_config(None).to_dict()


def test_to_dict_round_trips_through_yaml(tmp_path):
    cfg = load_config(None, ["learners.solver.dual_clip=null", "game.kwargs.band=[0.1, 0.9]"])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    assert load_config(path).to_dict() == cfg.to_dict()


# ------------------------------------------------------------------ overrides
def test_dotted_overrides_apply_with_yaml_typing():
    cfg = load_config(None, [
        "learners.solver.lr=1e-4",  # YAML reads 1e-4 as a string: still a float
        "learners.proposer.lr=0.5",
        "run.iterations=7",
        "run.tensorboard=false",
        "learners.solver.dual_clip=null",
        "policies.solver.sampling.temperature=2",  # int into a float field
        "game.kwargs.num_solvers=3",
        "game.kwargs.verifier=majority",
        "prompts.solver.system=Answer with a number.",
        "run.name=with=equals",
    ])
    assert cfg.learners["solver"].lr == pytest.approx(1e-4) and isinstance(cfg.learners["solver"].lr, float)
    assert cfg.learners["proposer"].lr == 0.5
    assert cfg.run.iterations == 7 and isinstance(cfg.run.iterations, int)
    assert cfg.run.tensorboard is False
    assert cfg.learners["solver"].dual_clip is None
    assert cfg.policies["solver"].sampling.temperature == 2.0 and isinstance(cfg.policies["solver"].sampling.temperature, float)
    assert cfg.game.kwargs["num_solvers"] == 3 and cfg.game.kwargs["verifier"] == "majority"
    assert cfg.game.kwargs["proposer_reward"] == "learnability"  # the rest of the mapping is kept
    assert cfg.prompts["solver"].system == "Answer with a number."
    assert cfg.run.name == "with=equals"
    # Untouched values keep the file's values.
    assert cfg.learners["proposer"].algorithm == "reinforce_pp" and cfg.run.seed == 0


def test_later_override_wins():
    assert load_config(None, ["run.iterations=3", "run.iterations=5"]).run.iterations == 5


def test_overrides_can_add_a_policy_with_its_learner():
    cfg = load_config(None, ["policies.judge.model=some/dir", "learners.judge.algorithm=frozen", "learners.judge.lr=0"])
    assert cfg.policies["judge"].model == "some/dir"
    assert cfg.learners["judge"].algorithm == "frozen"


@pytest.mark.parametrize("text, key, value", [
    ("a.b=1", "a.b", 1),
    ("a.b=1.5", "a.b", 1.5),
    ("a.b=true", "a.b", True),
    ("a.b=null", "a.b", None),
    ("a.b=[1, 2]", "a.b", [1, 2]),
    ("a.b=", "a.b", ""),
    ("a.b=x=y", "a.b", "x=y"),
    (" a.b =hello", "a.b", "hello"),
])
def test_parse_override(text, key, value):
    assert parse_override(text) == (key, value)


def test_malformed_override_without_equals():
    msg = _error(["run.iterations"])
    assert "'run.iterations'" in msg and "key.path=value" in msg


@pytest.mark.parametrize("text", ["=3", "run..iterations=3", ".run=1", "run.=1"])
def test_override_with_empty_key_part(text):
    assert "empty key part" in _error([text])


def test_override_with_invalid_yaml_value():
    assert "not valid YAML" in _error(["run.name=[unclosed"])


def test_override_through_a_value_is_an_error():
    msg = _error(["run.iterations.x=1"])
    assert "'iterations' is a value, not a section" in msg


# ------------------------------------------------------------------ unknown keys and wrong types
def test_typo_key_names_the_key_and_suggests_the_fix():
    msg = _error(["learners.solver.lrr=1"])
    assert "learners.solver.lrr" in msg
    assert "did you mean 'lr'" in msg


@pytest.mark.parametrize("override, bad, suggestion", [
    ("runn.iterations=3", "runn", "run"),
    ("run.iteration=3", "run.iteration", "iterations"),
    ("prompts.solver.sytem=x", "prompts.solver.sytem", "system"),
    ("policies.solver.sampling.temprature=0.5", "policies.solver.sampling.temprature", "temperature"),
])
def test_typo_keys_everywhere(override, bad, suggestion):
    msg = _error([override])
    assert repr(bad) in msg and f"did you mean {suggestion!r}" in msg


def test_unknown_key_without_close_match_lists_the_keys():
    msg = _error(["run.zzzzzzzz=1"])
    assert "run.zzzzzzzz" in msg and "iterations" in msg and "seed" in msg


@pytest.mark.parametrize("override, key, expected", [
    ("run.iterations=abc", "run.iterations", "integer"),
    ("run.iterations=2.5", "run.iterations", "integer"),
    ("run.iterations=true", "run.iterations", "integer"),
    ("learners.solver.lr=abc", "learners.solver.lr", "number"),
    ("run.tensorboard=1", "run.tensorboard", "true or false"),
    ("run.name=[1, 2]", "run.name", "string"),
    ("game.kwargs=3", "game.kwargs", "mapping"),
    ("learners.solver=3", "learners.solver", "mapping"),
])
def test_wrong_type_names_key_and_expected_type(override, key, expected):
    msg = _error([override])
    assert key in msg and expected in msg
    assert "got" in msg  # and what it got


def test_wrong_type_in_yaml_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("run:\n  iterations: ten\n")
    msg = _error([], path)
    assert "run.iterations" in msg and "integer" in msg and "'ten'" in msg


# ------------------------------------------------------------------ choices and combinations
@pytest.mark.parametrize("override, key, choices", [
    ("learners.solver.algorithm=trpo", "learners.solver.algorithm", ALGORITHMS),
    ("learners.solver.engine=jax", "learners.solver.engine", ENGINES),
    ("learners.proposer.kl_in_reward=k7", "learners.proposer.kl_in_reward", ("off", "k1", "k2", "k3", "abs")),
    ("learners.proposer.whiten=sklearn", "learners.proposer.whiten", ("verl", "openrlhf")),
])
def test_unknown_choice_lists_the_choices(override, key, choices):
    msg = _error([override])
    assert key in msg and repr(override.split("=")[1]) in msg
    for c in choices:
        assert c in msg


def test_choice_typo_suggests_the_closest():
    assert "did you mean 'grpo'" in _error(["learners.solver.algorithm=grop"])


def test_seat_mapped_to_an_undefined_policy():
    msg = _error(["seats.solver=ghost"])
    assert "seats.solver" in msg and "'ghost'" in msg and "proposer" in msg and "solver" in msg


def test_policy_without_learner():
    msg = _error(["policies.judge.model=x"])
    assert "'judge'" in msg and "learners.judge" in msg and "frozen" in msg


def test_learner_without_policy():
    msg = _error(["learners.ghost.lr=1e-4"])
    assert "learners.ghost" in msg and "not under policies" in msg


def test_kl_in_loss_k1_is_rejected_with_the_reason():
    msg = _error(["learners.solver.kl_in_loss=k1"])
    assert "learners.solver.kl_in_loss" in msg
    assert "zero expected gradient" in msg and "kl_in_reward" in msg


@pytest.mark.parametrize("kl", ["k2", "k3", "k3+", "k1+"])
def test_kl_in_loss_valid_estimators_load(kl):
    assert load_config(None, [f"learners.solver.kl_in_loss={kl}"]).learners["solver"].kl_in_loss == kl


@pytest.mark.parametrize("override, fragment", [
    ("run.iterations=0", "run.iterations must be >= 1"),
    ("run.checkpoint_every=-1", "run.checkpoint_every"),
    ("game.num_games=0", "game.num_games must be >= 1"),
    ("policies.solver.sampling.max_new_tokens=0", "policies.solver.sampling.max_new_tokens"),
    ("policies.solver.sampling.temperature=0", "policies.solver.sampling.temperature must be > 0"),
    ("learners.solver.lr=0", "learners.solver.lr must be > 0"),
    ("learners.solver.zero_stage=4", "learners.solver.zero_stage"),
    ("learners.solver.dual_clip=1", "learners.solver.dual_clip"),
    ("learners.solver.clip_low=1", "clip_low"),
    ("learners.solver.epochs=0", "epochs"),
    ("learners.solver.loss_agg=dr_grpo", "norm_const"),
    ("seats={}", "seats is empty"),
])
def test_out_of_range_values_fail_at_load(override, fragment):
    assert fragment in _error([override])


def test_torch_engine_with_zero_is_rejected():
    msg = _error(["learners.solver.engine=torch", "learners.solver.zero_stage=2"])
    assert "learners.solver" in msg and "deepspeed" in msg


def test_frozen_learner_may_have_lr_zero():
    cfg = load_config(None, ["learners.proposer.algorithm=frozen", "learners.proposer.lr=0"])
    assert cfg.learners["proposer"].algorithm == "frozen"


# ------------------------------------------------------------------ files
def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    msg = _error([], missing)
    assert str(missing) in msg and "does not exist" in msg


def test_invalid_yaml_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("run: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(path)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# ------------------------------------------------------------------ gaps (bugs)
def test_scripted_seat_is_accepted():
    cfg = load_config(None, ["seats.proposer=scripted:random"])
    assert cfg.seats["proposer"] == "scripted:random"


@pytest.mark.parametrize("override", [
    "run.eval_every=-1",  # it % -1 == 0: evaluates at every iteration
    "policies.solver.sampling.top_p=0",  # SamplingParams raises only in build()
])
def test_invalid_values_fail_at_load(override):
    with pytest.raises(ConfigError):
        load_config(None, [override])


def test_a_null_seat_goes_with_its_prompt_and_the_policy_nobody_plays(tmp_path) -> None:
    """``seats.proposer=null`` turns the default config into a dataset run in one command: the seat, its
    prompt, and the proposer policy and learner go; the solver is untouched."""
    cfg = load_config(None, ["game.kwargs.source=dataset", "seats.proposer=null"])
    assert "proposer" not in cfg.seats and "proposer" not in cfg.prompts
    assert set(cfg.policies) == {"solver"} and set(cfg.learners) == {"solver"}
    assert cfg.seats["solver"] == "solver" and cfg.prompts["solver"].system
    # A policy another seat still plays stays.
    shared = tmp_path / "shared.yaml"
    shared.write_text(
        "seats: {proposer: both, solver: both}\n"
        "policies: {both: {model: tiny}}\n"
        "learners: {both: {algorithm: grpo}}\n"
        "prompts: {solver: {system: Solve.}, proposer: {system: Propose.}}\n"
        "game: {id: proposer_solver-v0}\n")
    cfg = load_config(shared, ["seats.proposer=null"])
    assert cfg.seats == {"solver": "both"} and set(cfg.policies) == {"both"} and set(cfg.learners) == {"both"}
    assert set(cfg.prompts) == {"solver"}


@pytest.mark.parametrize("override", [
    "eval.evaluators.heldout.size=-5",  # load_heldout()[:-5] would silently evaluate 495 problems
    "eval.evaluators.heldout.max_new_tokens=0",  # SamplingParams would raise only when the held-out eval runs
])
def test_a_declared_evaluators_bad_setting_fails_when_the_run_is_built_before_any_model_loads(override, monkeypatch):
    """The game declares the evaluator, so its settings are checked with the game: when the run is built,
    before a model is loaded."""
    from cogym.agents.policy import Policy
    from cogym.runners.train.build import build

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad setting was refused")

    monkeypatch.setattr(Policy, "from_pretrained", no_load)
    with pytest.raises(ConfigError, match="eval.evaluators.heldout"):
        build(load_config(None, [override]))
