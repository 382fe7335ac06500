"""runners.build: a config becomes games, policies, agents (LLM or scripted twins) and learners."""

from __future__ import annotations

import pytest

from cogym.agents.llm import LLMAgent
from cogym.agents.scripted import ScriptedAgent
from cogym.runners.train.build import build
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError
from cogym.runners.rollout.seating import SeatingError


def _cfg(model_dir, *extra: str):
    return load_config(None, [f"policies.proposer.model={model_dir}", f"policies.solver.model={model_dir}",
                              "learners.proposer.engine=torch", "learners.solver.engine=torch", "game.num_games=3",
                              "game.kwargs.num_solvers=2", "run.tensorboard=false", "run.plot=false",
                              "eval.declared=false", *extra])


def test_build_instantiates_the_config(tiny_model_dir):
    run = build(_cfg(tiny_model_dir, "policies.solver.sampling.max_new_tokens=5"))
    assert len(run.games) == 3 and len({id(g) for g in run.games}) == 3
    assert run.roles == ("proposer", "solver")
    assert set(run.policies) == {"proposer", "solver"} == set(run.learners)
    assert run.policies["proposer"].model is not run.policies["solver"].model
    assert run.policies["solver"].name == "solver"
    pid, agent = run.seat_map("solver_1", "solver")
    assert pid == "solver" and isinstance(agent, LLMAgent) and agent.sampling.max_new_tokens == 5
    assert run.seat_map("proposer", "proposer")[0] == "proposer"
    assert run.policy_for_role("solver") is run.policies["solver"]
    assert all(lr.engine.name == "torch" for lr in run.learners.values())


def test_seat_name_overrides_role(tiny_model_dir):
    cfg = _cfg(tiny_model_dir, "game.kwargs.num_solvers=3")  # two solvers stay on the GRPO policy: groups of two
    cfg.seats["solver_0"] = "proposer"  # one solver seat played by the proposer's policy
    run = build(cfg)
    assert run.seat_map("solver_0", "solver")[0] == "proposer"
    assert run.seat_map("solver_1", "solver")[0] == "solver"


def test_unknown_seat_or_role_is_rejected(tiny_model_dir):
    cfg = _cfg(tiny_model_dir, "seats.judge=solver")
    with pytest.raises(SeatingError, match="seats.judge") as err:
        build(cfg)
    assert "proposer" in str(err.value) and "solver" in str(err.value)


def test_bad_game_kwarg_is_rejected(tiny_model_dir):
    with pytest.raises(ValueError, match="num_solverz"):
        build(_cfg(tiny_model_dir, "game.kwargs.num_solverz=2"))


def test_scripted_twin_seat_builds_a_scripted_agent(tiny_model_dir):
    # load_config rejects 'scripted:' seats today (see test_scripted_seat_is_accepted); build supports them.
    cfg = _cfg(tiny_model_dir)
    cfg.seats["proposer"] = "scripted:random"
    run = build(cfg)
    pid, agent = run.seat_map("proposer", "proposer")
    assert pid == "scripted:random" and isinstance(agent, ScriptedAgent)


def test_unknown_scripted_twin_lists_the_available(tiny_model_dir):
    cfg = _cfg(tiny_model_dir)
    cfg.seats["solver"] = "scripted:genius"
    with pytest.raises(SeatingError, match="genius") as err:
        build(cfg)
    assert "oracle" in str(err.value) and "always_wrong" in str(err.value)


def test_training_the_solver_against_a_scripted_proposer(tiny_model_dir, tmp_path):
    """Valid problems every game: the solver seats move, and its learner trains on every solver turn."""
    import json

    from cogym.runners.train.loop import train

    cfg = _cfg(tiny_model_dir, "run.iterations=1", "run.checkpoint_every=0", "learners.solver.algorithm=rloo")
    cfg.seats["proposer"] = "scripted:random"
    summary = train(cfg, run_path=tmp_path / "r", progress=False)
    (row,) = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert row["turns"] == 6.0  # 3 games x 2 solvers; scripted moves are not turns
    assert row["proposer/invalid"] == 0.0
    assert row["solver/response_tokens"] >= 6
    assert "proposer/loss" not in row  # no proposer turns reach its learner
    assert summary["engines"] == ["torch"]


def test_a_grouped_estimator_on_a_one_seat_role_is_rejected(tiny_model_dir):
    # One proposer per game: its GRPO group is its own single return, so it could never learn.
    with pytest.raises(ConfigError, match=r"learners.proposer: grpo .* plays one 'proposer' seat per game") as err:
        build(_cfg(tiny_model_dir, "learners.proposer.algorithm=grpo"))
    assert "reinforce_pp" in str(err.value)
    build(_cfg(tiny_model_dir, "learners.proposer.algorithm=grpo", "learners.proposer.role_algorithms={proposer: reinforce_pp}"))
    with pytest.raises(ConfigError, match="unknown game 'no_such-v0'"):
        build(_cfg(tiny_model_dir, "game.id=no_such-v0"))


def test_a_policy_no_seat_uses_is_not_loaded(tiny_model_dir):
    run = build(_cfg(tiny_model_dir, "seats.proposer=scripted:random"))
    assert set(run.policies) == {"solver"} == set(run.learners)


def test_groups_are_counted_per_policy(tiny_model_dir):
    # Two solvers, each on its own policy: within each policy's batch a GRPO group has one member.
    cfg = _cfg(tiny_model_dir, "seats.solver_1=proposer", "learners.proposer.role_algorithms={proposer: reinforce_pp}")
    cfg.learners["proposer"].role_algorithms["solver"] = "grpo"
    with pytest.raises(ConfigError, match="policy 'proposer' plays one 'solver' seat per game"):
        build(cfg)


def test_a_missing_dependency_inside_a_game_module_keeps_its_own_error(tmp_path):
    from cogym.runners.train.build import import_game_modules

    (tmp_path / "needs_dep.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        import_game_modules([str(tmp_path / "needs_dep.py")])
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_abc'"):
        import_game_modules(["no_such_module_abc"])


def test_an_algorithm_needs_the_outcome_facts_it_reads(tiny_model_dir):
    """SPIN trains on each turn's ``reference``: a game that declares it for the trained role builds;
    one that declares it for no role the policy trains is refused at build time, naming the fact."""
    from pathlib import Path

    spin_ok = _cfg(tiny_model_dir, "learners.solver.algorithm=spin", "seats.proposer=scripted:random")
    assert "reference" in build(spin_ok).games[0].spec.outcomes["solver"]
    kuhn = load_config(Path(__file__).resolve().parents[3] / "cogym" / "configs" / "kuhn_poker.yaml",
                       [f"policies.player.model={tiny_model_dir}", "learners.player.algorithm=spin"])
    with pytest.raises(ConfigError, match=r"spin reads each turn's 'reference'.*kuhn_poker-v0 declares none for role\(s\) first"):
        build(kuhn)
