"""The token-level wrapper: one token id per step, messages end at eos or max_turn_tokens."""

from __future__ import annotations

import numpy as np
import pytest

from cogym.envs import make
from cogym.envs.token_level import PAD, ByteCodec, TokenLevelEnv


def _emit(env: TokenLevelEnv, text: str, eos: bool = True) -> None:
    for t in env.codec.encode(text) + ([env.codec.eos_id] if eos else []):
        env.step(t)


def test_byte_codec_round_trips_text() -> None:
    codec = ByteCodec()
    for text in ["37+45", "", "héllo \u202e", "\x00"]:
        assert codec.decode(codec.encode(text)) == text
    assert codec.decode([72, 256, 105]) == "Hi"  # eos is never text


def test_a_message_is_its_tokens_up_to_eos_and_rewards_wait_for_the_game() -> None:
    env = make("proposer_solver-v0", granularity="token", num_solvers=2)
    env.reset(seed=0)
    assert isinstance(env, TokenLevelEnv)
    assert env.action_space("proposer").n == 257
    obs = env.observe("proposer")
    prompt = env.codec.encode("Propose a problem.")
    assert obs["length"].tolist() == [len(prompt), 0]
    assert obs["observation"][: len(prompt)].tolist() == prompt and (obs["observation"][len(prompt):] == PAD).all()
    for i, t in enumerate(env.codec.encode("3+4")):
        env.step(np.int64(t))  # numpy ints are token ids too
        assert env.agent_selection == "proposer" and env.in_message("proposer")
        assert env.rewards == {"proposer": 0.0, "solver_0": 0.0, "solver_1": 0.0}
        assert env.observe("proposer")["length"].tolist() == [len(prompt) + i + 1, i + 1]
    env.step(env.codec.eos_id)
    assert env.agent_selection == "solver_0" and not env.in_message("proposer")
    assert env.env.observe("solver_0")["text"] == "3+4"
    _emit(env, "7")
    _emit(env, "8")
    assert env.rewards == {"proposer": 0.5, "solver_0": 1.0, "solver_1": 0.0}
    assert all(env.terminations.values())


def test_max_turn_tokens_ends_a_message_without_eos() -> None:
    env = make("proposer_solver-v0", granularity="token", num_solvers=1, max_turn_tokens=3)
    env.reset(seed=0)
    env.step(ord("1"))
    env.step(ord("2"))
    assert env.in_message("proposer")
    env.step(ord("+"))  # the third token ends the message: "12+" is stepped, and it is not a problem
    assert not env.in_message("proposer") and all(env.terminations.values())
    assert env.infos["proposer"]["invalid"] is True and "'12+'" in env.infos["proposer"]["reason"]
    assert env.spec.max_turns == 2 * 3


def test_bad_tokens_are_caller_errors() -> None:
    env = make("proposer_solver-v0", granularity="token", num_solvers=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        env.step(257)
    with pytest.raises(TypeError, match="one token id"):
        env.step("3+4")
    with pytest.raises(TypeError, match="one token id"):
        env.step(True)


def test_token_options_only_apply_at_token_level() -> None:
    with pytest.raises(ValueError, match="only apply to granularity='token'"):
        make("proposer_solver-v0", max_turn_tokens=8)
    with pytest.raises(ValueError, match="granularity must be one of"):
        make("proposer_solver-v0", granularity="char")
    with pytest.raises(ValueError, match="max_turn_tokens must be an int >= 1"):
        make("proposer_solver-v0", granularity="token", max_turn_tokens=0)
    with pytest.raises(TypeError, match="Codec protocol"):
        make("proposer_solver-v0", granularity="token", codec=object())


class _ChatLikeCodec(ByteCodec):
    """A codec whose prompt wraps the text, as a chat template does."""

    def prompt_ids(self, role: str, text: str) -> list[int]:
        return self.encode(f"<{role}>{text}<reply>")

    def max_prompt_tokens(self, role: str, max_chars: int) -> int:
        return 4 * max_chars + len(f"<{role}><reply>")


def test_a_codec_decides_what_a_seat_conditions_on() -> None:
    env = make("proposer_solver-v0", granularity="token", codec=_ChatLikeCodec(), num_solvers=1)
    env.reset(seed=0)
    _emit(env, "2*3")
    obs = env.observe("solver_0")
    n = int(obs["length"][0])
    assert bytes(obs["observation"][:n].tolist()).decode() == "<solver>2*3<reply>"
    env.step(env.codec.encode("6")[0])
    assert env.context_ids("solver_0") == env.codec.encode("<solver>2*3<reply>6")


def test_the_wrapper_draws_nothing_and_replays_the_game_for_a_seed() -> None:
    a, b = make("interruptible_verifier-v0", granularity="token"), make("interruptible_verifier-v0")
    for seed in range(5):
        a.reset(seed=seed)
        b.reset(seed=seed)
        assert a.env.observe("solver_0")["text"] == b.observe("solver_0")["text"]


class _TwoEnds(ByteCodec):
    """Bytes, ending a message on id 256 or on the newline byte: a chat model with two end ids."""

    eos_ids = frozenset({256, 10})

    def decode(self, ids) -> str:
        return super().decode([i for i in ids if i not in self.eos_ids])


def test_every_end_id_of_the_codec_ends_a_message() -> None:
    """An outside driver (plain PettingZoo calls) that steps the codec's other end id ends the message too."""
    env = make("proposer_solver-v0", granularity="token", num_solvers=1, codec=_TwoEnds())
    env.reset(seed=0)
    assert env.end_ids == {256, 10}
    for t in [ord("3"), ord("+"), ord("4"), 10]:
        env.step(t)
    assert not env.in_message("proposer") and env.agent_selection == "solver_0"
    assert env.env.observe("solver_0")["text"] == "3+4"
    for t in [ord("7"), 256]:
        env.step(t)
    assert env.rewards["solver_0"] == 1.0 and all(env.terminations.values())


def test_an_end_id_outside_the_vocabulary_is_refused() -> None:
    class Broken(_TwoEnds):
        eos_ids = frozenset({256, 999})

    with pytest.raises(ValueError, match=r"\[999\] of the codec are outside the vocabulary"):
        make("proposer_solver-v0", granularity="token", codec=Broken())
