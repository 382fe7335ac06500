"""Token level batched across games: one forward per step for every open message of a policy,
the same Turns as one message at a time, and any agent that speaks the protocol plays."""

from __future__ import annotations

import pytest
import torch

from cogym.agents.llm import LLMAgent
from cogym.core.types import SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.envs import make, scripted_strategies
from cogym.runners.rollout.tokens import ChatCodec, token_rollout
from cogym.runners.tournament.players import Prompted

SYSTEM = {"solver": "Solve.", "proposer": "Propose."}


def _games(policy, n: int, game_id: str = "interruptible_verifier-v0", max_turn_tokens: int = 6, **kwargs) -> list:
    codec = ChatCodec(policy, SYSTEM)
    kwargs = kwargs or {"num_solvers": 3}
    return [make(game_id, granularity="token", codec=codec, max_turn_tokens=max_turn_tokens, **kwargs) for _ in range(n)]


def _play(policy, agent, n: int = 4, seed: int = 0):
    """``n`` games of proposer–solver (a scripted proposer streams the problem, ``agent`` solves twice)."""
    proposer = ScriptedAgent(scripted_strategies("proposer_solver-v0")["proposer"]["random"], name="prop", seed=seed)
    games = _games(policy, n, "proposer_solver-v0", max_turn_tokens=8, num_solvers=2)
    torch.manual_seed(seed)
    return token_rollout(games, lambda s, r: ("prop", proposer) if r == "proposer" else ("p", agent), SYSTEM,
                         seeds=list(range(n)))


class _Spy:
    """Records the input ids shape of every forward of a model."""

    def __init__(self, model) -> None:
        self.shapes: list[tuple[int, int]] = []
        self.handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        self.shapes.append(tuple(kwargs["input_ids"].shape))


class _Delegate:
    """Nothing but the Agent protocol and its token-level capability, forwarded (a remote backend's shape)."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, "delegate"

    def act(self, requests):
        return self.inner.act(requests)

    def begin(self, requests, encode):
        return self.inner.begin(requests, encode)

    def advance(self, handles):
        return self.inner.advance(handles)

    def close(self, handles):
        self.inner.close(handles)


def _summary(res) -> list:
    return [(t.game_index, t.seat, t.prompt_ids, t.response_ids, t.finished, t.reward) for t in res.turns]


def test_batched_and_one_message_at_a_time_play_the_same_games(any_policy) -> None:
    policy = any_policy
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0)
    batched = _play(policy, LLMAgent(policy, sampling, name="p"))
    single = _play(policy, LLMAgent(policy, sampling, name="p", max_batch=1))
    assert _summary(batched) == _summary(single) and batched.returns == single.returns
    for a, b in zip(batched.turns, single.turns):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    # Same messages; the ids read differ only where a batch computes its longest suffix for every row.
    assert batched.stats["prefills"] == single.stats["prefills"]
    assert single.stats["fed_tokens"] <= batched.stats["fed_tokens"]


def test_every_step_is_one_forward_per_phase_and_a_token_reads_one_id(any_policy) -> None:
    policy = any_policy
    proposer = ScriptedAgent(scripted_strategies("proposer_solver-v0")["proposer"]["random"], name="prop", seed=0)
    solver = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0), name="solver")
    games = _games(policy, 6, "proposer_solver-v0", max_turn_tokens=8, num_solvers=2)
    spy = _Spy(policy.model)
    torch.manual_seed(0)
    res = token_rollout(games, lambda s, r: ("prop", proposer) if r == "proposer" else ("solver", solver), SYSTEM,
                        seeds=list(range(6)))
    spy.handle.remove()
    decodes = [b for b, q in spy.shapes if q == 1]
    prefills = [b for b, q in spy.shapes if q > 1]
    assert sum(prefills) == len(res.turns) == 12  # one prefill per message
    # Cache reuse: every further token of a message is one row of one id.
    assert sum(decodes) == sum(len(t.response_ids) - 1 for t in res.turns) > 0
    # Batched across games: the messages open at once share forwards (one message a forward would be
    # one forward per row).
    assert max(decodes) > 1 and len(decodes) < sum(decodes) and len(prefills) < sum(prefills)
    # A message reads its prompt at most once, less where a shared prefix (template, system message,
    # the problem both solvers answer) is already cached.
    assert res.stats["fed_tokens"] < sum(len(t.prompt_ids) + len(t.response_ids) - 1 for t in res.turns)


def test_behaviour_logprobs_equal_a_full_forward_at_the_rollout_temperature(any_policy) -> None:
    policy = any_policy
    res = _play(policy, LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=0.7), name="p"), n=5, seed=2)
    for t in res.turns:
        with torch.no_grad():
            logits = policy.model(torch.tensor([t.prompt_ids + t.response_ids])).logits[0].float() / 0.7
        logp = torch.log_softmax(logits, dim=-1)
        p = len(t.prompt_ids)
        expected = [float(logp[p - 1 + j, tok]) for j, tok in enumerate(t.response_ids)]
        assert t.logprobs == pytest.approx(expected, abs=1e-5)


def test_a_wrapped_agent_plays_at_token_level(policy) -> None:
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0)
    direct = _play(policy, LLMAgent(policy, sampling, name="p"))
    wrapped = _play(policy, _Delegate(LLMAgent(policy, sampling, name="p")))
    assert _summary(wrapped) == _summary(direct)


def test_a_tournament_player_with_its_own_prompts_plays_at_token_level(policy) -> None:
    agent = Prompted(LLMAgent(policy, SamplingParams(max_new_tokens=4, temperature=1.0), name="ckpt"), {"solver": "Add."})
    res = _play(policy, agent, n=2)
    assert res.turns
    for t in res.turns:
        assert t.prompt_ids == policy.render([{"role": "system", "content": "Add."}, {"role": "user", "content": t.info["problem"]}])


def test_games_end_and_agents_hold_nothing_afterwards(policy) -> None:
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0), name="p")
    games = _games(policy, 3, num_solvers=3)
    torch.manual_seed(0)
    res = token_rollout(games, lambda seat, role: ("p", agent), SYSTEM, seeds=[0, 1, 2])
    assert all(not g.agents for g in games) and len(res.turns) == 3 * 3
    assert not agent.streams.open and agent.streams.cache.n == 0 and agent.streams.cache.keys == []
    with pytest.raises(RuntimeError, match="exceeded 2 steps"):  # a failed rollout frees its messages too
        token_rollout(games, lambda seat, role: ("p", agent), SYSTEM, seeds=[0, 1, 2], max_steps=2)
    assert not agent.streams.open and agent.streams.cache.n == 0


def test_scripted_and_model_seats_stream_side_by_side(policy) -> None:
    """A scripted proposer streams its problem token by token while the solvers of other games write."""
    proposer = ScriptedAgent(scripted_strategies("proposer_solver-v0")["proposer"]["random"], name="prop", seed=0)
    solver = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0), name="solver")
    games = _games(policy, 4, "proposer_solver-v0", max_turn_tokens=8, num_solvers=2)
    torch.manual_seed(0)
    res = token_rollout(games, lambda s, r: ("prop", proposer) if r == "proposer" else ("solver", solver), SYSTEM,
                        seeds=[0, 1, 2, 3])
    assert len(res.turns) == 4 * 2 and {t.role for t in res.turns} == {"solver"}
    assert all(res.infos[g]["proposer"]["invalid"] is False for g in range(4))
    assert not proposer.streams.queues


def test_interrupted_answers_end_at_the_offending_token(policy) -> None:
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0), name="p")
    torch.manual_seed(0)
    res = token_rollout(_games(policy, 6, num_solvers=3), lambda s, r: ("p", agent), SYSTEM, seeds=list(range(6)))
    cut = [t for t in res.turns if t.info["interrupted"]]
    assert cut, "a random model should make the verifier cut some answer"
    for t in cut:
        assert not t.finished and t.response_ids[-1] not in policy.eos_ids and len(t.response_ids) <= 6
    assert not agent.streams.open
