"""Print cogym's module import graph and check its rules.

    python scripts/import_graph.py            # the summary and every violation
    python scripts/import_graph.py --edges    # also every edge, one per line
    python scripts/import_graph.py --json     # the whole graph as JSON

Every import counts, at module level or inside a function, and so does an import under
``if TYPE_CHECKING:`` (a *typing-only* import: it never runs, but a reader and a type checker follow
it as any other). The rules, each reported with file and line:

- **no cycle** between any two cogym modules, typing-only imports included (the typing-only edges
  of a cycle are listed under it);
- **layers**: a module imports only modules of its own layer and of the layers below it, typing-only
  and in-function imports included. The layers are declared once, in ``LAYERS`` (lowest first); an
  upward import listed in ``UPWARD_OK`` is printed with its reason and breaks no rule;
- **no private name** (``_name``) imported from another cogym module;
- **an import inside a function is for an optional heavy dependency only**: a third-party
  package named in ``OPTIONAL``, or a cogym module that needs one at its top level (a typing-only
  import is exempt);
- **no source file over** ``MAX_LINES`` lines (the five largest are printed).

The ``cogym`` command loads the module of the subcommand it runs by name (``importlib``, from the
table in ``cogym/runners/cli/__init__.py``), so that ``cogym --help`` loads no torch; that load is not an
import statement and is not in the graph.

Exit status 1 when a rule is broken, 0 otherwise. ``tests/test_import_graph.py`` runs it.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The folder that installs as the cogym package, and its subpackages.
PACKAGE = "cogym"
PACKAGES = ("core", "envs", "agents", "learners", "runners")
# Optional or heavy dependencies a module may import inside a function, so that importing cogym
# does not pay for them (or need them installed).
OPTIONAL = ("ray", "vllm", "deepspeed", "faiss", "peft", "trl", "matplotlib", "torch.utils.tensorboard",
            "tensorboard", "pyspiel", "open_spiel", "textarena", "reasoning_gym")


# Dependencies that are heavy for one package only: games never import a model, so envs/ loads torch
# and transformers only on demand (the search index's optional HF embedder).
# core/seeding.py seeds torch only when asked (games import it for their own streams).
OPTIONAL_IN = {"cogym.envs": ("torch", "transformers"), "cogym.core.seeding": ("torch",)}
MAX_LINES = 600  # no source file is longer

# The layers, lowest first (docs/architecture.md): a module may import its own layer and the layers
# below it. A module is in the layer of the longest entry that is it or a package above it; inside
# cogym.runners each subpackage (and each shared module) is a layer of its own.
LAYERS = (
    "cogym.core",
    "cogym.envs",
    "cogym.agents",
    "cogym.learners",
    "cogym.runners.rundir",      # the guarded run directory every writer goes through
    "cogym.runners.display",     # tables and plots
    "cogym.runners.rollout",     # the play loop
    "cogym.runners.config",      # the schema names rollout's limits
    "cogym.runners.results",     # what games leave behind: scores, ratings, transcripts
    "cogym.runners.evaluation",  # plays through rollout, scores through results
    "cogym.runners.train",
    "cogym.runners.tournament",
    "cogym.runners.ray",         # Ray workers run train's and tournament's code
    "cogym.runners.research",
    "cogym.runners.cli",
    "cogym.runners",             # the package itself: its lazy exports name the layers below
)
# Upward imports kept on purpose: (importing module, imported layer) -> why.
UPWARD_OK = {
    ("cogym.runners.train.backends", "cogym.runners.ray"):
        "ray is optional: the training backends' factory loads the Ray execution inside a function for run.backend: ray",
    ("cogym.runners.tournament.run", "cogym.runners.ray"):
        "ray is optional: a tournament loads its Ray workers inside a function when ray.enabled",
}


@dataclass
class Import:
    source: str          # importing module
    target: str          # imported module (cogym module, or the third-party top package)
    names: tuple[str, ...]
    line: int
    in_function: bool
    typing_only: bool = False  # under ``if TYPE_CHECKING:``


@dataclass
class Graph:
    root: Path = ROOT
    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)


def module_name(path: Path, root: Path = ROOT) -> str | None:
    rel = path.relative_to(root)
    if rel.parts[0] != PACKAGE or len(rel.parts) < 3 or rel.parts[1] not in PACKAGES:
        return None
    parts = list(rel.parts)
    parts[-1] = parts[-1][:-3]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, in_function: bool, typing_only: bool):
    """Yield (import node, in_function, typing_only); a TYPE_CHECKING block's body is typing-only."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            for sub in child.body:
                yield from _walk_one(sub, in_function, True)
            for sub in child.orelse:
                yield from _walk_one(sub, in_function, typing_only)
            continue
        yield from _walk_one(child, in_function, typing_only)


def _walk_one(node: ast.AST, in_function: bool, typing_only: bool):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, in_function, typing_only
        return
    inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    yield from _walk(node, inner, typing_only)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def build(root: Path = ROOT) -> Graph:
    graph = Graph(root=root)
    files = sorted(p for folder in PACKAGES for p in (root / PACKAGE / folder).rglob("*.py"))
    for path in files:
        name = module_name(path, root)
        if name:
            graph.modules[name] = path
    for name, path in graph.modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node, in_function, typing_only in _walk(tree, False, False):
            def add(target: str, names: tuple[str, ...]) -> None:
                graph.imports.append(Import(name, target, names, node.lineno, in_function, typing_only))

            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name, ())  # third party kept whole, so that `torch.utils.tensorboard` matches
                continue
            base = _resolve(name, is_package, node)
            names = tuple(alias.name for alias in node.names)
            if base in graph.modules or base.startswith("cogym."):
                # `from pkg import submodule` imports the submodule
                plain = [n for n in names if f"{base}.{n}" not in graph.modules]
                for n in names:
                    if f"{base}.{n}" in graph.modules:
                        add(f"{base}.{n}", ())
                if plain or not names:
                    add(base, tuple(plain))
            else:
                add(base, names)
    return graph


def cogym_edges(graph: Graph) -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """Every cogym -> cogym edge, and the edges that only typing-only imports make."""
    edges: dict[str, set[str]] = {m: set() for m in graph.modules}
    runtime: set[tuple[str, str]] = set()
    for imp in graph.imports:
        if imp.target in graph.modules and imp.target != imp.source:
            # importing a.b.c runs a/__init__ and a/b/__init__ too
            parts = imp.target.split(".")
            parents = [".".join(parts[:i]) for i in range(2, len(parts))]
            for target in [imp.target] + [p for p in parents if p in graph.modules and p != imp.source
                                          and not imp.source.startswith(p + ".")]:
                edges[imp.source].add(target)
                if not imp.typing_only:
                    runtime.add((imp.source, target))
    typing_only = {(m, t) for m, targets in edges.items() for t in targets} - runtime
    return edges, typing_only


def layer(module: str) -> int:
    """The index in ``LAYERS`` of the longest entry that is ``module`` or a package above it."""
    best = max((entry for entry in LAYERS if module == entry or module.startswith(entry + ".")), key=len)
    return LAYERS.index(best)


def layering(graph: Graph) -> tuple[list[Import], list[tuple[Import, str]]]:
    """The imports of a module in a higher layer: those that break the rule, and those ``UPWARD_OK`` allows (with why)."""
    bad, allowed = [], []
    for imp in graph.imports:
        if imp.target not in graph.modules or layer(imp.target) <= layer(imp.source):
            continue
        why = UPWARD_OK.get((imp.source, LAYERS[layer(imp.target)]))
        if why:
            allowed.append((imp, why))
        else:
            bad.append(imp)
    return bad, allowed


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _optional(target: str) -> str | None:
    for dep in OPTIONAL:
        if target == dep or target.startswith(dep + "."):
            return dep
    return None


def _optional_in(imp: Import) -> str | None:
    for package, deps in OPTIONAL_IN.items():
        if imp.source == package or imp.source.startswith(package + "."):
            for dep in deps:
                if imp.target == dep or imp.target.startswith(dep + "."):
                    return f"{dep} (optional in {package})"
    return None


def optional_needs(graph: Graph) -> dict[str, str]:
    """cogym module -> the optional dependency it imports at module level (directly or through cogym modules)."""
    direct: dict[str, str] = {}
    top_edges: dict[str, set[str]] = {m: set() for m in graph.modules}
    for imp in graph.imports:
        if imp.in_function or imp.typing_only:
            continue
        dep = _optional(imp.target)
        if dep and imp.source not in direct:
            direct[imp.source] = dep
        if imp.target in graph.modules:
            top_edges[imp.source].add(imp.target)
    needs = dict(direct)
    changed = True
    while changed:
        changed = False
        for m, targets in top_edges.items():
            if m in needs:
                continue
            for t in sorted(targets):
                if t in needs:
                    needs[m] = needs[t]
                    changed = True
                    break
    return needs


def check(graph: Graph) -> dict:
    edges, typing_only = cogym_edges(graph)
    upward, upward_ok = layering(graph)
    needs = optional_needs(graph)
    private = [imp for imp in graph.imports
               if imp.target in graph.modules and imp.target != imp.source
               and any(n.startswith("_") and not n.startswith("__") for n in imp.names)]
    lazy_ok, lazy_bad = [], []
    for imp in graph.imports:
        if not imp.in_function or imp.typing_only:
            continue
        dep = _optional(imp.target) or needs.get(imp.target) or _optional_in(imp)
        (lazy_ok if dep else lazy_bad).append((imp, dep))
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in graph.modules.items()}
    long = sorted(((n, m) for m, n in lines.items() if n > MAX_LINES), reverse=True)
    return {"edges": edges, "typing_only": typing_only, "cycles": cycles(edges), "upward": upward,
            "upward_ok": upward_ok, "private": private, "lazy_ok": lazy_ok, "lazy_bad": lazy_bad,
            "lines": lines, "long": long}


RULES = ("cycles", "upward", "private", "lazy_bad", "long")  # the findings that break a rule


def _where(graph: Graph, imp: Import) -> str:
    return f"{graph.modules[imp.source].relative_to(graph.root)}:{imp.line}"


def _typing_imports(graph: Graph, source: str, target: str) -> list[Import]:
    """The typing-only imports of ``source`` that make its edge to ``target``."""
    return [imp for imp in graph.imports if imp.source == source and imp.typing_only
            and (imp.target == target or imp.target.startswith(target + "."))]


def _upward(imp: Import) -> str:
    return f"{imp.source} -> {imp.target} ({LAYERS[layer(imp.source)]} below {LAYERS[layer(imp.target)]})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", action="store_true", help="print every cogym -> cogym edge")
    parser.add_argument("--json", action="store_true", help="print the graph and the findings as JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to read (default: this one)")
    args = parser.parse_args(argv)
    graph = build(args.root)
    found = check(graph)
    broken = any(found[rule] for rule in RULES)
    if args.json:
        print(json.dumps({
            "modules": sorted(graph.modules),
            "edges": {m: sorted(t) for m, t in sorted(found["edges"].items())},
            "typing_only_edges": sorted(found["typing_only"]),
            "cycles": found["cycles"],
            "layers": list(LAYERS),
            "upward": [{"at": _where(graph, i), "edge": _upward(i)} for i in found["upward"]],
            "upward_allowed": [{"at": _where(graph, i), "edge": _upward(i), "why": why} for i, why in found["upward_ok"]],
            "private": [{"at": _where(graph, i), "from": i.target, "names": list(i.names)} for i in found["private"]],
            "imports_in_functions": [{"at": _where(graph, i), "module": i.target, "for": dep}
                                     for i, dep in found["lazy_ok"] + found["lazy_bad"]],
            "too_long": [{"file": str(graph.modules[m].relative_to(graph.root)), "lines": n} for n, m in found["long"]],
        }, indent=1))
        return 1 if broken else 0
    n_edges = sum(len(t) for t in found["edges"].values())
    in_functions = found["lazy_ok"] + found["lazy_bad"]
    print(f"{len(graph.modules)} modules, {n_edges} cogym->cogym edges ({len(found['typing_only'])} typing-only), "
          f"{len(graph.imports)} imports ({len(in_functions)} inside functions)")
    if args.edges:
        for m, targets in sorted(found["edges"].items()):
            for t in sorted(targets):
                print(f"  {m} -> {t}" + ("  (typing only)" if (m, t) in found["typing_only"] else ""))
    print(f"\ncycles: {len(found['cycles'])}")
    for component in found["cycles"]:
        print("  " + " <-> ".join(component))
        for m, t in sorted(e for e in found["typing_only"] if e[0] in component and e[1] in component):
            for imp in _typing_imports(graph, m, t):
                print(f"    typing-only edge {_where(graph, imp)}: {m} -> {t}")
    print(f"\nimports up the layers: {len(found['upward'])}  (lowest first: "
          f"{' < '.join(entry.removeprefix('cogym.') for entry in LAYERS)})")
    for imp in found["upward"]:
        print(f"  {_where(graph, imp)}: {_upward(imp)}")
    for imp, why in found["upward_ok"]:
        print(f"  allowed {_where(graph, imp)}: {_upward(imp)}: {why}")
    print(f"\nprivate names imported across modules: {len(found['private'])}")
    for imp in found["private"]:
        print(f"  {_where(graph, imp)}: from {imp.target} import {', '.join(imp.names)}")
    print(f"\nimports inside functions: {len(in_functions)} "
          f"({len(found['lazy_ok'])} for an optional dependency, {len(found['lazy_bad'])} not)")
    for imp, dep in sorted(in_functions, key=lambda pair: _where(graph, pair[0])):
        print(f"  {_where(graph, imp)}: {imp.target}  [{dep or 'NOT OPTIONAL'}]")
    largest = sorted(found["lines"].items(), key=lambda kv: -kv[1])[:5]
    print(f"\nlargest files (at most {MAX_LINES} lines): " + ", ".join(
        f"{graph.modules[m].relative_to(graph.root)} {n}" for m, n in largest))
    for n, m in found["long"]:
        print(f"  TOO LONG: {graph.modules[m].relative_to(graph.root)} {n} lines")
    print("\n" + ("rules broken" if broken else
                  "ok: no cycle, no import up the layers, no private import, every lazy import is optional, no long file"))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
