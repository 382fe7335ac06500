"""The import graph's rules (scripts/import_graph.py): the repository keeps them, and the script sees a break."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_repository_has_no_cycle_no_private_import_no_needless_lazy_import_and_no_long_file(capsys):
    rc = _script().main([])
    out = capsys.readouterr().out
    assert rc == 0, out


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_script_finds_each_kind_of_break(tmp_path, capsys):
    _write(tmp_path, {
        "cogym/core/__init__.py": "",
        "cogym/core/a.py": "def f():\n    from cogym.core.b import g\n    return g\n",   # a cycle through a function
        "cogym/core/b.py": "from cogym.core.a import f\n\ndef g():\n    return f\n",
        "cogym/envs/__init__.py": "",
        "cogym/envs/c.py": "from cogym.core.b import _hidden\n",                     # a private name
        "cogym/envs/d.py": "def h():\n    import json\n    import ray\n    return json, ray\n",  # json: needless; ray: optional
        "cogym/envs/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cogym.envs.c import x\n",
        "cogym/agents/__init__.py": "", "cogym/learners/__init__.py": "", "cogym/runners/__init__.py": "",
        "cogym/agents/long.py": "x = 1\n" * 601,
    })
    module = _script()
    assert module.main(["--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "cogym.core.a <-> cogym.core.b" in out
    assert "cogym/envs/c.py:1: from cogym.core.b import _hidden" in out
    assert "cogym/envs/d.py:2: json  [NOT OPTIONAL]" in out and "cogym/envs/d.py:3: ray  [ray]" in out
    assert "cogym.envs.e" not in out.split("cycles")[1]  # a TYPE_CHECKING import never runs: no edge
    assert "TOO LONG: cogym/agents/long.py 601 lines" in out
    found = module.check(module.build(tmp_path))
    assert [len(found[k]) for k in ("cycles", "private", "lazy_bad", "long")] == [1, 1, 2, 1]  # a.py's import and json
