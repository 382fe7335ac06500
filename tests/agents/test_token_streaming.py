"""Token streaming: the batched KV cache, batched sampling, PolicyStreams and TextStreams, unit by unit."""

from __future__ import annotations

import pytest
import torch

from cogym.agents.batch_kv import BatchKV
from cogym.agents.streaming import SharedPrefixes
from cogym.agents.sampling import sample_token, sample_tokens
from cogym.agents.llm import LLMAgent
from cogym.core.types import SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.core.types import Request, TokenStreaming
from model_helpers import full_logp


def _requests(texts: list[str]) -> list[Request]:
    return [Request(messages=[{"role": "user", "content": t}], role="solver", seat=f"s{i}") for i, t in enumerate(texts)]


def test_rows_joining_and_leaving_keep_every_message_exact(any_policy) -> None:
    """Messages start at different steps and leave in the middle (the last row moves into the hole):
    every log-prob still equals a full forward's, and each token after the first reads one id."""
    policy = any_policy
    torch.manual_seed(0)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=10, temperature=0.7), name="p")
    texts = ["1+1=", "12*3+4=", "7", "100-99=", "5*5="]
    opened = agent.begin(_requests(texts[:3]), encode=lambda t: [])
    emitted: dict = {m.handle: [] for m in opened}
    live = [m.handle for m in opened]
    for step in range(9):
        if step == 2:  # two newcomers join mid-way
            for m in agent.begin(_requests(texts[3:]), encode=lambda t: []):
                opened.append(m)
                emitted[m.handle] = []
                live.append(m.handle)
        tokens = agent.advance(live)
        for h, t in zip(list(live), tokens):
            if t.id is not None:
                emitted[h].append(t)
        if step in (3, 5):  # an early row leaves: a later row fills its place
            agent.close([live.pop(0)])
    agent.close(live)
    assert agent.streams.cache.n == 0 and not agent.streams.open
    for m in opened:
        toks = emitted[m.handle]
        assert toks[0].read == len(m.prompt_ids) and all(t.read == 1 for t in toks[1:])
        ids = [t.id for t in toks]
        assert [t.logprob for t in toks] == pytest.approx(full_logp(policy, m.prompt_ids, ids, 0.7), abs=1e-5)


def test_a_shared_prompt_prefix_is_computed_once_and_changes_nothing(any_policy) -> None:
    policy = any_policy
    torch.manual_seed(1)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=4, temperature=0.9), name="p")
    system = {"role": "system", "content": "You are a careful solver."}

    def ask(*texts: str) -> list:
        return agent.begin([Request(messages=[system, {"role": "user", "content": t}], role="s", seat=t) for t in texts],
                           encode=lambda t: [])

    first = ask("1+2=", "5-5=")  # two prompts: their common prefix is learnt after they are read
    reads = [t.read for t in agent.advance([m.handle for m in first])]  # the cache stays open: the prefix stays valid
    assert reads == [len(m.prompt_ids) for m in first]
    later = ask("31*4=", "7")
    handles = [m.handle for m in first + later]
    steps = [agent.advance(handles) for _ in range(3)]
    for k, m in enumerate(later, start=len(first)):
        toks = [step[k] for step in steps if step[k].id is not None]
        assert 0 < toks[0].read < len(m.prompt_ids)  # only the part after the shared prefix was computed
        ids = [t.id for t in toks]
        assert [t.logprob for t in toks] == pytest.approx(full_logp(policy, m.prompt_ids, ids, 0.9), abs=1e-5)
    second = ask("31*4=")[0]  # read a second time: now its whole prompt but the last id is kept
    handles.append(second.handle)
    agent.advance(handles)
    again = ask("31*4=")[0]  # so a third message only has the last id left, read in the decode forward
    steps = [agent.advance(handles + [again.handle]) for _ in range(3)]
    toks = [step[-1] for step in steps if step[-1].id is not None]
    assert toks[0].read == 1
    assert [t.logprob for t in toks] == pytest.approx(full_logp(policy, again.prompt_ids, [t.id for t in toks], 0.9), abs=1e-5)
    agent.close(handles + [again.handle])
    assert not agent.streams._prefixes.spans  # an empty cache forgets prefixes (the weights may change next)


def test_shared_prefixes_are_learnt_from_consecutive_prompts_and_bounded() -> None:
    spans = SharedPrefixes(min_len=3, capacity=2)
    spans.learn([1, 2, 3, 4, 5], lambda m: f"first {m}")
    assert spans.longest([1, 2, 3, 4, 9]) is None  # one prompt teaches nothing
    spans.learn([1, 2, 3, 4, 9], lambda m: f"span {m}")
    assert spans.longest([1, 2, 3, 4, 7, 7]) == ((1, 2, 3, 4), "span 4")
    assert spans.longest([1, 2, 3, 4]) is None  # a prefix must leave an id to compute
    spans.learn([1, 2, 3, 4, 9], lambda m: f"same {m}")  # the same prompt again: its prefix is kept already
    assert spans.longest([1, 2, 3, 4, 9, 0]) == ((1, 2, 3, 4), "span 4")
    spans.learn([1, 2, 3, 4, 5], lambda m: f"repeat {m}")  # read before (two prompts ago): all but its last id
    assert spans.longest([1, 2, 3, 4, 5]) == ((1, 2, 3, 4), "span 4")  # that is the kept (1, 2, 3, 4) already
    spans.learn([6, 6, 6, 6, 6, 6], lambda m: "z")
    spans.learn([1, 2, 3, 4, 9], lambda m: f"nine {m}")
    assert spans.longest([1, 2, 3, 4, 9]) == ((1, 2, 3, 4), "span 4")
    spans.learn([8, 8, 8, 8], lambda m: "x")
    spans.learn([8, 8, 8, 5], lambda m: f"eights {m}")
    spans.learn([7, 7, 7, 7], lambda m: "y")
    spans.learn([7, 7, 7, 1], lambda m: f"sevens {m}")  # over capacity: the oldest goes
    assert len(spans.spans) == 2 and spans.longest([1, 2, 3, 4, 5]) is None
    assert spans.longest([8, 8, 8, 1]) == ((8, 8, 8), "eights 3") and spans.longest([7, 7, 7, 2]) == ((7, 7, 7), "sevens 3")


def test_greedy_streaming_writes_what_greedy_generate_writes(any_policy) -> None:
    policy = any_policy
    sampling = SamplingParams(max_new_tokens=7, temperature=0.0)
    agent = LLMAgent(policy, sampling, name="p")
    requests = _requests(["1+2=", "33*3=", "9-4=", "0"])
    turn = agent.act(requests)
    handles = [m.handle for m in agent.begin(requests, encode=lambda t: [])]
    streamed: list[list[int]] = [[] for _ in handles]
    open_ = list(range(len(handles)))
    while open_:
        tokens = agent.advance([handles[i] for i in open_])
        for i, t in zip(list(open_), tokens):
            if t.id is not None:
                streamed[i].append(t.id)
            if t.end:
                agent.close([handles[i]])
                open_.remove(i)
    assert streamed == [a.response_ids for a in turn]


def test_one_row_per_forward_writes_the_same_tokens(any_policy) -> None:
    """``max_batch=1`` (one message per forward) and batched draw the same tokens from one seed."""
    policy = any_policy
    runs = []
    for cap in (0, 1):
        torch.manual_seed(3)
        agent = LLMAgent(policy, SamplingParams(max_new_tokens=5, temperature=1.0), name="p", max_batch=cap)
        handles = [m.handle for m in agent.begin(_requests(["1+1=", "22+2=", "3"]), encode=lambda t: [])]
        runs.append([[t.id for t in agent.advance(handles)] for _ in range(5)])
    assert runs[0] == runs[1]


def test_the_length_limit_ends_a_message_with_no_token(any_policy) -> None:
    policy = any_policy
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=2, temperature=1.0), name="p")
    (m,) = agent.begin(_requests(["1+1="]), encode=lambda t: [])
    agent.streams.eos = frozenset()  # never stop on its own: the limit must end it
    first, second, third = (agent.advance([m.handle])[0] for _ in range(3))
    assert first.id is not None and second.id is not None
    assert third.id is None and third.end and third.logprob is None


def test_batch_kv_growth_keeps_what_it_holds() -> None:
    kv = BatchKV("cpu", rows=1, slots=2)
    r0 = kv.add_rows(1, 2)
    kv.prepare_prefill(r0, r0 + 1, [2], torch.float32)
    key = torch.arange(8, dtype=torch.float32).reshape(1, 2, 2, 2)  # (b, H, q, D)
    kv.update(key, -key, 0)
    kv.add_rows(2, 3)  # rows and slots both grow
    kv.prepare_prefill(1, 3, [3, 1], torch.float32)
    assert kv.rows_cap >= 3 and kv.slots_cap >= 3
    assert torch.equal(kv.keys[0][0, :, :2], key[0]) and torch.equal(kv.values[0][0, :, :2], -key[0])
    assert kv.remove_row(0) == 2 and kv.n == 2  # the last row moves into row 0
    assert kv.length == [3, 3] and kv.start == [2, 0]


def test_decode_mask_hides_slots_outside_each_rows_span() -> None:
    kv = BatchKV("cpu")
    kv.add_rows(2, 4)
    mask, positions = kv.prepare_prefill(0, 2, [4, 2], torch.float32)
    assert positions.tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]
    assert torch.isfinite(mask).any(-1).all()  # no query row is fully masked (no NaN)
    mask, positions = kv.prepare_decode(0, 2, torch.float32)
    assert positions.tolist() == [[4], [2]]
    visible = (mask[:, 0, 0] == 0).tolist()
    assert visible == [[True] * 5, [False, False, True, True, True]]


def test_sample_tokens_filters_each_row() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [-1.0, 0.0, 1.0, 2.0]])
    torch.manual_seed(0)
    seen = [set(), set()]
    for _ in range(100):
        ids, logp = sample_tokens(logits, SamplingParams(temperature=1.0, top_k=2))
        seen[0].add(int(ids[0]))
        seen[1].add(int(ids[1]))
    assert seen == [{0, 1}, {2, 3}]
    ids, logp = sample_tokens(logits, SamplingParams(temperature=0.5, top_p=0.3))
    assert ids.tolist() == [0, 3]
    assert logp.tolist() == pytest.approx(torch.log_softmax(logits / 0.5, -1)[[0, 1], [0, 3]].tolist())
    assert sample_token(logits[1], SamplingParams(temperature=0.0))[0] == 3


def test_scripted_agents_stream_their_whole_answer() -> None:
    agent = ScriptedAgent(lambda text, rng: text.upper(), name="echo")
    assert isinstance(agent, TokenStreaming)
    (m,) = agent.begin(_requests(["ab"]), encode=lambda t: [ord(c) for c in t])
    assert m.prompt_ids is None
    steps = [agent.advance([m.handle])[0] for _ in range(3)]
    assert [t.id for t in steps] == [ord("A"), ord("B"), None] and steps[-1].end
    assert all(t.logprob is None for t in steps)
    agent.close([m.handle])
    assert not agent.streams.queues
