"""Helpers for the before/expected pass tests (STYLE section 3)."""

from __future__ import annotations

import difflib
import json

from fusion.ir.graph import Graph


def assert_graphs_equal(got: Graph, expected: Graph) -> None:
    """Structural equality, with a readable diff of the canonical forms when it fails."""
    if got.structurally_equal(expected):
        return
    a = json.dumps(got.canonical(), indent=1, sort_keys=True).splitlines()
    b = json.dumps(expected.canonical(), indent=1, sort_keys=True).splitlines()
    diff = "\n".join(difflib.unified_diff(b, a, "expected", "got", lineterm="", n=2))
    raise AssertionError(f"graphs differ:\n{diff}")


def assert_unchanged(run, graph: Graph) -> None:
    """``run(graph)`` reports no change and returns an equal graph."""
    out, changed = run(graph)
    assert not changed
    assert_graphs_equal(out, graph)
