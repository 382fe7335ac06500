"""The catalog under load (cogym.envs.stress): every openspiel:<game> and textarena:<id> plays seeded
episodes with its random twin and a share of the hostile-move corpus (scripts/stress_catalog.py plays 50
episodes and the whole corpus), and the stress check itself catches a crash, a bad reward and a slow step."""

from __future__ import annotations

import time

import pytest

from cogym.envs.kuhn_poker import KuhnPokerEnv
from cogym.envs.stress import HOSTILE_MOVES, stress_game

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _ids() -> list[str]:
    ids: list[str] = []
    try:
        from cogym.envs.openspiel import catalog

        ids += [f"openspiel:{name}" for name in catalog()]
    except Exception:  # noqa: BLE001 - without the extra these ids are not collected; test_openspiel says why
        pass
    try:
        from cogym.envs.textarena import ALLOWED, _textarena

        _textarena()
        ids += [f"textarena:{name}" for name in ALLOWED]
    except Exception:  # noqa: BLE001
        pass
    return ids


IDS = _ids()
SHARES = 8


@pytest.fixture
def no_network(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise OSError("the network is refused in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.mark.skipif(not IDS, reason="needs the openspiel or textarena extra")
@pytest.mark.parametrize("game", IDS)
def test_every_catalog_game_survives_episodes_and_hostile_moves(game: str, no_network) -> None:
    share = HOSTILE_MOVES[IDS.index(game) % SHARES::SHARES]  # across the catalog every move reaches many games
    report = stress_game(game, episodes=2, hostile=share)
    assert report.hostile_episodes == 2 * len(share) and report.steps >= 2
    assert report.slowest_step_s < 1.0


def test_the_corpus_is_hostile_enough() -> None:
    assert len(HOSTILE_MOVES) >= 60 and len(set(HOSTILE_MOVES)) == len(HOSTILE_MOVES)
    assert max(map(len, HOSTILE_MOVES)) >= 1_000_000 and "" in HOSTILE_MOVES and "9**9**9**9" in HOSTILE_MOVES


def test_a_clean_game_passes_with_figures() -> None:
    report = stress_game("kuhn_poker-v0", episodes=20)
    assert report.episodes == 20 and report.hostile_episodes == 2 * len(HOSTILE_MOVES)
    assert -2.0 <= report.reward_low < 0 < report.reward_high <= 2.0
    assert "kuhn_poker-v0: 20 episodes" in str(report)


def _patched(monkeypatch, fault) -> None:
    real = KuhnPokerEnv.step

    def step(self, action):
        fault(self, action)
        return real(self, action)

    monkeypatch.setattr(KuhnPokerEnv, "step", step)


def test_a_crash_names_the_game_the_move_and_the_exception(monkeypatch) -> None:
    def fault(env, action):
        if action == "9**9**9**9":
            raise RecursionError("too deep")

    _patched(monkeypatch, fault)
    with pytest.raises(AssertionError, match=r"kuhn_poker-v0 hostile '9\*\*9\*\*9\*\*9' at turn 0: player_0's move: "
                                             r"step raised RecursionError: too deep"):
        stress_game("kuhn_poker-v0", episodes=1)


def test_a_slow_step_fails(monkeypatch) -> None:
    _patched(monkeypatch, lambda env, action: time.sleep(0.05) if action == "" else None)
    with pytest.raises(AssertionError, match=r"hostile '' at turn 0: player_0's move: a step took 0\.\d\d s, more than 0\.02 s"):
        stress_game("kuhn_poker-v0", episodes=0, step_limit_s=0.02)


@pytest.mark.parametrize("value, match", [(5.0, "outside spec.reward_range"), (float("nan"), "not a finite real number"),
                                          ("1", "not a finite real number")])
def test_a_bad_reward_fails(monkeypatch, value, match) -> None:
    real = KuhnPokerEnv.step

    def step(self, action):
        real(self, action)
        if self.rewards:
            self.rewards[next(iter(self.rewards))] = value

    monkeypatch.setattr(KuhnPokerEnv, "step", step)
    with pytest.raises(AssertionError, match=f"kuhn_poker-v0 seed 0: reward of player_0 is .*{match}"):
        stress_game("kuhn_poker-v0", episodes=1)


def test_a_twin_every_role_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"have no scripted twin 'nope'"):
        stress_game("kuhn_poker-v0", twin="nope")
