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

The host's element-wise ops on real values commute the same way (:func:`commute_real`).
onnxruntime's QOperator quantizer has no integer ``Sum``, so a QOperator ShuffleNet adds its
residuals in float: ``Relu(Sum(DQ(L(g2)), r))``, the sum's ``Relu`` both quantized for the
next unit's convolution and added in float by the next unit's ``Sum`` (the residual stream
stays float from unit to unit). With ``L`` on every input, the host computed each of these
in NCHW, the NCHW view of every GEMM output was a host transpose, and each next convolution
read its input back through a host ``im2col``. A ``Sum``, ``Add``, ``Max``, ``Min`` or
``Relu`` of float tensors of one shape (no broadcasting), each input ``L(x)`` or a per-tensor
``dequantize`` of ``L(x)``, runs on the ``x`` (the dequantize with it), and a per-tensor
``quantize`` of ``L(x)`` quantizes ``x``: the same values, element for element, with ``L``
after. The layout changes so sink down the float chain to the quantize before the next
convolution, which reads the GEMM layout where it lies (:mod:`fusion.passes.im2col_rows`).
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


def _one_layout(graph: Graph, layouts: list[tuple[Node, Node]]) -> bool:
    """Whether the ``(transpose, reshape)`` pairs change tensors of one shape by one
    permutation to one shape: the layout change that can follow the op instead."""
    t0, r0 = layouts[0]
    shape = graph.tensors[t0.inputs[0]].shape
    return all(t.attr("perm") == t0.attr("perm") and r.attr("shape") == r0.attr("shape")
               and graph.tensors[t.inputs[0]].shape == shape for t, r in layouts)


def _view_after(edit: Edit, node: Node, done: str, layout: tuple[Node, Node]) -> None:
    """``node``'s output as ``layout`` (a transpose, then a reshape) of ``done``, the op's
    result in the inputs' own layout."""
    out = edit.graph.tensors[node.outputs[0]]
    transpose, reshape = layout
    moved = edit.node(f"{node.name}/transpose", "transpose", [done], quant=out.quant,
                      perm=transpose.attr("perm"))
    edit.node(f"{node.name}/reshape", "reshape", [moved], output=out.name, quant=out.quant,
              shape=reshape.attr("shape"))


def commute(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with the layout changes of ``qadd`` ``node``'s inputs moved after it, or None
    where the pattern does not hold exactly."""
    if node.op != "qadd" or node.inputs[0] == node.inputs[1]:
        return None
    found = [_layout(graph, name) for name in node.inputs]
    if any(f is None for f in found):
        return None
    if not _one_layout(graph, found):
        return None
    a0, b0 = (t.inputs[0] for t, _r in found)
    for name in (a0, b0):
        q = graph.tensors[name].quant
        if q is None or q.per_channel:
            return None
    out = graph.tensors[node.outputs[0]]
    edit = Edit(graph)
    edit.drop(node)
    summed = edit.node(node.name, "qadd", [a0, b0], output=edit.fresh(f"{out.name}/gemm"),
                       quant=out.quant, **node.attr_dict)
    _view_after(edit, node, summed, found[0])
    return edit.apply()


#: The host's element-wise ops on real values of one shape that :func:`commute_real` moves.
REAL_ELEMENTWISE = frozenset({"Sum", "Add", "Max", "Min", "Relu"})


def _real_source(graph: Graph, name: str) -> tuple[Node | None, Node, Node] | None:
    """``(dequantize or None, transpose, reshape)`` where float ``name`` is ``L(x)`` or a
    per-tensor ``dequantize`` of ``L(x)`` that only reads ``L(x)``; None otherwise."""
    dq = graph.producer(name)
    if dq is not None and dq.op == "dequantize":
        quant = graph.tensors[dq.inputs[0]].quant
        if quant is None or quant.per_channel:
            return None
        found = _layout(graph, dq.inputs[0])
        return None if found is None else (dq, *found)
    found = _layout(graph, name)
    return None if found is None else (None, *found)


def commute_real(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with the layout change of every input of the host's element-wise op
    ``node`` on real values (or of a ``quantize``'s input) moved after it, or None where the
    pattern does not hold exactly (module docstring)."""
    out = graph.tensors[node.outputs[0]]
    quantize = node.op == "quantize"
    if not (node.op in REAL_ELEMENTWISE or quantize) or any(
            graph.tensors[i].dtype != "float32" or graph.tensors[i].shape != out.shape
            for i in node.inputs):
        return None
    if quantize and (out.quant is None or out.quant.per_channel
                     or graph.producer(node.inputs[0]) is None
                     or graph.producer(node.inputs[0]).op == "dequantize"):
        return None  # a quantize of a dequantize is Q/DQ folding's, not a host op's
    found = [_real_source(graph, name) for name in node.inputs]
    if any(f is None for f in found):
        return None
    if not _one_layout(graph, [(t, r) for _dq, t, r in found]):
        return None
    edit = Edit(graph)
    edit.drop(node)
    inputs = []
    for dq, t, _r in found:
        if dq is None:
            inputs.append(t.inputs[0])
            continue
        name = dq.name
        if graph.sole_reader(dq.outputs[0]) is node:
            edit.drop(dq)  # the host step keeps its name; its output is the GEMM layout's
        else:
            name = f"{dq.name}/gemm"
        inputs.append(edit.node(name, "dequantize", [t.inputs[0]],
                                output=edit.fresh(f"{dq.outputs[0]}/gemm"), **dq.attr_dict))
    done = edit.node(node.name, node.op, inputs, output=edit.fresh(f"{out.name}/gemm"),
                     quant=out.quant, **node.attr_dict)
    _view_after(edit, node, done, found[0][1:])
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Move the layout changes of every residual add's inputs after it, and of every host
    element-wise op's on real values (module docstring)."""
    graph, added = rewrite_each(graph, commute)
    graph, real = rewrite_each(graph, commute_real)
    return graph, added or real
