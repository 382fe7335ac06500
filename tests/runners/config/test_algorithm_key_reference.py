"""`cogym config` lists each algorithm's own keys under the algorithm's name (issue 52), and docs/config.md
has a table per algorithm: a user reads an algorithm's keys where they read the common ones."""

from __future__ import annotations

import dataclasses

from cogym.learners import registry
from cogym.runners.config.reference import algorithm_reference, algorithms_markdown, format_text, reference


def _sections(text: str) -> dict[str, str]:
    """algorithm name -> the text printed under its heading."""
    parts = text.split("\nalgorithm: ")[1:]
    return {part.split()[0]: part for part in parts}


def test_every_registered_algorithm_has_its_keys_under_its_name() -> None:
    text = format_text(reference("train"), 100, with_algorithms=True)
    sections = _sections(text)
    assert list(sections) == list(registry.names())
    for name in registry.names():
        own = [f.name for f in dataclasses.fields(registry.get(name).Config)]
        for key in own:
            assert f"learners.<id>.{key} " in sections[name], (name, key)
        if not own:
            assert "(no keys of its own)" in sections[name]
    assert "learners.<id>.lam " in sections["ppo"] and "learners.<id>.lam " not in sections["grpo"]
    assert "docs/algorithms.md lists them" not in text


def test_the_tournament_reference_lists_no_algorithm_and_markdown_has_a_table_each() -> None:
    assert "algorithm: " not in format_text(reference("tournament"), 100)
    page = "\n".join(algorithms_markdown())
    for name, about, rows in algorithm_reference():
        assert f"### `algorithm: {name}`" in page and about and "docs/algorithms.md" not in about
        assert all(f"`{key}`" in page for key, *_ in rows)
