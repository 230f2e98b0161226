"""The package tree keeps its shape: imports only go down, layers stay apart, modules stay small.

The rules are those of ``docs/architecture.md`` ("Who may import whom"). The import graph is
read with :mod:`ast` from every ``.py`` of the project's packages, function-level imports
included (a lazy import is still a dependency, and a cycle through one is still a cycle).
``import a.b.c`` depends on ``a.b.c``; ``from a.b import c`` depends on ``a.b.c`` when ``c`` is
a submodule and on ``a.b`` otherwise; a package's ``__init__`` is a module of its own.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hwgen", "fusion", "sim", "bench")
MAX_LINES = 500
#: Modules allowed directly in ``fusion/`` besides its subpackages (``__init__`` not counted).
MAX_FUSION_TOP_MODULES = 5


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _package_of(name: str) -> str:
    """The package a module's relative imports resolve against."""
    return name if modules()[name].name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str) -> set[str]:
    """The project modules that module ``name`` imports, at any depth of its code."""
    tree = ast.parse(modules()[name].read_text(), filename=str(modules()[name]))
    known = modules()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = _package_of(name).split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


@cache
def graph() -> dict[str, frozenset[str]]:
    """The import graph: module -> the project modules it imports."""
    return {name: frozenset(_imports(name)) for name in modules()}


def _cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def _violations(importers: str, forbidden: tuple[str, ...],
                allowed: tuple[str, ...] = ()) -> list[str]:
    """``importer -> imported`` pairs where a module under ``importers`` imports a module
    under one of ``forbidden`` (and not under one of ``allowed``)."""
    def under(name: str, prefixes: tuple[str, ...]) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    return [f"{a} -> {b}" for a, targets in sorted(graph().items()) if under(a, (importers,))
            for b in sorted(targets) if under(b, forbidden) and not under(b, allowed)]


def test_the_walk_sees_function_level_and_relative_imports():
    # The rules below are only as good as the graph: pin what it must see.
    assert "fusion.frontend.onnx_import" in graph()["fusion.frontend"]  # inside __getattr__
    assert "fusion.passes.constant_fold" in graph()["fusion.passes.driver"]  # inside a function


def test_no_import_cycles():
    cycles = _cycles(graph())
    assert not cycles, "import cycles (break each so that imports only go down):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_the_walk_finds_a_cycle():
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}),
             "d": frozenset({"a"})}
    assert _cycles(edges) == [["a", "b", "c"]]


#: The contract between hardware and compiler: the modules directly in ``hwgen/``.
CONTRACT = tuple(sorted(n for n, p in modules().items()
                        if p.parent == ROOT / "hwgen" and n != "hwgen"))


def test_the_contract_imports_nothing_but_the_contract():
    bad = [f"{a} -> {b}" for a in CONTRACT for b in sorted(graph()[a]) if b not in CONTRACT]
    assert not bad, "hwgen's contract modules import only each other:\n" + "\n".join(bad)


@pytest.mark.parametrize("importers, forbidden, allowed", [
    ("hwgen.gateware", ("fusion", "sim", "hwgen.cli"), ()),
    ("fusion.frontend", ("sim",), ()),
    ("fusion.passes", ("sim",), ()),
    ("fusion.cost", ("sim",), ()),
    ("fusion.ir", ("sim", "fusion", "hwgen.gateware"), ("fusion.ir",)),
    ("sim.toolchain", ("fusion",), ()),
    ("sim.build", ("fusion",), ()),
    ("sim.run", ("fusion",), ()),
    ("synth.flow", ("fusion", "sim"), ()),
    ("synth.cache", ("fusion", "sim"), ()),
    ("synth.library", ("sim",), ()),
    ("sim.tb", ("fusion",), ()),
    ("sim.dram", ("fusion", "hwgen.gateware"), ()),
    ("hwgen.board", ("fusion", "hwgen.cli"), ()),
    ("sim.board_sim", ("fusion",), ()),
])
def test_layers(importers, forbidden, allowed):
    bad = _violations(importers, forbidden, allowed)
    assert not bad, f"{importers} must not import {', '.join(forbidden)}:\n" + "\n".join(bad)


#: Harnesses that drive the command line in-process, as a user would (like the tests do).
CLI_DRIVERS = {"bench.bad_inputs", "bench.inspect_speed"}


def test_nothing_imports_the_cli():
    bad = [f"{a} -> {b}" for a, targets in sorted(graph().items())
           if not (a == "hwgen.cli" or a.startswith("hwgen.cli.")) and a not in CLI_DRIVERS
           for b in sorted(targets) if b == "hwgen.cli" or b.startswith("hwgen.cli.")]
    assert not bad, "the CLI is the top: nothing imports it\n" + "\n".join(bad)


def _private_owner(name: str) -> str | None:
    """The package a private module belongs to (the one holding its first ``_`` part)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and part not in ("__init__", "__main__"):
            return ".".join(parts[:i])
    return None


def test_no_private_module_is_used_from_another_package():
    bad = []
    for a, targets in sorted(graph().items()):
        for b in sorted(targets):
            owner = _private_owner(b)
            if owner is not None and not (a == owner or a.startswith(owner + ".")):
                bad.append(f"{a} -> {b}")
    assert not bad, ("a private module (name starting with _) is used only inside its "
                     "package; make it public or move what is shared:\n" + "\n".join(bad))


def test_modules_stay_small():
    big = {n: len(p.read_text().splitlines()) for n, p in modules().items()}
    big = {n: lines for n, lines in big.items() if lines > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them by concept): {big}"


def test_fusion_keeps_its_work_in_subpackages():
    top = sorted(p.name for p in (ROOT / "fusion").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_FUSION_TOP_MODULES, (
        f"{len(top)} modules directly in fusion/ ({', '.join(top)}); at most "
        f"{MAX_FUSION_TOP_MODULES}: put them in the subpackage of their layer")
