"""The generation backend seam (agents/backends/): the protocol, the in-process HF backend, weight
versions, and the version every Turn records."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cogym.agents.backends import GenerationBackend, HFBackend
from cogym.agents.policy import Policy
from cogym.core.types import Generation, SamplingParams

DEFAULT = str(Path(__file__).resolve().parents[2] / "cogym" / "configs" / "proposer_solver.yaml")


def test_every_policy_generates_through_its_backend(any_policy):
    assert isinstance(any_policy.backend, HFBackend) and isinstance(any_policy.backend, GenerationBackend)
    prompt = any_policy.render([{"role": "user", "content": "1+1"}])
    torch.manual_seed(0)
    direct = any_policy.backend.generate([prompt], SamplingParams(max_new_tokens=4))
    torch.manual_seed(0)
    via_policy = any_policy.generate([prompt], SamplingParams(max_new_tokens=4))
    assert direct == via_policy and direct[0].version == 0 and any_policy.version == 0


def test_a_policy_takes_another_backend(policy):
    class Echo:
        name, version = "echo", 7

        def generate(self, prompts, sampling, keys=None):
            return [Generation(list(p), [5], [-0.5], "x", True, self.version) for p in prompts]

        def load_weights(self, weights, version):
            self.version = version

    policy.backend = Echo()
    assert isinstance(policy.backend, GenerationBackend)
    out = policy.generate([[1, 2]], SamplingParams())
    assert out[0].response_ids == [5] and out[0].version == 7 and policy.version == 7


def test_hf_backend_loads_a_state_dict_and_its_version(tiny_model_dir):
    target, source = Policy.from_pretrained(tiny_model_dir), Policy.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in source.model.parameters():
            p.add_(0.01)
    target.backend.load_weights(source.model.state_dict(), version=3)
    assert target.version == 3
    assert all(torch.equal(a, b) for a, b in zip(target.model.parameters(), source.model.parameters()))
    prompt = target.render([{"role": "user", "content": "2+2"}])
    greedy = SamplingParams(max_new_tokens=5, temperature=0)
    assert target.generate([prompt], greedy)[0].response_ids == source.generate([prompt], greedy)[0].response_ids
    with pytest.raises(ValueError, match="older"):
        target.backend.load_weights(None, version=2)
    with pytest.raises(KeyError, match="does not have"):
        target.backend.load_weights({"no.such.weight": torch.zeros(1)}, version=4)
    target.backend.load_weights(None, version=3)  # the same version again: the weights in place
    assert target.version == 3


@pytest.mark.slow
@pytest.mark.parametrize("granularity", ["turn", "token"])
def test_turns_record_the_weight_version_that_generated_them(tmp_path, monkeypatch, granularity):
    """Iteration i's turns were sampled by weights of version i (one update a policy an iteration), at
    both granularities (the embedded model: its proposer writes problems the solver can play)."""
    from cogym.learners.learner import Learner
    from cogym.runners.config.load import load_config
    from cogym.runners.train.loop import train

    versions: dict[str, list[set]] = {}
    update = Learner.update

    def spy(self, turns):
        versions.setdefault(self.policy.name, []).append({t.policy_version for t in turns})
        return update(self, turns)

    monkeypatch.setattr(Learner, "update", spy)
    cfg = load_config(DEFAULT, ["run.iterations=3", "run.checkpoint_every=0", "eval.declared=false", "run.plot=false",
                                "run.tensorboard=false", "game.num_games=4", f"game.granularity={granularity}",
                                "learners.solver.engine=torch", "learners.proposer.engine=torch",
                                f"run.out_dir={tmp_path}"])
    train(cfg, progress=False)
    assert versions["solver"] == [{0}, {1}, {2}]
    assert versions["proposer"] == [{0}, {1}, {2}]


@pytest.mark.slow
def test_a_resumed_run_generates_with_the_checkpoints_version(tmp_path, monkeypatch):
    from cogym.learners.learner import Learner
    from cogym.runners.config.load import load_config
    from cogym.runners.train.loop import train

    base = ["run.checkpoint_every=2", "eval.declared=false", "run.plot=false", "run.tensorboard=false",
            "game.num_games=4", "learners.solver.engine=torch", "learners.proposer.engine=torch"]
    run = tmp_path / "run"
    train(load_config(DEFAULT, base + ["run.iterations=2"]), run_path=run, progress=False)
    seen: list[set] = []
    update = Learner.update
    monkeypatch.setattr(Learner, "update", lambda self, turns: seen.append({t.policy_version for t in turns})
                        or update(self, turns))
    train(load_config(run / "config.yaml", ["run.iterations=3"]), run_path=run, resume=True, progress=False)
    assert seen == [{2}, {2}]  # iteration 3: both policies' turns from the checkpoint's weights, version 2


def _group_prompts(policy, problems=("12+5", "7*8", "100-1", "3+3")) -> list[list[int]]:
    return [policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": p}]) for p in problems]


def test_shared_prompts_are_prefilled_once_each(any_policy):
    """Four prompts, eight rows each: the prefill forward sees 4 rows, the sampling steps all 32."""
    from tests.model_helpers import full_logp

    prompts = [p for p in _group_prompts(any_policy) for _ in range(8)]
    seen: list[tuple[int, int]] = []
    base = getattr(any_policy.model, "hf_model", any_policy.model)
    hook = base.register_forward_hook(lambda _m, _a, kw, _o: seen.append(tuple(kw["input_ids"].shape)),
                                      with_kwargs=True)
    try:
        out = any_policy.backend.generate(prompts, SamplingParams(max_new_tokens=5), keys=list(range(32)))
    finally:
        hook.remove()
    assert seen[0][0] == 4 and all(rows == 32 and width == 1 for rows, width in seen[1:])
    for g in out[::7]:  # the behaviour log-probs are those of a full forward over prompt + response
        assert g.logprobs == pytest.approx(full_logp(any_policy, g.prompt_ids, g.response_ids, 1.0), abs=1e-4)


def test_a_prompt_gets_the_same_response_with_or_without_twins_in_its_batch(policy):
    """The prefill of a shared prompt is the prefill of a lone one: a row's draws do not depend on how
    many rows of its batch hold its prompt."""
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    a, b, c, d = _group_prompts(policy)
    lone = policy.backend.generate([a, b, c, d] * 4, sampling, keys=list(range(100, 116)))
    twins = policy.backend.generate([a] * 13 + [b, c, d], sampling, keys=[100] + list(range(200, 212)) + [101, 102, 103])
    assert twins[0] == lone[0] and twins[13:] == lone[1:4]


def test_shared_prefill_can_be_switched_off(policy):
    """``HFBackend(share_prompts=False)``: every row prefilled (the log-probs agree to float rounding)."""
    prompts = [p for p in _group_prompts(policy) for _ in range(4)]
    sampling = SamplingParams(max_new_tokens=6, temperature=0.0)
    shared = HFBackend(policy).generate(prompts, sampling)
    plain = HFBackend(policy, share_prompts=False).generate(prompts, sampling)
    assert [g.response_ids for g in shared] == [g.response_ids for g in plain]
    for s, p in zip(shared, plain):
        assert s.logprobs == pytest.approx(p.logprobs, abs=1e-4)


@pytest.mark.parametrize("length", [5, 14, 30])
def test_a_short_prompt_alone_in_its_batch_draws_as_beside_another(policy, length):
    """One distinct prompt of <= 16 ids prefills fewer than 16 matrix rows, which CPU kernels round
    differently: the prefill then adds a copy, so the draws are those of a batch with two prompts."""
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0)
    p, q = list(range(4, 4 + length)), list(range(40, 40 + length))
    keys = list(range(500, 516))
    alone = policy.backend.generate([p] * 16, sampling, keys=keys)
    mixed = policy.backend.generate([p, q] * 8, sampling, keys=keys)
    assert [g.logprobs for g in alone[::2]] == [g.logprobs for g in mixed[::2]]


def test_a_model_that_generates_with_a_cache_of_its_own_is_prefilled_by_generate(policy):
    """A generation config that names a cache kind (or turns the cache off): no shared prefill."""
    from cogym.agents.backends import shared_prefill

    ids, mask = torch.tensor([[5, 6, 7, 8]] * 2), torch.ones(2, 4, dtype=torch.long)
    assert shared_prefill(policy.model, ids, mask)  # the tiny model: a dynamic cache, shared
    gen = policy.model.generation_config
    for key, value in [("cache_implementation", "static"), ("use_cache", False)]:
        old = getattr(gen, key)
        setattr(gen, key, value)
        try:
            assert shared_prefill(policy.model, ids, mask) == {}
        finally:
            setattr(gen, key, old)
