"""docs/algorithms.md stays an index of what ships: its table names every registered algorithm and
policy loss with the section that describes it, and its contents line links only to headings there."""

from __future__ import annotations

import re
from pathlib import Path

from cogym.learners import policy_losses, registry

PAGE = Path(__file__).resolve().parents[1] / "docs" / "algorithms.md"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_table_names_every_algorithm_and_policy_loss_with_a_section_that_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    table = [line for line in text.splitlines() if line.startswith("| `")]
    named = {name for line in table for name in re.findall(r"`(\w+)`", line.split("|")[1])}
    assert set(registry.names()) <= named, set(registry.names()) - named
    assert set(policy_losses.names()) <= named, set(policy_losses.names()) - named
    sections = {m.group(1) for m in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.M)}
    for line in table:
        for ref in re.findall(r"§(\d+(?:\.\d+)?)", line.split("|")[2]):
            assert ref in sections, (ref, line)


def test_the_contents_links_reach_headings() -> None:
    text = PAGE.read_text(encoding="utf-8")
    contents = text[text.index("Contents:"):text.index("\n\n", text.index("Contents:"))]
    anchors = {_anchor(h) for h in re.findall(r"^#{2,3} (.+)$", text, re.M)}
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    assert len(links) >= 19 and not [a for a in links if a not in anchors]
