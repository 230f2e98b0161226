"""Dead-code elimination: drop nodes and initializers no graph output depends on.

Graph inputs stay, even when nothing reads them: they are the graph's interface. A node with
several outputs stays if any one of them is used.
"""

from __future__ import annotations

from fusion.ir.graph import Graph


def run(graph: Graph) -> tuple[Graph, bool]:
    """Remove the nodes and initializers that no graph output depends on.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
        The pruned graph (``graph`` itself when nothing was dead).
    changed : bool
    """
    live = set(graph.outputs)
    keep = set()
    for node in reversed(graph.topo_order()):
        if any(out in live for out in node.outputs):
            keep.add(node.name)
            live.update(name for name in node.inputs if name)
    nodes = tuple(n for n in graph.nodes if n.name in keep)
    initializers = {k: v for k, v in graph.initializers.items() if k in live}
    if len(nodes) == len(graph.nodes) and len(initializers) == len(graph.initializers):
        return graph, False
    return graph.replace(nodes=nodes, initializers=initializers), True
