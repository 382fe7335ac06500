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
        "cogym/envs/f.py": "from cogym.agents.p import P\n",                          # envs below agents
        "cogym/agents/__init__.py": "", "cogym/learners/__init__.py": "", "cogym/runners/__init__.py": "",
        "cogym/agents/long.py": "x = 1\n" * 601,
        "cogym/agents/p.py": "from cogym.agents.q import Q\n",                         # a typing-only cycle
        "cogym/agents/q.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cogym.agents.p import P\n",
        "cogym/runners/rollout/x.py": "from cogym.runners.train.loop import train\n",  # rollout below train
        "cogym/runners/train/loop.py": "def train():\n    pass\n",
        "cogym/runners/train/backends.py": "def execution_for():\n    from cogym.runners.ray.rollout import R\n    return R\n",
        "cogym/runners/ray/rollout.py": "import ray\n",  # train loads its Ray workers on demand: allowed (UPWARD_OK)
    })
    module = _script()
    assert module.main(["--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    cycles = out.split("cycles")[1].split("imports up the layers")[0]
    assert "cogym.core.a <-> cogym.core.b" in cycles
    assert "cogym.agents.p <-> cogym.agents.q" in cycles
    assert "typing-only edge cogym/agents/q.py:3: cogym.agents.q -> cogym.agents.p" in cycles
    assert "cogym.envs.e" not in cycles  # a typing-only edge outside any cycle is no finding
    assert "cogym/envs/f.py:1: cogym.envs.f -> cogym.agents.p (cogym.envs below cogym.agents)" in out
    assert ("cogym/runners/rollout/x.py:1: cogym.runners.rollout.x -> cogym.runners.train.loop "
            "(cogym.runners.rollout below cogym.runners.train)") in out
    assert "allowed cogym/runners/train/backends.py:2: cogym.runners.train.backends -> cogym.runners.ray.rollout" in out
    assert "cogym/envs/c.py:1: from cogym.core.b import _hidden" in out
    assert "cogym/envs/d.py:2: json  [NOT OPTIONAL]" in out and "cogym/envs/d.py:3: ray  [ray]" in out
    assert "TOO LONG: cogym/agents/long.py 601 lines" in out
    found = module.check(module.build(tmp_path))
    # a.py's import and json are the needless lazy imports; loop.py's loads a module that needs ray
    assert [len(found[k]) for k in ("cycles", "upward", "upward_ok", "private", "lazy_bad", "long")] == [2, 2, 1, 1, 2, 1]
    assert found["typing_only"] == {("cogym.agents.q", "cogym.agents.p"), ("cogym.envs.e", "cogym.envs.c")}


def test_every_module_of_the_repository_is_in_a_declared_layer():
    module = _script()
    graph = module.build()
    # cogym.runners itself is the top layer: a runners module no entry names would land there
    top = module.LAYERS.index("cogym.runners")
    assert [m for m in graph.modules if module.layer(m) == top] == ["cogym.runners"]
