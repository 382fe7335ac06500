"""The vectorized rollout: scripted playthroughs with the game's rewards, and batched LLM seats."""

from __future__ import annotations

import pytest
import torch

from cogym.agents.llm import LLMAgent
from cogym.core.types import SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.envs import make, scripted_strategies
from cogym.envs.arithmetic import Domain
from cogym.runners.rollout.turns import rollout

GAME = "proposer_solver-v0"
TWINS = scripted_strategies(GAME)
SYSTEM = {"proposer": "Propose.", "solver": "Solve."}


class Counting:
    """Wraps an agent and records the size of every ``act`` batch."""

    def __init__(self, agent):
        self.agent = agent
        self.name = agent.name
        self.batches: list[int] = []
        self.requests: list = []

    def act(self, requests):
        self.batches.append(len(requests))
        self.requests.extend(requests)
        return self.agent.act(requests)


def _games(n: int, **kwargs):
    return [make(GAME, **kwargs) for _ in range(n)]


def _seat_map(by_role: dict, by_seat: dict | None = None):
    by_seat = by_seat or {}

    def seat_map(seat, role):
        agent = by_seat[seat] if seat in by_seat else by_role[role]
        return agent.name, agent
    return seat_map


def _scripted(role: str, twin: str, seed: int = 0) -> ScriptedAgent:
    return ScriptedAgent(TWINS[role][twin], name=f"{role}:{twin}", seed=seed)


# ------------------------------------------------------------------ scripted playthroughs
def test_oracle_solvers_give_proposer_zero_and_solvers_one():
    games = _games(3, num_solvers=4)
    res = rollout(games, _seat_map({"proposer": _scripted("proposer", "random"), "solver": _scripted("solver", "oracle")}),
                  SYSTEM, seeds=[1, 2, 3])
    assert res.turns == []  # scripted moves are not training data
    assert len(res.returns) == 3
    for ret, info in zip(res.returns, res.infos):
        assert set(ret) == {"proposer", "solver_0", "solver_1", "solver_2", "solver_3"}
        assert ret["proposer"] == 0.0  # every solver succeeds: not learnable
        assert all(ret[f"solver_{i}"] == 1.0 for i in range(4))
        assert info["proposer"]["success_rate"] == 1.0 and info["proposer"]["invalid"] is False
        assert all(info[f"solver_{i}"]["correct"] is True for i in range(4))
        assert Domain().parse(info["proposer"]["problem"]) is not None


def test_always_wrong_solvers_give_everyone_zero():
    games = _games(2, num_solvers=3)
    res = rollout(games, _seat_map({"proposer": _scripted("proposer", "random"),
                                    "solver": _scripted("solver", "always_wrong")}), SYSTEM, seeds=[5, 6])
    for ret, info in zip(res.returns, res.infos):
        assert ret == {"proposer": 0.0, "solver_0": 0.0, "solver_1": 0.0, "solver_2": 0.0}
        assert info["proposer"]["success_rate"] == 0.0


@pytest.mark.parametrize("n_right, k, expected", [(1, 4, 0.75), (2, 4, 0.5), (3, 4, 0.25), (1, 2, 0.5)])
def test_mixed_solvers_give_learnability(n_right, k, expected):
    oracle, wrong = _scripted("solver", "oracle"), _scripted("solver", "always_wrong")
    by_seat = {f"solver_{i}": (oracle if i < n_right else wrong) for i in range(k)}
    res = rollout(_games(2, num_solvers=k), _seat_map({"proposer": _scripted("proposer", "random")}, by_seat),
                  SYSTEM, seeds=[0, 1])
    for ret in res.returns:
        assert ret["proposer"] == pytest.approx(expected)
        assert [ret[f"solver_{i}"] for i in range(k)] == [1.0] * n_right + [0.0] * (k - n_right)


def test_band_reward_through_the_rollout():
    oracle, wrong = _scripted("solver", "oracle"), _scripted("solver", "always_wrong")
    by_seat = {"solver_0": oracle, "solver_1": wrong}
    res = rollout(_games(1, num_solvers=2, proposer_reward="band", band=(0.4, 0.6)),
                  _seat_map({"proposer": _scripted("proposer", "random")}, by_seat), SYSTEM, seeds=[0])
    assert res.returns[0] == {"proposer": 1.0, "solver_0": 1.0, "solver_1": 0.0}


def test_garbage_proposer_is_penalised_and_solvers_get_zero():
    solver = Counting(_scripted("solver", "oracle"))
    res = rollout(_games(3, num_solvers=2, invalid_penalty=-0.5),
                  _seat_map({"proposer": _scripted("proposer", "garbage"), "solver": solver}), SYSTEM, seeds=[0, 1, 2])
    assert solver.batches == []  # the game ended before any solver acted
    for ret, info in zip(res.returns, res.infos):
        assert ret["proposer"] == -0.5
        assert ret.get("solver_0", 0.0) == 0.0 and ret.get("solver_1", 0.0) == 0.0
        assert info["proposer"]["invalid"] is True and info["proposer"]["reason"]


def test_scripted_rollout_batches_across_games():
    proposer, solver = Counting(_scripted("proposer", "random")), Counting(_scripted("solver", "oracle"))
    rollout(_games(5, num_solvers=3), _seat_map({"proposer": proposer, "solver": solver}), SYSTEM, seeds=range(5))
    assert proposer.batches == [5]
    assert solver.batches == [15]


def test_requests_carry_the_system_prompt_and_observation():
    proposer, solver = Counting(_scripted("proposer", "random")), Counting(_scripted("solver", "oracle"))
    res = rollout(_games(2, num_solvers=2), _seat_map({"proposer": proposer, "solver": solver}), SYSTEM, seeds=[3, 4])
    for req in proposer.requests:
        assert req.role == "proposer" and req.seat == "proposer"
        assert req.messages == [{"role": "system", "content": "Propose."}, {"role": "user", "content": "Propose a problem."}]
    problems = [info["proposer"]["problem"] for info in res.infos]
    assert [r.messages[1]["content"] for r in solver.requests] == [problems[0]] * 2 + [problems[1]] * 2
    assert all(r.messages[0] == {"role": "system", "content": "Solve."} for r in solver.requests)
    assert [r.seat for r in solver.requests] == ["solver_0", "solver_1"] * 2


def test_the_move_log_keeps_what_each_seat_was_shown():
    """``RolloutResult.moves`` (what transcripts and ``cogym show`` print) holds each move's observation text."""
    res = rollout(_games(2, num_solvers=2), _seat_map({"proposer": _scripted("proposer", "random"),
                                                       "solver": _scripted("solver", "oracle")}), SYSTEM, seeds=[3, 4])
    for g, moves in enumerate(res.moves):
        problem = res.infos[g]["proposer"]["problem"]
        assert [(m["seat"], m["shown"]) for m in moves] == [("proposer", "Propose a problem."), ("solver_0", problem),
                                                            ("solver_1", problem)]


def test_no_system_prompt_means_user_message_only():
    solver = Counting(_scripted("solver", "oracle"))
    rollout(_games(1, num_solvers=1), _seat_map({"proposer": _scripted("proposer", "random"), "solver": solver}),
            {}, seeds=[0])
    assert [m["role"] for m in solver.requests[0].messages] == ["user"]


def test_rollout_is_reproducible_from_seeds():
    def play():
        return rollout(_games(3, num_solvers=2), _seat_map({"proposer": _scripted("proposer", "random"),
                                                            "solver": _scripted("solver", "random")}),
                       SYSTEM, seeds=[10, 11, 12])
    a, b = play(), play()
    assert a.returns == b.returns
    assert [i["proposer"]["problem"] for i in a.infos] == [i["proposer"]["problem"] for i in b.infos]


def test_seed_count_must_match_games():
    with pytest.raises(ValueError, match="one seed per game"):
        rollout(_games(2), _seat_map({}), SYSTEM, seeds=[0])


# ------------------------------------------------------------------ LLM seats
@pytest.fixture
def llm_rollout(policy):
    """4 games x 8 solvers, a scripted proposer and an LLM solver (generate calls counted)."""
    calls: list[int] = []
    inner = policy.generate

    def generate(prompts, sampling, keys=None):
        calls.append(len(prompts))
        return inner(prompts, sampling, keys)

    policy.generate = generate
    solver = Counting(LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0), name="solver"))
    proposer = Counting(_scripted("proposer", "random"))
    games = _games(4, num_solvers=8)
    torch.manual_seed(0)
    res = rollout(games, _seat_map({"proposer": proposer, "solver": solver}), SYSTEM, seeds=[0, 1, 2, 3],
                  episode_prefix="it7")
    return res, policy, solver, proposer, calls


def test_llm_generation_is_batched_across_games(llm_rollout):
    res, _, solver, proposer, calls = llm_rollout
    assert proposer.batches == [4]
    assert solver.batches == [32]
    assert calls == [32]
    assert len(res.turns) == 32
    assert res.generated_tokens == sum(len(t.response_ids) for t in res.turns)
    assert res.generate_seconds > 0 and res.seconds >= res.generate_seconds


def test_llm_turns_are_token_in_token_out(llm_rollout):
    res, policy, *_ = llm_rollout
    seen = set()
    for t in res.turns:
        assert t.role == "solver" and t.policy_id == "solver" and t.seat.startswith("solver_")
        assert t.episode_id == f"it7-{t.game_index}"
        assert t.group_key == (t.episode_id, t.role)
        problem = res.infos[t.game_index][t.seat]["problem"]
        assert t.prompt_ids == policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": problem}])
        assert len(t.logprobs) == len(t.response_ids) >= 1
        assert t.text == policy.decode(t.response_ids)
        seen.add((t.game_index, t.seat))
    assert seen == {(g, f"solver_{i}") for g in range(4) for i in range(8)}
    assert len({t.group_key for t in res.turns}) == 4


def test_llm_turn_rewards_equal_the_game_returns(llm_rollout):
    res, *_ = llm_rollout
    for t in res.turns:
        info = res.infos[t.game_index][t.seat]
        assert t.reward == res.returns[t.game_index][t.seat]
        assert t.reward == (1.0 if info["correct"] else 0.0)
        assert t.info is info
    for g, ret in enumerate(res.returns):
        s = sum(ret[f"solver_{i}"] for i in range(8))
        assert res.infos[g]["proposer"]["success_rate"] == s / 8
        assert ret["proposer"] == pytest.approx(1 - s / 8 if 0 < s < 8 else 0.0)


def test_llm_solver_answers_are_judged_like_the_game():
    # A greedy-free check of the judge: a solver that always writes the oracle answer text via
    # token ids still scores 1 (the action is the decoded text of the ids it generated).
    class EchoOracle:
        name = "echo"

        def act(self, requests):
            from cogym.core.types import Action

            out = []
            for r in requests:
                text = TWINS["solver"]["oracle"](r.messages[-1]["content"], None)
                out.append(Action(text=text, prompt_ids=[1], response_ids=[5, 6], logprobs=[-0.1, -0.2]))
            return out

    res = rollout(_games(2, num_solvers=3), _seat_map({"proposer": _scripted("proposer", "random"), "solver": EchoOracle()}),
                  SYSTEM, seeds=[0, 1])
    assert len(res.turns) == 6
    assert all(t.reward == 1.0 for t in res.turns)
    assert all(ret["proposer"] == 0.0 for ret in res.returns)


def test_llm_proposer_and_solver_in_one_rollout(policy, tiny_model_dir):
    from cogym.agents.policy import Policy

    proposer = Counting(LLMAgent(Policy.from_pretrained(tiny_model_dir, name="proposer"), SamplingParams(max_new_tokens=6),
                                 name="proposer"))
    solver = Counting(_scripted("solver", "oracle"))
    torch.manual_seed(0)
    res = rollout(_games(6, num_solvers=2), _seat_map({"proposer": proposer, "solver": solver}), SYSTEM, seeds=range(6))
    assert proposer.batches == [6]
    assert len(res.turns) == 6 and all(t.role == "proposer" for t in res.turns)
    for t in res.turns:
        assert t.group_key == (f"ep-{t.game_index}", "proposer")
        assert t.reward == res.returns[t.game_index]["proposer"]
        # A random model rarely proposes a valid problem: invalid -> -1, valid with oracle solvers -> 0.
        assert t.reward == (-1.0 if res.infos[t.game_index]["proposer"]["invalid"] else 0.0)


@pytest.mark.parametrize("granularity", ["turn", "token"])
def test_the_move_log_holds_every_seat_s_message_in_order_of_play(policy, granularity):
    """``RolloutResult.moves``: scripted and model moves alike, each with its seat, role, policy and text."""
    from cogym.runners.rollout.tokens import ChatCodec, token_rollout

    llm = LLMAgent(policy, SamplingParams(max_new_tokens=4))
    seat_map = _seat_map({"proposer": _scripted("proposer", "random"), "solver": llm})
    if granularity == "turn":
        res = rollout(_games(2, num_solvers=2), seat_map, SYSTEM, seeds=[5, 6])
    else:
        codec = ChatCodec(policy, SYSTEM)
        games = [make(GAME, num_solvers=2, granularity="token", codec=codec, max_turn_tokens=8) for _ in range(2)]
        res = token_rollout(games, seat_map, SYSTEM, seeds=[5, 6])
    assert len(res.moves) == 2
    for g, moves in enumerate(res.moves):
        assert [m["seat"] for m in moves] == ["proposer", "solver_0", "solver_1"]
        assert [m["role"] for m in moves] == ["proposer", "solver", "solver"]
        # The random twin's proposal, as the game read it (canonical form: spaces and a final '=' dropped).
        assert moves[0]["policy"] == "proposer:random"
        assert moves[0]["text"].replace(" ", "").rstrip("=") == res.infos[g]["proposer"]["problem"]
        model = [t for t in res.turns if t.game_index == g]
        assert [m["text"] for m in moves[1:]] == [t.text for t in model]
        assert all(m["policy"] == llm.name for m in moves[1:])
