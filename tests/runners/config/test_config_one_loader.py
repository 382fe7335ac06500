"""One config loader for every command: the same key, misspelt, gets the same answer everywhere."""

import argparse

import pytest

from cogym.runners.cli import main

TYPO = "sampling.max_new_token=8"
MESSAGE = "unknown config key 'sampling.max_new_token' (did you mean 'max_new_tokens'?)"


def command_with_typo(command: str, *args: str) -> list[str]:
    """argv of ``cogym COMMAND ARGS... sampling.max_new_token=8``: a command that reads its config through
    load_config (or load_tree/build_section) joins the test below with one line in COMMANDS_WITH_A_CONFIG."""
    return [command, *args, TYPO]


COMMANDS_WITH_A_CONFIG = [
    command_with_typo("train"),
    command_with_typo("tournament", "--game", "kuhn_poker-v0", "--players", "scripted:nash", "scripted:random"),
    command_with_typo("eval", "--game", "kuhn_poker-v0"),
]


@pytest.mark.parametrize("argv", COMMANDS_WITH_A_CONFIG, ids=lambda argv: argv[0])
def test_every_command_refuses_a_typo_in_a_shared_key_with_the_same_did_you_mean(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"cogym {argv[0]}: error: {MESSAGE}"


def test_the_shared_sampling_section_is_each_policys_default(tmp_path):
    from cogym.runners.config.load import load_config

    # the shipped config gives both policies {temperature: 1.0, max_new_tokens: 8}; the proposer's now sets only a limit
    cfg = load_config(None, ["sampling.temperature=0.5", "sampling.top_k=5", "policies.proposer.sampling={max_new_tokens: 6}"])
    assert cfg.policies["proposer"].sampling.temperature == 0.5  # the shared default
    assert cfg.policies["solver"].sampling.temperature == 1.0  # a policy's own key wins
    assert (cfg.policies["proposer"].sampling.top_k, cfg.policies["solver"].sampling.top_k) == (5, 5)
    assert cfg.policies["proposer"].sampling.max_new_tokens == 6


def _tournament_config(*argv: str):
    from cogym.runners.cli import tournament as command

    ap = argparse.ArgumentParser()
    command.add_arguments(ap)
    return command.tournament_config(ap.parse_args(list(argv)))


def test_a_tournament_flag_wins_over_its_yaml_and_the_defaults_are_the_schemas(tmp_path):
    config = tmp_path / "t.yaml"
    config.write_text("game: {id: kuhn_poker-v0, modules: [a_module]}\n"
                      "tournament: {players: [scripted:nash, scripted:random], games_per_pairing: 4}\n"
                      "sampling: {temperature: 0.3}\nprompts: {first: {system: Poker.}}\nray: {num_rollout_workers: 3}\n")
    tc = _tournament_config("--config", str(config), "--games-per-pairing", "8", "--module", "b_module",
                            "--system", "second=Cards.", "tournament.seed=5", "--ray")
    t = tc.tournament
    assert (t.games_per_pairing, tc.sampling.temperature, t.batch_games, t.seed) == (8, 0.3, 256, 5)  # 256: the schema's
    assert tc.game.modules == ["a_module", "b_module"]
    assert {role: p.system for role, p in tc.prompts.items()} == {"first": "Poker.", "second": "Cards."}
    assert (t.backend, tc.ray.address, tc.ray.num_rollout_workers) == ("ray", None, 3)
    assert _tournament_config("--config", str(config), "--ray", "auto", "--workers", "4").ray.num_rollout_workers == 4
    assert _tournament_config("--config", str(config)).tournament.backend == "local"


@pytest.mark.parametrize("flat, message", [
    ("max_new_tokens: 4", "max_new_tokens: write sampling.max_new_tokens"), ("game: kuhn_poker-v0", "game: write game.id"),
    ("game_kwargs: {a: 1}", "game_kwargs: write game.kwargs"), ("modules: [m]", "modules: write game.modules"),
    ("players: [tiny]", "players: write tournament.players"),
    ("games_per_pairing: 4", "games_per_pairing: write tournament.games_per_pairing"),
    ("prompts: {first: Poker.}", "prompts.first: write prompts.first.system"),
])
def test_the_old_flat_tournament_keys_name_their_new_place(tmp_path, capsys, flat, message):
    config = tmp_path / "t.yaml"
    config.write_text(flat + "\n")
    assert main(["tournament", "--config", str(config)]) == 2
    assert f"cogym tournament: error: {message} (" in capsys.readouterr().err
