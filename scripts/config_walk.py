"""How far the whole ``Config`` travels from ``cogym train``: a static walk of the source (ast).

    python scripts/config_walk.py                     # this tree
    python scripts/config_walk.py --root /tmp/before  # another checkout (also the layout before the
                                                      # package move: core/, envs/, ... at its top)
    python scripts/config_walk.py --list              # also every stay and every call the walk follows

The walk starts in ``cogym.runners.cli.train.run``, where the locals named ``cfg`` or ``config`` hold
the Config, and follows every call that passes the whole Config to a cogym function:

- an argument **passes the whole Config** when it is a name that holds it in the calling function
  (the parameter it arrived in), or an attribute named ``cfg`` or ``config`` (``run.cfg``,
  ``self.cfg``) given to a parameter annotated ``Config``. ``cfg.run`` (a section) passes none;
- the callee is resolved through the calling module's imports (re-exports followed), its own
  functions and classes, ``self.method`` and ``module.function``; a class receives it in its
  ``__init__``, or in the dataclass field of that name. A call on a parameter annotated with a cogym
  class (``execution: Execution`` then ``execution.refresh(run)``) reaches that class's method and
  every override of it in the class's subclasses (``InProcess``, ``RayExecution``): each is followed. A
  call on any other object (``obj.method``) cannot be resolved statically: it is counted as
  **unresolved** and listed with ``--list``.

The measures, each over the functions the walk reaches:

- **stays**: the functions (and classes) that receive the whole Config;
- **rooms**: the distinct modules the stays are in;
- **calls**: the distinct call sites that pass the whole Config from one stay to another;
- **climbs back up**: those calls, between two modules, that go to a module of a higher layer than the
  caller's (the layers of ``scripts/import_graph.py``) or back into a module the walk had already
  left on its way to the caller (its first path from the start);
- **entries into build**: those calls from outside ``cogym/runners/train/build.py`` into it.

Lower is better on every measure: a helper that needs one or two sections should be given them.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "envs", "agents", "learners", "runners")
START = ("cogym.runners.cli.train", "run")
BUILD = "cogym.runners.train.build"
NAMES = ("cfg", "config")  # the start's locals, and the attributes, that hold the Config


def _layer():
    """import_graph.py's layer function (the layers are declared there, once)."""
    spec = importlib.util.spec_from_file_location("import_graph", Path(__file__).with_name("import_graph.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("import_graph", module)  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module.layer


@dataclass
class Function:
    module: str
    qualname: str  # "f", "Class.method", or "Class" (a dataclass: its fields are the parameters)
    node: ast.AST
    params: list[str]  # positional order, ``self`` left out of a method's
    config_params: set[str] = field(default_factory=set)  # annotated Config

    @property
    def key(self) -> str:
        return f"{self.module}:{self.qualname}"


@dataclass
class Module:
    name: str
    path: Path
    functions: dict[str, Function] = field(default_factory=dict)  # qualname -> Function
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target


def _annotated_config(annotation: ast.AST | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation).strip("\"'")
    return text == "Config" or text.endswith(".Config") or text.startswith("Config |")


def _function(module: str, qualname: str, node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> Function:
    args = node.args.posonlyargs + node.args.args
    if method and args and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list):
        args = args[1:]
    every = args + node.args.kwonlyargs
    return Function(module, qualname, node, [a.arg for a in args] + [a.arg for a in node.args.kwonlyargs],
                    {a.arg for a in every if _annotated_config(a.annotation)})


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in node.decorator_list)


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def load(root: Path) -> dict[str, Module]:
    """Every cogym module under ``root``: ``root/cogym/<package>`` or, before the package move,
    ``root/<package>`` (each folder the package ``cogym.<package>``)."""
    base = root / "cogym" if (root / "cogym" / "runners").is_dir() else root
    modules: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            parts = ["cogym", *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = Module(".".join(parts), path)
    for module in modules.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
        is_package = module.path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _resolve_from(module.name, is_package, node)
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = f"{target}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:  # `import a.b` binds a; `import a.b as x` binds x to a.b
                    if alias.asname:
                        module.imports[alias.asname] = alias.name
                    else:
                        module.imports[alias.name.split(".")[0]] = alias.name.split(".")[0]
        for node in tree.body:
            _collect(module, node, "")
    return modules


def _collect(module: Module, node: ast.AST, prefix: str) -> None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        qualname = prefix + node.name
        module.functions[qualname] = _function(module.name, qualname, node, method=bool(prefix))
    elif isinstance(node, ast.ClassDef):
        qualname = prefix + node.name
        if _is_dataclass(node):
            fields = [s for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
            module.functions[qualname] = Function(module.name, qualname, node, [f.target.id for f in fields],
                                                  {f.target.id for f in fields if _annotated_config(f.annotation)})
        for child in node.body:
            _collect(module, child, qualname + ".")


class Resolver:
    """Finds the cogym function, method or class a name or a call means."""

    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules
        # class name -> (module, qualname) of each class with that name, and its direct bases' names
        self.classes: dict[str, list[tuple[str, str]]] = {}
        self.bases: dict[tuple[str, str], list[str]] = {}
        for module in modules.values():
            tree = ast.parse(module.path.read_text(encoding="utf-8"))
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, []).append((module.name, node.name))
                    self.bases[(module.name, node.name)] = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]

    def overrides(self, module: Module, fn: Function, call: ast.Call) -> list[Function]:
        """For ``param.method(...)`` where ``fn``'s parameter is annotated with a cogym class: that class's
        ``method`` and every override of it in the class's subclasses (empty when not such a call)."""
        f = call.func
        node = fn.node
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
            return []
        args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        annotation = next((a.annotation for a in args if a.arg == f.value.id and a.annotation is not None), None)
        if annotation is None:
            return []
        name = ast.unparse(annotation).strip("\"'").split(" | ")[0].rsplit(".", 1)[-1]
        family, grown = {name}, True
        while grown:  # the class and its subclasses, by name, across the package
            subclasses = {cls for (_, cls), bases in self.bases.items() if family & set(bases)}
            grown = not subclasses <= family
            family |= subclasses
        out = []
        for cls in sorted(family):
            for mod, qual in self.classes.get(cls, []):
                method = self.modules[mod].functions.get(f"{qual}.{f.attr}")
                if method is not None:
                    out.append(method)
        return out

    def find(self, dotted: str, seen: frozenset = frozenset()) -> Function | None:
        """The function, method or class a dotted name (module.name, module.Class.method) means,
        following re-exports; None when it is no cogym definition."""
        parts = dotted.split(".")
        for i in range(len(parts) - 1, 0, -1):
            module, qualname = ".".join(parts[:i]), ".".join(parts[i:])
            if module not in self.modules:
                continue
            found = self.modules[module]
            for name in (qualname, f"{qualname}.__init__"):
                if name in found.functions:
                    return found.functions[name]
            first, _, rest = qualname.partition(".")
            if first in found.imports and dotted not in seen:
                return self.find(".".join(filter(None, (found.imports[first], rest))), seen | {dotted})
            return None
        return None

    def callee(self, module: Module, fn: Function, call: ast.Call, local: dict[str, Function]) -> Function | None | str:
        """The Function a call reaches, None outside cogym, or "unresolved"."""
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in local:
                return local[f.id]
            for name in (f.id, f"{f.id}.__init__"):
                if name in module.functions:
                    return module.functions[name]
            if f.id in module.imports:
                return self.find(module.imports[f.id])
            return None  # a builtin
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            owner = f.value.id
            if owner == "self" and "." in fn.qualname:
                cls = fn.qualname.rsplit(".", 1)[0]
                return module.functions.get(f"{cls}.{f.attr}", "unresolved")
            if owner in module.imports:  # module.function or Class.method of another module
                return self.find(f"{module.imports[owner]}.{f.attr}")
            if f"{owner}.{f.attr}" in module.functions:  # Class.method of this module
                return module.functions[f"{owner}.{f.attr}"]
        return "unresolved"


@dataclass
class Call:
    caller: Function
    callee: Function | None  # None: unresolved
    line: int
    text: str


CONFIG, CARRIER = "the Config", "a carrier"


def _returns(fn: Function) -> str:
    returns = getattr(fn.node, "returns", None)
    return ast.unparse(returns).strip("\"'") if returns is not None else ""


class Walk:
    """The walk's state: what holds the Config in each function reached, and the carrier classes."""

    def __init__(self, modules: dict[str, Module]) -> None:
        self.resolver = Resolver(modules)
        self.carriers: set[str] = set()  # names of the classes that receive the whole Config

    def kinds(self, fn: Function, received: dict[str, str]) -> dict[str, str]:
        """name -> CONFIG or CARRIER in ``fn``: the parameters that received them, parameters annotated
        with a carrier class, and locals assigned a new carrier (``run = build(cfg)`` where build
        returns a Run, ``run = Run(...)``) or the Config out of one (``cfg = run.cfg``)."""
        kinds = dict(received)
        node = fn.node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                if a.annotation is not None and ast.unparse(a.annotation).strip("\"'") in self.carriers:
                    kinds.setdefault(a.arg, CARRIER)
        module = self.resolver.modules[fn.module]
        for stmt in ast.walk(node):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            name, value = stmt.targets[0].id, stmt.value
            if isinstance(value, ast.Call):
                target = self.resolver.callee(module, fn, value, {})
                if isinstance(target, Function) and (target.qualname.removesuffix(".__init__") in self.carriers
                                                     or _returns(target) in self.carriers):
                    kinds.setdefault(name, CARRIER)
            elif self.config_of(value, kinds, False):
                kinds.setdefault(name, CONFIG)
        return kinds

    def config_of(self, arg: ast.AST, kinds: dict[str, str], param_is_config: bool, returns=None) -> str | None:
        """What an argument passes: CONFIG, CARRIER or None. A section (``cfg.run``) passes none; a call
        passes a carrier when ``returns`` (the callee's return annotation) names a carrier class."""
        if isinstance(arg, ast.Starred):
            arg = arg.value
        if isinstance(arg, ast.Name):
            return kinds.get(arg.id)
        if isinstance(arg, ast.Call) and returns is not None:
            return CARRIER if returns(arg) in self.carriers else None
        if isinstance(arg, ast.Attribute) and arg.attr in NAMES:
            owner = arg.value
            if param_is_config or (isinstance(owner, ast.Name) and (owner.id == "self" or kinds.get(owner.id) == CARRIER)):
                return CONFIG
        return None

    def calls(self, fn: Function, kinds: dict[str, str]):
        """(call, callee or "unresolved", the parameter that receives it, CONFIG or CARRIER) for each
        call in ``fn`` that passes the whole Config, bare or in a carrier."""
        module = self.resolver.modules[fn.module]
        body = fn.node
        local = {n.name: _function(fn.module, f"{fn.qualname}.<locals>.{n.name}", n, method=False)
                 for n in ast.walk(body) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not body}

        def returns(call: ast.Call) -> str:
            target = self.resolver.callee(module, fn, call, local)
            return _returns(target) if isinstance(target, Function) else ""

        for call in (n for n in ast.walk(body) if isinstance(n, ast.Call)):
            target = self.resolver.callee(module, fn, call, local)
            if target is None:
                continue
            targets = (self.resolver.overrides(module, fn, call) or [target]) if target == "unresolved" else [target]
            for target in targets:
                params = target.params if isinstance(target, Function) else []
                configs = target.config_params if isinstance(target, Function) else set()
                passed = [(params[i] if i < len(params) else "?", arg) for i, arg in enumerate(call.args)]
                passed += [(kw.arg, kw.value) for kw in call.keywords if kw.arg]
                for param, arg in passed:
                    kind = self.config_of(arg, kinds, param in configs, returns)
                    if kind:
                        yield call, target, param, kind


def walk(modules: dict[str, Module]) -> dict:
    """Walk until the carrier classes stop growing (a class found late makes its instances carriers)."""
    state = Walk(modules)
    while True:
        found = _walk_once(state)
        carriers = {f.qualname.removesuffix(".__init__") for f in found["stays"].values()
                    if isinstance(f.node, ast.ClassDef) or f.qualname.endswith(".__init__")}
        if carriers <= state.carriers:
            return found
        state.carriers |= carriers


def _walk_once(state: Walk) -> dict:
    modules = state.resolver.modules
    start = modules[START[0]].functions[START[1]]
    received: dict[str, dict[str, str]] = {start.key: {n: CONFIG for n in NAMES}}
    path: dict[str, list[str]] = {start.key: [start.module]}  # the modules on the first path to a function
    stays: dict[str, Function] = {start.key: start}
    calls: list[Call] = []
    unresolved: list[Call] = []
    queue = deque([start])
    while queue:
        fn = queue.popleft()
        for call, target, param, kind in state.calls(fn, state.kinds(fn, received[fn.key])):
            text = ast.unparse(call.func)
            if not isinstance(target, Function):
                unresolved.append(Call(fn, None, call.lineno, text))
                continue
            calls.append(Call(fn, target, call.lineno, text))
            if target.key not in stays:
                stays[target.key] = target
                trail = path[fn.key]
                path[target.key] = trail + ([target.module] if target.module != trail[-1] else [])
            known = received.setdefault(target.key, {})
            if param != "?" and param not in known:
                known[param] = kind
                queue.append(target)
    return {"stays": stays, "calls": _distinct(calls), "unresolved": _distinct(unresolved), "path": path}


def _distinct(calls: list[Call]) -> list[Call]:
    seen, out = set(), []
    for c in calls:
        key = (c.caller.key, c.callee.key if c.callee else c.text, c.line)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def measure(found: dict) -> dict:
    layer = _layer()
    climbs = []
    for c in found["calls"]:
        a, b = c.caller.module, c.callee.module
        if a == b:
            continue
        left = found["path"][c.caller.key][:-1]  # the modules the walk was in before the caller's
        if layer(b) > layer(a) or b in left:
            climbs.append(c)
    entries = [c for c in found["calls"] if c.callee.module == BUILD and c.caller.module != BUILD]
    return {"stays": len(found["stays"]), "rooms": len({f.module for f in found["stays"].values()}),
            "calls": len(found["calls"]), "climbs back up": len(climbs), "entries into build": len(entries),
            "unresolved": len(found["unresolved"]), "_climbs": climbs, "_entries": entries}


def _where(modules: dict[str, Module], root: Path, c: Call) -> str:
    path = modules[c.caller.module].path
    return f"{path.relative_to(root) if path.is_relative_to(root) else path}:{c.line}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this one)")
    parser.add_argument("--list", action="store_true", help="also every stay, call and unresolved call")
    args = parser.parse_args(argv)
    modules = load(args.root)
    found = walk(modules)
    m = measure(found)
    print(f"the whole Config from {START[0]}.{START[1]} ({args.root}):")
    for key in ("stays", "rooms", "calls", "climbs back up", "entries into build", "unresolved"):
        print(f"  {key:<20} {m[key]}")
    for c in m["_climbs"]:
        print(f"  climb  {_where(modules, args.root, c)}: {c.caller.key} -> {c.callee.key}")
    for c in m["_entries"]:
        print(f"  entry  {_where(modules, args.root, c)}: {c.caller.key} -> {c.callee.key}")
    if args.list:
        print("stays:")
        for key in sorted(found["stays"]):
            print(f"  {key}")
        print("calls:")
        for c in found["calls"]:
            print(f"  {_where(modules, args.root, c)}: {c.caller.key} -> {c.callee.key}")
        print("unresolved:")
        for c in found["unresolved"]:
            print(f"  {_where(modules, args.root, c)}: {c.caller.key} calls {c.text}(...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
