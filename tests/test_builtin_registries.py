"""Which games, algorithms and evaluator kinds exist does not depend on what got imported: each registry,
imported alone in a fresh process, finds every shipped one on its first lookup, and every shipped game,
algorithm and game evaluator module is in its registry's table (a new one cannot be forgotten)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cogym"


def _fresh(code: str) -> dict:
    """Run ``code`` (which prints one JSON object) in a new interpreter: nothing imported before it."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_game_registry_alone_finds_every_shipped_game() -> None:
    found = _fresh("import json, sys\n"
                   "from cogym.envs import registry\n"
                   "before = sorted(m for m in sys.modules if m.startswith('cogym.envs.') and m != 'cogym.envs.registry')\n"
                   "games = list(registry.registered())\n"
                   "print(json.dumps({'games': games, 'before': before,\n"
                   "                  'modules': {i: registry.module_of(i) for i in games},\n"
                   "                  'twins': {i: sorted(registry.scripted_strategies(i)) for i in games}}))")
    game_modules = {f"cogym.envs.{p.stem}" for p in PACKAGE.glob("envs/*.py") if re.search(r"^GAME_ID = ", p.read_text(), re.M)}
    assert len(game_modules) == 8 and not game_modules & set(found["before"])  # imported by the lookup, not before it
    assert set(found["modules"].values()) == game_modules
    configs = {m.group(1) for p in PACKAGE.glob("configs/*.yaml") for m in re.finditer(r"^  id: ([a-z_]+-v\d+)$", p.read_text(), re.M)}
    assert configs and configs <= set(found["games"])  # every shipped config's game
    assert all(found["twins"].values())  # each with the scripted twins of its module


def test_the_algorithm_registry_alone_finds_every_shipped_algorithm() -> None:
    found = _fresh("import json\n"
                   "from cogym.learners import registry\n"
                   "print(json.dumps({n: registry.get(n).__module__ for n in registry.names()}))")
    modules = {f"cogym.learners.algorithms.{p.stem}" for p in PACKAGE.glob("learners/algorithms/*.py") if p.stem != "__init__"}
    assert len(found) == 21 and set(found.values()) == modules
    assert list(found)[:2] == ["grpo", "dr_grpo"]  # the table's order: shipped ones first


def test_the_evaluator_registry_alone_finds_every_shipped_kind() -> None:
    found = _fresh("import json\n"
                   "from cogym.runners.evaluation import evaluators\n"
                   "print(json.dumps({k: c.__module__ for k, c in evaluators.kinds().items()}))")
    game_modules = {f"cogym.envs.{p.stem}" for p in PACKAGE.glob("envs/*_eval.py")}
    assert found.pop("vs_scripted") == "cogym.runners.evaluation.evaluators"
    assert len(game_modules) == 3 and set(found.values()) == game_modules
    declared = {m.group(1) for p in PACKAGE.glob("envs/*.py") for m in re.finditer(r'"kind": "(\w+)"', p.read_text())}
    assert declared and declared <= {*found, "vs_scripted"}  # every kind a shipped game declares

