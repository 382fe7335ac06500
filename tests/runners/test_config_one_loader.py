"""One config loader for every command: the same key, misspelt, gets the same answer everywhere."""

import pytest

from cogym.runners.cli import main

TYPO = "sampling.max_new_token=8"
MESSAGE = "unknown config key 'sampling.max_new_token' (did you mean 'max_new_tokens'?)"


@pytest.mark.parametrize("argv", [
    ["train", TYPO],
    ["tournament", "--game", "kuhn_poker-v0", "--players", "scripted:nash", "scripted:random", TYPO],
    ["eval", "--game", "kuhn_poker-v0", TYPO],
])
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


def test_a_tournament_flag_wins_over_its_yaml_and_the_old_flat_keys_name_the_new_ones(tmp_path, capsys):
    import argparse

    from cogym.runners.cli import tournament as command

    config = tmp_path / "t.yaml"
    config.write_text("game: kuhn_poker-v0\nplayers: [scripted:nash, scripted:random]\nsampling: {temperature: 0.3}\n"
                      "games_per_pairing: 4\n")
    ap = argparse.ArgumentParser()
    command.add_arguments(ap)
    tc = command.tournament_config(ap.parse_args(["--config", str(config), "--games-per-pairing", "8"]))
    assert (tc.games_per_pairing, tc.sampling.temperature, tc.batch_games) == (8, 0.3, 256)  # 256: the schema's default
    config.write_text("game: kuhn_poker-v0\nmax_new_tokens: 4\n")
    assert main(["tournament", "--config", str(config)]) == 2
    assert "max_new_tokens: write sampling.max_new_tokens" in capsys.readouterr().err
