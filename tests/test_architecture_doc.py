"""docs/architecture.md names only modules that exist: every path (``cogym/...``, ``scripts/...``, and the
diagram's short ``train/loop.py``, which are under ``cogym/runners/``), every file the Layout names in a
folder's entry (``sandbox.py`` in ``core/``'s), and every dotted name (``cogym.x.y``, a module or a name
defined at the top of one)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")

TOP = ("cogym", "scripts", "tests", "docs", "benchmarks", "examples")
# a file under at least one folder, or a folder ("core/"); a word after the slash makes no folder ("before/after")
PATH = re.compile(r"(?<![\w./<>-])((?:[\w-]+/)+(?:[\w-]+\.(?:py|md|sh)\b|(?!\w)))")
BARE = re.compile(r"(?<![\w./<>-])(\w+\.py)\b")
DOTTED = re.compile(r"(?<![\w.])(cogym(?:\.\w+)+)")


def _paths() -> list[str]:
    """Files, and folders under a top folder of the repository (a Layout entry's own folders, such as
    ``backends/``, are relative to it)."""
    return sorted({p for p in PATH.findall(DOC) if not p.endswith("/") or p.split("/")[0] in TOP})


def _exists(path: str) -> bool:
    if path.split("/")[0] in TOP:
        return (ROOT / path).exists()
    # the diagram's short paths: runners' subpackages, else a cogym package (core/, envs/, ...)
    return (ROOT / "cogym" / "runners" / path).exists() or (ROOT / "cogym" / path).exists()


def _layout() -> list[tuple[str, str]]:
    """(folder, its entry's text) for each entry of the Layout block."""
    block = DOC.split("## Layout", 1)[1].split("```")[1]
    entries: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line and not line[0].isspace():
            folder, _, text = line.partition(" ")
            entries.append((folder, text))
        elif line.strip() and entries:
            entries[-1] = (entries[-1][0], entries[-1][1] + " " + line)
    return entries


def _defines(module: Path, name: str) -> bool:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and name in {a.asname or a.name for a in node.names}:
            return True
    return False


def _resolves(dotted: str) -> bool:
    """A module or package, or a name defined at the top of one."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            return i == len(parts) or (i == len(parts) - 1 and _defines(module, parts[-1]))
    return False


def test_the_doc_names_paths_and_dotted_names():
    assert len(_paths()) > 40 and len(set(DOTTED.findall(DOC))) > 5  # the patterns still find the doc's names


def test_every_path_the_architecture_doc_names_exists():
    missing = [p for p in _paths() if not _exists(p)]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_file_a_layout_entry_names_is_in_its_folder():
    entries = [(folder, text) for folder, text in _layout() if folder.endswith("/")]
    assert len(entries) > 10
    missing = []
    for folder, text in entries:
        base = next((b for b in (ROOT / folder, ROOT / "cogym" / folder) if b.is_dir()), None)
        if base is None:
            missing.append(folder)
            continue
        missing += [f"{folder}{name}" for name in BARE.findall(text) if not any(base.rglob(name))]
    assert not missing, f"docs/architecture.md's Layout names files its folders lack: {missing}"


def test_every_dotted_name_the_architecture_doc_names_exists():
    missing = sorted({d for d in DOTTED.findall(DOC) if not _resolves(d.rstrip("."))})
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
