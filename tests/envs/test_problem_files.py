"""Bad problem files fail at construction with a one-line message: file, line, what, how to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from cogym.envs import DatasetError, make
from cogym.envs.datasets import MAX_QUESTION_CHARS, load_problems

GOOD = {"question": "2+3", "answer": "5"}


def build(path: str, **kwargs) -> None:
    make("proposer_solver-v0", source="dataset", dataset=path, **kwargs)


def check_message(err: pytest.ExceptionInfo, path: str, *parts: str) -> None:
    message = str(err.value)
    assert "\n" not in message
    assert repr(path) in message
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.jsonl")
    with pytest.raises(DatasetError) as err:
        build(path)
    check_message(err, path, "does not exist", "pass the path of a JSONL file", '{"question": "2+3", "answer": "5"}')


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        build(str(tmp_path))
    check_message(err, str(tmp_path), "is a directory, not a file")


def test_line_that_is_not_json(write_jsonl) -> None:
    path = write_jsonl([GOOD, "", '{"question": "1+1", "answer": 2'])
    with pytest.raises(DatasetError) as err:
        build(path)
    check_message(err, path, "line 3", "not valid JSON", "each line must be one JSON object like")


def test_line_that_is_not_an_object(write_jsonl) -> None:
    path = write_jsonl([GOOD, '["1+1", "2"]'])
    with pytest.raises(DatasetError) as err:
        build(path)
    check_message(err, path, "line 2", "a JSON list, not an object")


@pytest.mark.parametrize("record, missing", [({"question": "1+1"}, "'answer'"), ({"answer": "2"}, "'question'"), ({}, "'question' and 'answer'")])
def test_line_without_question_or_answer(write_jsonl, record: dict, missing: str) -> None:
    path = write_jsonl([GOOD, GOOD, record])
    with pytest.raises(DatasetError) as err:
        build(path)
    check_message(err, path, "line 3", f"missing key {missing}", "needs both 'question' and 'answer'")


def test_answer_that_is_a_number_not_a_string(write_jsonl) -> None:
    path = write_jsonl([{"question": "1+1", "answer": 2}])
    with pytest.raises(DatasetError) as err:
        build(path)
    check_message(err, path, "line 1", "'answer' is a int, not a string", 'e.g. "answer": "2"')


def test_empty_and_overlong_questions(write_jsonl) -> None:
    path = write_jsonl([{"question": "  ", "answer": "2"}], name="empty_q.jsonl")
    with pytest.raises(DatasetError) as err:
        build(path)
    check_message(err, path, "line 1", "'question' is empty")
    path = write_jsonl([GOOD, {"question": "x" * (MAX_QUESTION_CHARS + 1), "answer": "2"}], name="long_q.jsonl")
    with pytest.raises(DatasetError) as err:
        build(path)
    check_message(err, path, "line 2", f"more than the limit {MAX_QUESTION_CHARS}", "shorten it")


def test_non_integer_answer_needs_another_verifier(write_jsonl) -> None:
    path = write_jsonl([GOOD, {"question": "half of 1", "answer": "1/2"}])
    with pytest.raises(DatasetError) as err:
        build(path)  # verifier="exact" by default
    check_message(err, path, "line 2", "'1/2' is not an integer", "verifier='exact'", "use verifier='math_verify'")
    build(path, verifier="majority")  # label-free: the answer is not used, so any string is fine


def test_empty_file(write_jsonl) -> None:
    path = write_jsonl(["", "   "])
    with pytest.raises(DatasetError) as err:
        build(path)
    check_message(err, path, "has no problems", "add one JSON object like")


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"question": "caf\u00e9", "answer": "1"}\n'.encode("latin-1"))
    with pytest.raises(DatasetError) as err:
        build(str(path))
    check_message(err, str(path), "not UTF-8", "save it as UTF-8")


def test_file_that_is_not_utf8_names_the_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "cp1252.jsonl"
    first = '{"question": "2+3", "answer": "5"}\n'
    path.write_bytes(first.encode() + '{"question": "\u201c7*6\u201d", "answer": "42"}\n'.encode("cp1252"))
    with pytest.raises(DatasetError) as err:
        load_problems(path)
    offset = len(first) + len('{"question": "')  # the opening curly quote, 0x93 in Windows-1252
    check_message(err, str(path), f"line 2: not UTF-8 text (byte 0x93 at byte offset {offset}", "save it as UTF-8")


def test_a_bom_and_a_line_separator_inside_a_string_are_not_errors(tmp_path: Path) -> None:
    """A byte-order mark (some editors' "UTF-8") is skipped; U+2028 inside a JSON string (written raw by
    json.dumps(..., ensure_ascii=False)) is text, not a line break that would split the record."""
    path = tmp_path / "bom.jsonl"
    path.write_text('\ufeff{"question": "2+3\u2028", "answer": "5"}\r\n\n{"question": "7*6", "answer": "42"}\n',
                    encoding="utf-8")
    assert [(r.question, r.answer, r.line) for r in load_problems(path)] == [("2+3\u2028", "5", 1), ("7*6", "42", 3)]


def test_dataset_error_is_a_value_error_and_good_files_load(write_jsonl) -> None:
    assert issubclass(DatasetError, ValueError)
    records = load_problems(write_jsonl([GOOD, "", {"question": "7*6", "answer": "42", "extra": 1}]))
    assert [(r.question, r.answer, r.line) for r in records] == [("2+3", "5", 1), ("7*6", "42", 3)]
