"""The generation backend contract (cogym.agents.backends): what every backend must do, checked against
the training model itself. Each test takes a backend made by one of ``FACTORIES``:

* behaviour log-probs equal a teacher-forced forward of the training model over prompt + response;
* greedy responses equal plain ``model.generate`` greedy responses;
* after ``load_weights`` the responses are those of the new weights;
* ``finished`` is set exactly when an end token closed the response, else the response is
  ``max_new_tokens`` long;
* one batch may mix prompts of very different lengths, each answered as if alone.

``hf`` always runs. ``vllm`` runs where vLLM can be imported (on a machine without a GPU,
``scripts/build_vllm_cpu.sh`` builds its CPU backend; run this file with that venv's python) and is
skipped elsewhere, CI included. Log-probs are compared within ``TOLERANCE[backend]``: the HF backend
runs the training model's own forward; vLLM runs its own kernels (its GEMMs, its paged attention) on
the same float32 weights.
"""

from __future__ import annotations

import copy

import pytest
import torch

from cogym.agents.backends import HFBackend
from cogym.agents.backends.vllm import vllm_available
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from tests.model_helpers import full_logp


def _hf(policy):
    return HFBackend(policy)


def _vllm(policy):
    from cogym.agents.backends.vllm import VLLMBackend

    return VLLMBackend(policy, max_num_seqs=64, kv_cache_memory_bytes=256 << 20)


FACTORIES = {"hf": _hf, "vllm": _vllm}
TOLERANCE = {"hf": 1e-4, "vllm": 1e-4}  # absolute, on log-probs (vLLM measured here: 2e-5 at most)
NO_VLLM = "vLLM is not installed (scripts/build_vllm_cpu.sh builds its CPU backend; run with that venv)"


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.skipif(name == "vllm" and not vllm_available(),
                                                                    reason=NO_VLLM))
                        for name in sorted(FACTORIES)])
def backend_name(request) -> str:
    return request.param


@pytest.fixture
def policy(backend_name, tiny_model_dir):
    """The policy under test (this module's, over conftest's): the random test model for HF; the embedded
    tiny model for vLLM, whose CPU attention takes head sizes of 32 and up (the test model's is 8)."""
    return Policy.from_pretrained("tiny" if backend_name == "vllm" else tiny_model_dir)


@pytest.fixture
def backend_of(backend_name):
    """A factory of the backend under test; the backends it made are closed after the test."""
    made = []

    def make(policy):
        made.append(FACTORIES[backend_name](policy))
        return made[-1]

    yield make
    for backend in made:
        close = getattr(backend, "close", None)
        if close is not None:
            close()


def _prompts(policy) -> list[list[int]]:
    questions = ["1+1", "12*3", "Solve 100-1 please, and show the answer only", "7", "45+45", "9*9"]
    return [policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": q}])
            for q in questions]


@torch.no_grad()
def _plain_greedy(model, tokenizer, prompt: list[int], max_new_tokens: int, eos: list[int]) -> list[int]:
    """One prompt alone through ``model.generate`` (no padding, no cogym processors), greedy."""
    out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=eos)
    new = out[0, len(prompt):].tolist()
    for i, t in enumerate(new):
        if t in eos:
            return new[:i + 1]
    return new


def test_behaviour_logprobs_equal_a_teacher_forced_forward(policy, backend_of):
    backend = backend_of(policy)
    sampling = SamplingParams(max_new_tokens=10, temperature=0.7)
    out = backend.generate(_prompts(policy) * 3, sampling, keys=list(range(18)))
    assert len(out) == 18
    for g in out:
        expected = full_logp(policy, g.prompt_ids, g.response_ids, sampling.temperature)
        assert g.logprobs == pytest.approx(expected, abs=TOLERANCE[backend.name])


def test_greedy_responses_equal_plain_hf_greedy(policy, backend_of):
    backend = backend_of(policy)
    sampling = SamplingParams(max_new_tokens=12, temperature=0.0)
    out = backend.generate(_prompts(policy), sampling)
    policy.model.eval()
    for g in out:
        assert g.response_ids == _plain_greedy(policy.model, policy.tokenizer, g.prompt_ids, 12, policy.eos_ids)


def test_after_a_weight_update_responses_are_those_of_the_new_weights(policy, backend_of):
    backend = backend_of(policy)
    sampling = SamplingParams(max_new_tokens=12, temperature=0.0)
    prompts = _prompts(policy)
    before = [g.response_ids for g in backend.generate(prompts, sampling)]
    other = copy.deepcopy(policy.model)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    backend.load_weights({k: v.clone() for k, v in other.state_dict().items()}, version=1)
    after = backend.generate(prompts, sampling)
    assert backend.version == 1 and all(g.version == 1 for g in after)
    other.eval()
    expected = [_plain_greedy(other, policy.tokenizer, p, 12, policy.eos_ids) for p in prompts]
    assert [g.response_ids for g in after] == expected
    assert [g.response_ids for g in after] != before  # the update did change what is generated


def test_finished_means_an_end_token_closed_the_response(policy, backend_of):
    backend = backend_of(policy)
    for limit in (1, 3, 24):
        out = backend.generate(_prompts(policy) * 4, SamplingParams(max_new_tokens=limit, temperature=1.0),
                               keys=list(range(24)))
        for g in out:
            ends = [t in policy.eos_ids for t in g.response_ids]
            if g.finished:
                assert ends[-1] and not any(ends[:-1])
            else:
                assert not any(ends) and len(g.response_ids) == limit
            assert 1 <= len(g.response_ids) <= limit and len(g.logprobs) == len(g.response_ids)
    assert any(g.finished for g in out) and any(not g.finished for g in backend.generate(
        _prompts(policy), SamplingParams(max_new_tokens=1, temperature=1.0), keys=list(range(6))))


def test_a_batch_of_mixed_prompt_lengths_answers_each_as_if_alone(policy, backend_of):
    backend = backend_of(policy)
    sampling = SamplingParams(max_new_tokens=8, temperature=0.0)
    prompts = _prompts(policy) + [list(range(4, 60))]  # 12 to 56 ids
    assert len({len(p) for p in prompts}) >= 5
    together = backend.generate(prompts, sampling)
    alone = [backend.generate([p], sampling)[0] for p in prompts]
    assert [g.response_ids for g in together] == [g.response_ids for g in alone]
    for a, b in zip(together, alone):
        assert a.prompt_ids == b.prompt_ids and a.logprobs == pytest.approx(b.logprobs, abs=TOLERANCE[backend.name])
