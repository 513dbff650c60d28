"""The folders are the pipeline: no folder imports one later in it, and there are no import cycles.

Reads every module of the package with ``ast`` (imports inside functions included: a lazy
import is still a dependency) and checks them against the order in docs/architecture.md.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import loadgen

ROOT = Path(loadgen.__file__).parent

# Pipeline order (docs/architecture.md). A module may import its own folder and earlier ranks.
RANK = {
    "": 0,  # the top level: hand-off types (request, record, histograms), errors, the package's face
    "timing": 0,  # arrival processes and traces: planned send times, pure (the simulator's truth reads them)
    "engines": 0,  # one module per serving engine, tables and pure functions: the simulator writes their series
    "workloads": 1,
    "client": 2,
    "sim": 3,  # the embedded simulator: reads the tokens rule and the wire protocols, nothing of the run
    "metrics": 4,
    "stage": 5,
    "serverview": 5,  # the server's /metrics over a window: reads nothing of the client; run and locust use it
    "run": 6,
    "analysis": 7,
    "report": 8,
    "settings": 9,
    "bench": 10,
    "cli": 11,
    "locust": 11,
}
TOP_LEVEL = {"__init__", "errors", "request", "record", "histograms", "redact"}
# The package's entry point (`python -m loadgen`).
FACE = {"__main__"}


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["loadgen", *parts])] = path
    return out


def folder(module: str) -> str:
    parts = module.split(".")[1:]
    return parts[0] if len(parts) > 1 or (parts and (ROOT / parts[0]).is_dir()) else ""


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            # the longest known module the name starts with
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports(m, p, known) for m, p in mods.items()}


def test_top_level_holds_only_hand_off_types_errors_and_the_face():
    top = {p.stem for p in ROOT.glob("*.py")}
    assert top - TOP_LEVEL - FACE == set()


def test_every_folder_has_a_rank_and_a_docstring():
    for d in sorted(p for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        assert d.name in RANK, f"{d.name}/ has no place in the pipeline order"
        doc = ast.get_docstring(ast.parse((d / "__init__.py").read_text()))
        assert doc and len(doc) > 40, f"{d.name}/__init__.py needs a docstring saying what enters and leaves"


def test_no_folder_imports_a_later_one():
    bad = []
    for mod, deps in graph().items():
        if mod.split(".")[-1] in FACE:
            continue
        me = RANK[folder(mod)]
        for dep in deps:
            if RANK[folder(dep)] > me:
                bad.append(f"{mod} -> {dep}")
    assert bad == []


def test_no_import_cycles_between_folders_or_modules():
    g = graph()
    # folders: an edge between two folders both ways is a cycle
    edges = defaultdict(set)
    for mod, deps in g.items():
        for dep in deps:
            a, b = folder(mod), folder(dep)
            if a != b and mod.split(".")[-1] not in FACE:
                edges[a].add(b)
    assert [(a, b) for a in edges for b in edges[a] if a in edges.get(b, ())] == []
    # modules: depth-first search for a back edge; a package's __init__ re-exporting its
    # modules is not a cycle with them
    def deps(m):
        return {d for d in g[m] if not m.startswith(d + ".")}

    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for d in deps(m):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d] if d in stack else [m, d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in g:
        if m not in state:
            visit(m, [m])
    assert cycles == []


ENGINE_NAMES = {"vllm", "llama.cpp", "llamacpp"}
"""SGLang's name is also the wire protocol's ("sglang": its native /generate, client/protocols), so it is not
listed; every other engine's name is its module's alone."""


def test_engine_names_live_in_their_engine_modules():
    """Adding an engine is one module in engines/: no other code spells an engine's name (docstrings and
    comments may cite what an engine does)."""
    found = []
    for name, path in modules().items():
        if name.startswith("loadgen.engines"):
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        found += [f"{name}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                  and n.value.lower() in ENGINE_NAMES]
    assert not found, found
