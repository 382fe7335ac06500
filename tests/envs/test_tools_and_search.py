"""The tool protocol (envs/tools.py: call syntax, bounded parser, Toolbox budgets and permissions, time
and size bounds) and the faiss search tool (envs/search.py: n-gram embedder, index kinds, the disk
cache, hostile queries)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from cogym.envs.errors import DatasetError
from cogym.envs.tools import MAX_ARGS_CHARS, MAX_CALLS, Toolbox, ToolCall, call_syntax, parse_calls, run_tool

pytest.importorskip("faiss", reason="the search tool needs faiss-cpu")
from cogym.envs.search import (HFEmbedder, NgramEmbedder, SearchIndex, SearchTool, make_index,  # noqa: E402
                               read_corpus, synthetic_corpus, write_corpus)


# ------------------------------------------------------------------------------------------ parser
def test_calls_are_read_in_order_with_their_arguments() -> None:
    msg = f"Let me look. {call_syntax('search', ' capital of Zorvania ')} then <tool name='calc'>1+2</tool> done"
    assert parse_calls(msg) == [ToolCall("search", "capital of Zorvania"), ToolCall("calc", "1+2")]
    assert parse_calls("no calls here, just <b>html</b>") == []
    assert parse_calls('use <tools> then <tool name="search">x</tool>') == [ToolCall("search", "x")]


@pytest.mark.parametrize(("message", "error"), [
    ('<tool name="search"></tool>', "empty argument"),
    ("<tool>x</tool>", "names no tool"),
    ('<tool name=search>x</tool>', "names no tool"),
    ('<tool name="search">x', "no closing </tool>"),
    ('<tool name="search"', "not closed with '>'"),
    ('<tool name="search"><tool name="search">x</tool></tool>', "a call inside a call"),
    ('<tool name="search">' + "q" * (MAX_ARGS_CHARS + 1) + "</tool>", "more than 1000"),
])
def test_malformed_calls_become_errors(message: str, error: str) -> None:
    calls = parse_calls(message)
    assert calls and error in calls[0].error


def test_the_parser_reads_a_bounded_part_of_a_huge_message() -> None:
    many = call_syntax("search", "x") * 100
    assert len(parse_calls(many)) == MAX_CALLS
    # A call beyond the first 20,000 characters is not read, however long the message.
    assert parse_calls("a" * 5_000_000 + call_syntax("search", "x")) == []
    assert parse_calls("<tool" * 1_000_000)[0].error  # an unclosed tag, reported once


# ------------------------------------------------------------------------------------------ toolbox
class Echo:
    name, description, timeout_s, max_output_chars = "echo", "echo(text)", 1.0, 20

    def call(self, args: str) -> str:
        if args == "boom":
            raise RuntimeError("exploded")
        if args == "hang":
            time.sleep(1.0)
        return args * 10


def test_the_toolbox_enforces_roles_budget_and_the_tool_bounds() -> None:
    box = Toolbox({"echo": Echo()}, {"solver": ["echo"]}, budget=2)
    out = box.handle("solver_0", "solver", call_syntax("echo", "ab") + call_syntax("echo", "boom")
                     + call_syntax("echo", "third"))
    assert [r.ok for r in out] == [True, False, False]
    assert out[0].text == "ab" * 10  # 20 characters: within the bound
    assert "failed: RuntimeError: exploded" in out[1].text and "no tool calls left" in out[2].text
    assert box.left("solver_0") == 0 and box.left("solver_1") == 2
    assert "no tool 'echo' for proposer (tools: none)" in box.handle("p", "proposer", call_syntax("echo", "x"))[0].text
    assert "no tool 'search'" in box.handle("solver_1", "solver", call_syntax("search", "x"))[0].text
    box.reset()
    assert box.left("solver_0") == 2
    long = run_tool(Echo(), "abc")
    assert long == ("abc" * 6 + "ab [...]", True)  # cut to 20 characters
    slow = Echo()
    slow.timeout_s = 0.05
    assert run_tool(slow, "hang") == ("error: echo did not answer within 0.05 s", False)
    with pytest.raises(ValueError, match="not tools here"):
        Toolbox({"echo": Echo()}, {"solver": ["search"]})


# ------------------------------------------------------------------------------------------ search
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(synthetic_corpus(3000, seed=3), tmp_path_factory.mktemp("corpus") / "facts.jsonl")


def test_ngram_vectors_are_unit_length_and_a_text_embeds_alone_as_in_a_batch() -> None:
    e = NgramEmbedder(dim=64)
    texts = ["The capital of Velorixo is Toush.", "", "ünïcödé ✓ text", "x" * 10_000]
    e.fit(texts)
    batch = e.embed(texts)
    assert np.allclose(np.linalg.norm(batch[[0, 2, 3]], axis=1), 1.0, atol=1e-5)
    assert np.allclose(batch[1], 0.0)  # an empty text (only padding: no 3-gram) is the zero vector
    for i, t in enumerate(texts):  # no n-gram crosses from one text into the next
        assert np.allclose(e.embed([t])[0], batch[i], atol=1e-6)


def test_every_question_finds_its_document(corpus: Path) -> None:
    docs = read_corpus(corpus)
    index = SearchIndex.build(docs)  # 3000 documents: exact
    hits = index.search([d["question"] for d in docs[:300]], k=5)
    assert np.mean([h[0].doc["id"] == d["id"] for h, d in zip(hits, docs)]) >= 0.99
    assert type(index.index).__name__ == "IndexFlatIP"


def test_approximate_indexes_keep_most_of_the_exact_top_5(corpus: Path) -> None:
    docs = read_corpus(corpus)
    e = NgramEmbedder()
    texts = [d["text"] for d in docs]
    e.fit(texts)
    vecs = e.embed(texts)
    queries = e.embed([d["question"] for d in docs[:200]])
    _, exact = make_index(vecs, "flat").search(queries, 5)
    _, approx = make_index(vecs, "hnsw").search(queries, 5)
    recall = np.mean([len(set(a) & set(x)) / 5 for a, x in zip(approx, exact)])
    assert recall >= 0.95
    with pytest.raises(ValueError, match="index kind must be one of flat, hnsw, ivf"):
        make_index(vecs, "lsh")


def test_the_index_is_cached_beside_the_corpus_and_rebuilt_when_it_changes(tmp_path: Path) -> None:
    path = write_corpus(synthetic_corpus(500, seed=4), tmp_path / "c.jsonl")
    first = SearchIndex.open(path)
    again = SearchIndex.open(path)
    assert not first.cached and again.cached and (tmp_path / "c.jsonl.index" / "index.faiss").is_file()
    q = ["Who founded " + read_corpus(path)[1]["title"] + "?"]
    assert [h.doc["id"] for h in again.search(q)[0]] == [h.doc["id"] for h in first.search(q)[0]]
    assert again.search(q)[0][0].doc["id"] == "d1"
    write_corpus(synthetic_corpus(400, seed=5), path)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    rebuilt = SearchIndex.open(path)
    assert not rebuilt.cached and len(rebuilt.docs) == 400
    assert not SearchIndex.open(path, kind="hnsw").cached  # other settings: another index


def test_hostile_queries_through_the_tool_never_crash(corpus: Path) -> None:
    tool = SearchTool(SearchIndex.build(read_corpus(corpus)), k=3)
    box = Toolbox({"search": tool}, {"solver": ["search"]}, budget=100)
    hostile = ["a" * 1000, "\u202e\u0000\x1b[2J" * 50, "🙂" * 300, "<script>alert(1)</script>", "   ",
               "%s%n%x" * 40, "' OR 1=1 --", "\n\n\n", "Zorvania" * 120, "ⅣⅥ Ꭰ ᚠ 𝕏"]
    for query in hostile:
        [result] = box.handle("solver_0", "solver", call_syntax("search", query))
        assert len(result.text) <= tool.max_output_chars + 6
        assert result.ok or result.text.startswith("error:")
    assert "the call of 'search' has an empty argument" in box.handle("solver_0", "solver", call_syntax("search", " "))[0].text
    assert run_tool(tool, " \t ") == ("error: search failed: ValueError: an empty query", False)
    out = tool.call(read_corpus(corpus)[5]["question"])
    assert out.splitlines()[0].startswith("[d5] ") and len(out.splitlines()) == 3


def test_a_bad_corpus_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "text": "ok"}) + "\n{not json\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: not JSON"):
        read_corpus(bad)
    bad.write_text(json.dumps({"id": 1}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: a document needs an 'id' and a string 'text'"):
        read_corpus(bad)
    with pytest.raises(DatasetError, match="does not exist"):
        read_corpus(tmp_path / "none.jsonl")


def test_a_corpus_that_is_not_utf8_is_a_dataset_error_naming_the_line(tmp_path: Path) -> None:
    """Every other malformed corpus is a DatasetError naming the file and line; so is one in another
    encoding (a Latin-1 export), not a bare UnicodeDecodeError from deep inside the file read."""
    bad = tmp_path / "latin1.jsonl"
    good = json.dumps({"id": 1, "text": "ok"}) + "\n"
    bad.write_bytes((good + "\n" + json.dumps({"id": 2, "text": "caf\u00e9"}, ensure_ascii=False) + "\n").encode("latin-1"))
    offset = len(good) + 1 + len('{"id": 2, "text": "caf')
    with pytest.raises(DatasetError) as err:
        read_corpus(bad)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{bad}:3: not UTF-8 text")
    assert f"byte 0xe9 at byte offset {offset}" in message and "save it as UTF-8" in message
    with pytest.raises(DatasetError, match="latin1.jsonl:3: not UTF-8"):  # the game that opens it says the same
        SearchIndex.open(bad)


def test_a_corpus_keeps_its_line_numbers_and_may_start_with_a_bom(tmp_path: Path) -> None:
    """A UTF-8 file with a byte-order mark (some editors' "UTF-8") loads; a line separator inside a
    JSON string (U+2028, written raw by ensure_ascii=False) neither splits a document nor shifts the
    line numbers of the errors after it."""
    path = tmp_path / "bom.jsonl"
    docs = [{"id": 1, "text": "one\u2028two"}, {"id": 2, "text": "three"}]
    path.write_text("\ufeff" + "".join(json.dumps(d, ensure_ascii=False) + "\r\n" for d in docs), encoding="utf-8")
    assert read_corpus(path) == docs
    path.write_text(json.dumps(docs[0], ensure_ascii=False) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bom.jsonl:2: not JSON"):
        read_corpus(path)


def test_an_hf_model_directory_can_embed(tiny_model_dir: Path, corpus: Path) -> None:
    docs = read_corpus(corpus)[:50]
    e = HFEmbedder(tiny_model_dir, max_tokens=64)
    vecs = e.embed([d["text"] for d in docs[:4]])
    assert vecs.shape == (4, e.dim) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    index = SearchIndex.build(docs, embedder=e)
    assert index.search([docs[7]["text"]], k=1)[0][0].doc["id"] == docs[7]["id"]  # a text finds itself
