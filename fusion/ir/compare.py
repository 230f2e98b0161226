""":func:`first_difference`: where two graphs part, in words (what
:meth:`fusion.ir.graph.Graph.structurally_equal` only answers yes or no to).

A plan read with its model (:mod:`fusion.compiler.plan_reader`) names the first difference
between the graph it holds and the one hwgen derives from the model, so that a user sees
*what* was changed: a node's op or attributes, a tensor's shape or quantization, a constant's
values.
"""

from __future__ import annotations

import numpy as np

from fusion.ir.graph import Graph, Node, Tensor


def first_difference(want: Graph, got: Graph) -> str | None:
    """The first way ``got`` differs from ``want``, or None when they are structurally equal.

    Graph inputs and outputs are compared first, then the nodes in topological order (name,
    op, inputs, outputs, attributes), then every tensor's type, then every constant's dtype,
    shape and values; the graph's name is not compared.

    Parameters
    ----------
    want : Graph
        The reference (a model's graph, derived again).
    got : Graph
        The graph to check (a plan's).

    Returns
    -------
    str or None
        For example ``"initializer 'w1' differs in 1 of 2,048 values, first at [0, 3]: 5
        where 4 is expected"`` (``got`` has 5, ``want`` 4); elsewhere ``got``'s value comes
        first too (``"node 'n' has op relu, not clamp"``).
    """
    for what in ("inputs", "outputs"):
        if getattr(want, what) != getattr(got, what):
            return (f"the graph {what} are {list(getattr(got, what))}, not "
                    f"{list(getattr(want, what))}")
    wanted, found = want.topo_order(), got.topo_order()
    for a, b in zip(wanted, found, strict=False):
        why = _node_difference(a, b)
        if why:
            return why
    if len(wanted) != len(found):
        return f"it has {len(found)} nodes, not {len(wanted)}"
    for name in sorted(set(want.tensors) | set(got.tensors)):
        why = _tensor_difference(name, want.tensors.get(name), got.tensors.get(name))
        if why:
            return why
    for name in sorted(set(want.initializers) | set(got.initializers)):
        why = _constant_difference(name, want.initializers.get(name),
                                   got.initializers.get(name))
        if why:
            return why
    return None


def _node_difference(a: Node, b: Node) -> str | None:
    if a.name != b.name:
        return f"node {b.name!r} ({b.op}) stands where node {a.name!r} ({a.op}) should"
    for field in ("op", "inputs", "outputs", "attrs"):
        if getattr(a, field) != getattr(b, field):
            shown = (dict, dict) if field == "attrs" else (_same, _same)
            return (f"node {b.name!r} has {field} {shown[1](getattr(b, field))}, not "
                    f"{shown[0](getattr(a, field))}")
    return None


def _same(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _tensor_difference(name: str, a: Tensor | None, b: Tensor | None) -> str | None:
    if a is None or b is None:
        return f"tensor {name!r} {'is extra' if a is None else 'is missing'}"
    if (a.shape, a.dtype) != (b.shape, b.dtype):
        return (f"tensor {name!r} is {b.dtype} {list(b.shape)}, not {a.dtype} "
                f"{list(a.shape)}")
    if a.quant != b.quant:
        return f"tensor {name!r} has quantization {b.quant}, not {a.quant}"
    return None


def _constant_difference(name: str, a: np.ndarray | None, b: np.ndarray | None) -> str | None:
    if a is None or b is None:
        return f"initializer {name!r} {'is extra' if a is None else 'is missing'}"
    if (a.dtype, a.shape) != (b.dtype, b.shape):
        return (f"initializer {name!r} is {b.dtype} {list(b.shape)}, not {a.dtype} "
                f"{list(a.shape)}")
    if not a.size:
        return None
    # bytes, not values: NaN equals itself and -0.0 differs from 0.0, as in the signature
    rows = (a.size, -1)
    differs = (np.ascontiguousarray(a).view(np.uint8).reshape(rows)
               != np.ascontiguousarray(b).view(np.uint8).reshape(rows)).any(axis=1)
    where = np.flatnonzero(differs)
    if not where.size:
        return None
    first = int(where[0])
    at = [int(i) for i in np.unravel_index(first, a.shape)]
    return (f"initializer {name!r} differs in {where.size:,} of {a.size:,} values, first at "
            f"{at}: {b.flat[first].item()!r} where {a.flat[first].item()!r} is expected")
