"""Constant folding: a node whose inputs are all initializers becomes an initializer.

The value is computed by the reference executor (:mod:`fusion.reference.executor`), so a folded
graph
computes exactly what the unfolded one did. Repeated by the driver, whole initializer-only
subgraphs fold (a weight ``Transpose`` after a ``Reshape``, a ``QuantizeLinear`` of float
weights).

What it refuses:

* ``DequantizeLinear``/``dequantize`` of a constant: folding would turn int8 weights back into
  float ones and destroy the pattern Q/DQ folding (:mod:`fusion.passes.qdq_fold`) needs;
* results larger than :data:`MAX_ELEMENTS`, which would bloat the graph (an ``im2col`` of a
  constant image, say) for little gain.
"""

from __future__ import annotations

import math

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, reads_constants
from fusion.reference import executor

#: Ops never folded (see the module docstring).
KEEP = frozenset({"DequantizeLinear", "dequantize"})
#: The largest result folded, in elements.
MAX_ELEMENTS = 1 << 22


def foldable(graph: Graph, node: Node) -> bool:
    """True when :func:`run` would fold ``node``."""
    if node.op in KEEP or not reads_constants(graph, node):
        return False
    return all(math.prod(graph.tensors[o].shape) <= MAX_ELEMENTS for o in node.outputs)


def evaluate(graph: Graph, node: Node) -> dict[str, object]:
    """The values of ``node``'s outputs, its inputs all initializers, by the reference
    executor (output name -> array)."""
    names = [i for i in node.inputs if i]
    mini = Graph([node], {n: graph.tensors[n] for n in (*names, *node.outputs)}, (),
                 node.outputs, {n: graph.initializers[n] for n in names}, f"fold {node.name}")
    return executor.run(mini, {})


def run(graph: Graph) -> tuple[Graph, bool]:
    """Fold every node whose inputs are all initializers (see the module docstring).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
        Folded outputs are initializers with the same names, dtypes and quantization.
    changed : bool
    """
    edit = Edit(graph)
    folded = []
    view = graph
    # One sweep in topological order folds chains too: a folded output is an initializer of
    # the view the next node is checked against.
    for node in graph.topo_order():
        if not foldable(view, node):
            continue
        for name, value in evaluate(view, node).items():
            edit.initializers[name] = value
        edit.drop(node)
        folded.append(node.name)
        view = _view(edit, graph)
    if not folded:
        return graph, False
    return edit.apply(), True


def _view(edit: Edit, graph: Graph) -> Graph:
    """The graph with the folds so far: folded outputs are initializers, their nodes gone."""
    dropped = set(edit.dropped)
    return Graph([n for n in graph.nodes if n.name not in dropped], edit.tensors, graph.inputs,
                 graph.outputs, edit.initializers, graph.name)
