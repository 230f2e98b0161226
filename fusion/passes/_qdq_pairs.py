"""The Q/DQ pairs of :mod:`fusion.passes.qdq_fold`: ``Q(DQ(q))`` folded to ``q`` (one pair, or
every pair in one edit), and the ONNX QuantizeLinear/DequantizeLinear no pattern took lowered
to hwgen's quantize/dequantize (all in one edit).

Each works in one edit over the whole graph, so that a long chain costs one rebuild, not one
per pair (issue 29: a 20,000-node chain inspects in about a second).
"""

from __future__ import annotations

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, bypass
from fusion.passes._qdq_common import Q_OPS, Refused, dq_source, q_target, quant_from


def fold_pair(graph: Graph, node: Node) -> Graph | None:
    """``Q(DQ(q)) -> q`` when both use the same parameters and dtype."""
    source = dq_source(graph, node.inputs[0])
    target = q_target(graph, node)
    if source is None or target is None:
        return None
    (q, qin), (y, qout) = source, target
    if qin != qout or graph.tensors[q].dtype != graph.tensors[y].dtype:
        raise Refused(f"{node.name!r} re-quantizes {q!r} from {qin} to {qout}; this stays a "
                      f"dequantize/quantize pair on the host")
    return bypass(graph, node, q, y)


def fold_pairs(graph: Graph) -> tuple[Graph, bool]:
    """Fold every ``Q(DQ(q))`` pair that :func:`fold_pair` folds, in one edit.

    Folded one at a time, a chain of N pairs rebuilds the graph and walks it again N times:
    quadratic (13 s for 1,000 nodes, minutes for 4,000). Here each pair's readers read its
    source through the renames of the pairs before it, which is the graph that folding them
    one after another in topological order gives. A pair whose output is a graph output is
    left to the walk: its fold renames the source's producer instead (:func:`bypass`).
    """
    edit = Edit(graph)
    for node in graph.topo_order():
        if node.op not in Q_OPS:
            continue
        try:
            source, target = dq_source(graph, node.inputs[0]), q_target(graph, node)
        except Refused:
            continue  # the walk refuses it the same way
        if source is None or target is None:
            continue
        (q, qin), (y, qout) = source, target
        if qin == qout and graph.tensors[q].dtype == graph.tensors[y].dtype and \
                y not in graph.outputs:
            edit.drop(node)
            edit.replace_uses(y, q)
    if not edit.dropped:
        return graph, False
    return edit.apply(), True


def lower(edit: Edit, graph: Graph, node: Node) -> None:
    """Record in ``edit``: an ONNX QuantizeLinear/DequantizeLinear as quantize/dequantize.

    Raises :class:`Refused` before touching ``edit`` when it cannot be lowered.
    """
    inputs = node.inputs + ("",) * 2
    if node.op == "DequantizeLinear":
        (q, quant) = dq_source(graph, node.outputs[0])
        tensor, op, attrs = q, "dequantize", {}
    else:
        if graph.tensors[node.inputs[0]].dtype != "float32":
            raise Refused(f"QuantizeLinear {node.name!r} quantizes an int32 tensor; hwgen's "
                          f"quantize takes float32")
        tensor = node.outputs[0]
        quant = quant_from(graph, tensor, inputs[1], inputs[2], node.attr("axis", 1))
        op, attrs = "quantize", {"dtype": graph.tensors[tensor].dtype}
    why = edit.annotate(tensor, quant)
    if why:
        raise Refused(why)
    edit.drop(node)
    edit.node(node.name, op, [node.inputs[0]], output=node.outputs[0], **attrs)


def lower_all(graph: Graph) -> tuple[Graph, bool]:
    """Lower every remaining ONNX Q/DQ in one edit (one graph rebuild, not one per node)."""
    edit = Edit(graph)
    for node in graph.topo_order():
        if node.op in ("QuantizeLinear", "DequantizeLinear"):
            try:
                lower(edit, graph, node)
            except Refused:
                continue
    if not edit.dropped:
        return graph, False
    return edit.apply(), True
