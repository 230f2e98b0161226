"""Add before the layout change: ``qadd(L(a), L(b))`` becomes ``L(qadd(a, b))``.

Conv legalization ends every convolution with a layout change ``L`` = ``transpose`` (GEMM
rows ``[N, OH*OW, M]`` to channels first) then ``reshape`` to NCHW
(:mod:`fusion.passes.conv_legalize`). A residual add of two such outputs (ResNet's
``conv + shortcut``) then reads NCHW tensors that no GEMM writes, so it runs as a pass of
its own. ``qadd`` is element-wise, so it commutes with the same layout change on both inputs:
adding the GEMM-layout tensors ``a`` and ``b`` and changing the layout of the sum computes the
same values. The add can then fuse into the epilogue of the GEMM that makes one of them (the
residual stage reads the other from memory, already in the GEMM's layout), and only the sum
is changed back to NCHW. The old layout changes stay where something else reads them (the
shortcut also feeds the next convolution's ``im2col``); DCE removes the rest.

Only exact matches move: both inputs a ``reshape`` of a ``transpose`` with the same
permutation and target shape, of tensors of one shape and per-tensor quantization.
"""

from __future__ import annotations

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each


def _layout(graph: Graph, name: str) -> tuple[Node, Node] | None:
    """The ``(transpose, reshape)`` that make tensor ``name``, or None."""
    reshape = graph.producer(name)
    if reshape is None or reshape.op != "reshape":
        return None
    transpose = graph.producer(reshape.inputs[0])
    if transpose is None or transpose.op != "transpose":
        return None
    return transpose, reshape


def commute(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with the layout changes of ``qadd`` ``node``'s inputs moved after it, or None
    where the pattern does not hold exactly."""
    if node.op != "qadd" or node.inputs[0] == node.inputs[1]:
        return None
    found = [_layout(graph, name) for name in node.inputs]
    if any(f is None for f in found):
        return None
    (ta, ra), (tb, rb) = found
    a0, b0 = ta.inputs[0], tb.inputs[0]
    if (ta.attr("perm") != tb.attr("perm") or ra.attr("shape") != rb.attr("shape")
            or graph.tensors[a0].shape != graph.tensors[b0].shape):
        return None
    for name in (a0, b0):
        q = graph.tensors[name].quant
        if q is None or q.per_channel:
            return None
    out = graph.tensors[node.outputs[0]]
    edit = Edit(graph)
    edit.drop(node)
    summed = edit.node(node.name, "qadd", [a0, b0], output=edit.fresh(f"{out.name}/gemm"),
                       quant=out.quant, **node.attr_dict)
    moved = edit.node(f"{node.name}/transpose", "transpose", [summed], quant=out.quant,
                      perm=ta.attr("perm"))
    edit.node(f"{node.name}/reshape", "reshape", [moved], output=node.outputs[0],
              quant=out.quant, shape=ra.attr("shape"))
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Move the layout changes of every residual add's inputs after it (module docstring)."""
    return rewrite_each(graph, commute)
