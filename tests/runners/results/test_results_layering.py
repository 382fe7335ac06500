"""cogym.runners.results sits below training, evaluation and tournaments: they import it, it imports
none of them (so what games leave behind has one home that every runner shares)."""

from __future__ import annotations

import ast
from pathlib import Path

RUNNERS = Path(__file__).resolve().parents[3] / "cogym" / "runners"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the module's package
                package = ".".join(path.relative_to(RUNNERS.parent.parent).with_suffix("").parts[:-node.level])
                base = f"{package}.{base}" if base else package
            names |= {base} | {f"{base}.{a.name}" for a in node.names}
    return names


def test_results_imports_neither_training_nor_tournaments() -> None:
    modules = sorted((RUNNERS / "results").glob("*.py"))
    assert len(modules) >= 7
    above = ("cogym.runners.train", "cogym.runners.tournament", "cogym.runners.evaluation")
    bad = {p.name: sorted(n for n in _imports(p) if n.startswith(above)) for p in modules}
    assert not any(bad.values()), bad


def test_training_and_evaluation_take_results_from_results() -> None:
    users = [p for sub in ("train", "evaluation") for p in (RUNNERS / sub).glob("*.py")]
    bad = {p.name: sorted(n for n in _imports(p) if n.startswith("cogym.runners.tournament")) for p in users}
    assert not any(bad.values()), bad
    assert any(n.startswith("cogym.runners.results") for p in users for n in _imports(p))
