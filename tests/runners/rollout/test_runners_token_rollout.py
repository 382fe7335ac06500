"""The token-level rollout: KV caches reused, token-in token-out, interruptions, scripted seats, training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cogym.agents.sampling import sample_token
from cogym.agents.llm import LLMAgent
from cogym.core.types import SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.envs import make, scripted_strategies
from cogym.learners.learner import TokenBatch, response_logp
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError
from cogym.runners.rollout.turns import rollout
from cogym.runners.rollout.tokens import ChatCodec, token_rollout
from cogym.runners.train.loop import train

SYSTEM = {"solver": "Solve.", "proposer": "Propose."}


def _games(policy, game_id: str, n: int, max_turn_tokens: int = 6, **kwargs) -> list:
    codec = ChatCodec(policy, SYSTEM)
    return [make(game_id, granularity="token", codec=codec, max_turn_tokens=max_turn_tokens, **kwargs) for _ in range(n)]


@pytest.fixture
def interrupted_run(policy):
    torch.manual_seed(0)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0), name="p")
    games = _games(policy, "interruptible_verifier-v0", 4, num_solvers=3)
    return games, token_rollout(games, lambda seat, role: ("p", agent), SYSTEM, seeds=[0, 1, 2, 3])


def test_every_message_is_one_turn_with_the_chat_prompt(interrupted_run, policy) -> None:
    games, res = interrupted_run
    assert len(res.turns) == 4 * 3
    for t in res.turns:
        problem = t.info["problem"]
        assert t.prompt_ids == policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": problem}])
        assert 1 <= len(t.response_ids) <= 6 and len(t.logprobs) == len(t.response_ids)
        assert t.text == policy.decode(t.response_ids)
        assert t.reward == res.returns[t.game_index][t.seat]
        assert t.group_key == (t.episode_id, "solver")
        # finished <=> ended with eos; an interrupted message ends at its offending token, without eos.
        assert t.finished == (t.response_ids[-1] in policy.eos_ids)
        if t.info["interrupted"]:
            assert not t.finished and t.info["error_at"] is not None
    assert any(t.info["interrupted"] for t in res.turns), "a random model should make the verifier cut some answer"


def test_the_kv_cache_is_reused_within_a_message(interrupted_run) -> None:
    _, res = interrupted_run
    # One prefill per message, then one id per further token: nothing is read twice (a prompt that
    # starts like one read before in the rollout is read from the shared prefix on, so less).
    assert res.stats["prefills"] == len(res.turns)
    assert sum(len(t.response_ids) for t in res.turns) <= res.stats["fed_tokens"] <= sum(
        len(t.prompt_ids) + len(t.response_ids) - 1 for t in res.turns)
    assert res.generated_tokens == sum(len(t.response_ids) for t in res.turns)


def test_behaviour_logprobs_match_the_learners_teacher_forced_recomputation(interrupted_run, policy) -> None:
    _, res = interrupted_run
    batch = TokenBatch.from_turns(res.turns, pad_id=policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = response_logp(policy.model.eval(), batch, temperature=1.0)
    for i, t in enumerate(res.turns):
        assert logp[i, : len(t.logprobs)].tolist() == pytest.approx(t.logprobs, abs=1e-4)


def test_the_same_torch_seed_replays_the_same_tokens(policy) -> None:
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0), name="p")
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        res = token_rollout(_games(policy, "interruptible_verifier-v0", 2, num_solvers=2), lambda s, r: ("p", agent), SYSTEM, [5, 6])
        runs.append([(t.seat, t.response_ids, t.logprobs) for t in res.turns])
    assert runs[0] == runs[1]


def test_scripted_and_llm_seats_share_a_token_level_game(policy) -> None:
    torch.manual_seed(0)
    llm = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0), name="solver")
    proposer = ScriptedAgent(scripted_strategies("proposer_solver-v0")["proposer"]["random"], name="prop", seed=0)
    games = _games(policy, "proposer_solver-v0", 3, max_turn_tokens=8, num_solvers=2)
    seat_map = lambda seat, role: ("scripted:random", proposer) if role == "proposer" else ("solver", llm)  # noqa: E731
    res = token_rollout(games, seat_map, SYSTEM, seeds=[0, 1, 2])
    assert {t.role for t in res.turns} == {"solver"}  # scripted moves are not training data
    assert len(res.turns) == 3 * 2
    for g in range(len(games)):
        assert res.infos[g]["proposer"]["invalid"] is False  # the random twin's problem arrived whole, token by token
        assert res.infos[g]["solver_0"]["problem"] == next(t.info["problem"] for t in res.turns if t.game_index == g)


def test_token_and_turn_level_agree_for_scripted_play() -> None:
    twins = scripted_strategies("proposer_solver-v0")
    agents = {role: ScriptedAgent(twins[role][name], name=name, seed=3) for role, name in (("proposer", "random"), ("solver", "oracle"))}
    seat_map = lambda seat, role: (role, agents[role])  # noqa: E731
    turn = rollout([make("proposer_solver-v0", num_solvers=2) for _ in range(3)], seat_map, {}, [0, 1, 2])
    for a in agents.values():
        a.rng = np.random.default_rng(3)
    token = token_rollout([make("proposer_solver-v0", granularity="token", num_solvers=2) for _ in range(3)], seat_map, {}, [0, 1, 2])
    assert token.returns == turn.returns


def test_sample_token_filters_but_logprob_is_the_tempered_distribution() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    torch.manual_seed(0)
    draws = {sample_token(logits, SamplingParams(temperature=1.0, top_k=2))[0] for _ in range(200)}
    assert draws == {0, 1}
    draws = {sample_token(logits, SamplingParams(temperature=1.0, top_p=0.5))[0] for _ in range(50)}
    assert draws == {0}
    token, logp = sample_token(logits, SamplingParams(temperature=0.5, top_k=1))
    assert token == 0 and logp == pytest.approx(float(torch.log_softmax(logits / 0.5, -1)[0]))
    assert sample_token(logits, SamplingParams(temperature=0.0)) == (0, pytest.approx(float(torch.log_softmax(logits, -1)[0])))


def _token_config(tmp_path: Path, model: Path, extra: list[str] | None = None):
    return load_config(None, [
        "game.id=interruptible_verifier-v0", "game.granularity=token", "game.num_games=2",
        "game.kwargs={num_solvers: 2, partial_credit: 0.5}", "seats={solver: solver}",
        f"policies={{solver: {{model: {model}, sampling: {{max_new_tokens: 5}}}}}}",
        "learners={solver: {algorithm: grpo, engine: torch, lr: 1.0e-3}}", "prompts={solver: {system: Solve.}}",
        "run.iterations=2", "run.checkpoint_every=0", "run.tensorboard=false", f"run.out_dir={tmp_path}", "eval.declared=false",
        *(extra or [])])


def test_training_at_token_level_updates_the_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = _token_config(tmp_path, tiny_model_dir)
    summary = train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
    assert all(r["turns"] == 4 and r["rollout/prefills"] == 4 for r in rows)
    assert all("solver/interrupted" in r and "solver/grad_norm" in r for r in rows)
    assert summary["iterations"] == 2 and (tmp_path / "run" / "learning_curve.png").is_file()


def test_token_level_config_errors(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="game.granularity must be one of"):
        _token_config(tmp_path, tiny_model_dir, ["game.granularity=char"])
    with pytest.raises(ConfigError, match="max_turn_tokens only applies"):
        _token_config(tmp_path, tiny_model_dir, ["game.granularity=turn", "game.max_turn_tokens=4"])


def test_each_policy_keeps_its_own_max_new_tokens_at_token_level(policy) -> None:
    torch.manual_seed(1)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=2, temperature=1.0), name="p")
    games = _games(policy, "interruptible_verifier-v0", 3, max_turn_tokens=8, num_solvers=3)
    res = token_rollout(games, lambda s, r: ("p", agent), SYSTEM, seeds=[0, 1, 2])
    assert len(res.turns) == 9 and all(1 <= len(t.response_ids) <= 2 for t in res.turns)
    for t in res.turns:
        # The end id the rollout sent at the limit is not part of the response: the model never chose it.
        assert t.finished == (t.response_ids[-1] in policy.eos_ids)
    assert res.stats["fed_tokens"] <= sum(len(t.prompt_ids) + len(t.response_ids) - 1 for t in res.turns)


def test_token_rollout_refuses_agents_it_cannot_drive(policy) -> None:
    class Remote:
        name = "remote"

    with pytest.raises(TypeError, match="TokenStreaming capability"):
        token_rollout(_games(policy, "interruptible_verifier-v0", 1, num_solvers=1), lambda s, r: ("x", Remote()), SYSTEM, [0])
