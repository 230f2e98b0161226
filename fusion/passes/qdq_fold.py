"""Q/DQ folding: rewrite quantized ONNX patterns into hwgen's integer-domain ops.

The rewrites, each exact or within one output LSB of the ONNX float computation:

Compute chains (QDQ form)
    ``DQ(x), DQ(w) -> MatMul | Gemm | Conv [-> Add(bias)] [-> Relu | Clip] -> Q`` becomes
    ``qmatmul | qconv2d -> [bias_add] -> requant -> [relu | clamp]``. The requantize scale is
    ``x_scale * w_scale / y_scale`` (per channel when the weights are). ``Relu``/``Clip``
    before ``Q`` become the integer clamp ``[Q(min), Q(max)]``: ``relu`` when that is
    ``[0, 127]``, nothing when the requantize saturation already does it (``y_zero_point`` =
    -128). A float bias is rounded to int32 accumulator units; a ``DQ``'d int32 bias whose scale
    is the accumulator's is used as is. Without the final ``Q`` the chain ends in a
    ``dequantize`` of the int32 accumulator.
Residual add
    ``DQ(a), DQ(b) -> Add [-> Relu | Clip] -> Q`` becomes ``qadd [-> relu | clamp]``. Its
    input multipliers are int8 (the accelerator multiplies them as GEMM weights), the pair
    whose ratio is nearest the input scales' (:func:`fusion.ir.ops.qadd_input_mults`); an
    ``Add`` where that approximation could cost more than half an output LSB
    (:func:`fusion.ir.ops.qadd_error_bound`) is refused.
QOperator ops
    ``QLinearMatMul``/``QLinearConv`` become ``qmatmul``/``qconv2d [-> bias_add] -> requant``;
    ``MatMulInteger``/``ConvInteger`` become ``qmatmul``/``qconv2d`` (their zero points are
    recorded on the operands with a unit scale).
Layout ops between Q and DQ
    ``MaxPool``, ``Flatten``, ``Reshape``, ``Transpose`` and ``Relu`` of a ``DQ`` run on the
    integers instead (``maxpool`` ..., ``Relu`` as ``clamp(lo=zero_point)``), followed by a
    ``dequantize``; the order-preserving ops commute with quantization, so this is exact.
Q/DQ pairs and boundaries
    ``Q(DQ(q))`` with the same parameters is ``q``. The remaining ``QuantizeLinear`` and
    ``DequantizeLinear`` (at the graph boundaries) become ``quantize`` and ``dequantize``.

Integer tensors get the :class:`~fusion.ir.graph.Quant` the Q/DQ parameters give them. A pattern is
refused (left as it is) when it cannot be expressed exactly enough: per-channel activations,
computed scales, blocked quantization, Gemm with ``transA`` or ``alpha``/``beta`` other than
1, weights quantized along the wrong axis, a tensor quantized two ways, non-8-bit operands, a
residual ``Add`` with no ``Q`` after it or whose scales int8 multipliers
cannot hold closely enough. :func:`explain` says why for each op left.
"""

from __future__ import annotations

from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Quant
from fusion.passes._edit import Edit, bypass, rewrite_each
from fusion.passes._qdq_common import (
    Q_OPS,
    Refused,
    dq_source,
    emit_activation,
    match_tail,
    per_tensor,
    q_target,
    quant_from,
    window_pads,
)
from fusion.passes._qdq_compute import fold_compute, fold_qoperator

COMPUTE = ("MatMul", "Gemm", "Conv")
QOPERATOR = ("QLinearMatMul", "QLinearConv", "MatMulInteger", "ConvInteger")
SINKABLE = ("MaxPool", "Flatten", "Reshape", "Transpose", "Relu")
INT8S = ("int8", "uint8")


def fold_residual(graph: Graph, node: Node) -> Graph:
    """``DQ(a), DQ(b) -> Add [-> Relu | Clip] -> Q`` into ``qadd [-> relu | clamp]``."""
    operands = []
    for name in node.inputs:
        source = dq_source(graph, name)
        if source is None:
            raise Refused(f"Add {node.name!r} reads {name!r}, which is not dequantized from an "
                          f"integer tensor")
        q, quant = source
        if graph.tensors[q].dtype not in INT8S:
            raise Refused(f"Add {node.name!r} adds {q!r}, which is {graph.tensors[q].dtype}; "
                          f"qadd adds 8-bit tensors")
        operands.append((q, per_tensor(q, quant)))
    tail = match_tail(graph, node.outputs[0])
    if tail is None:
        raise Refused(f"Add {node.name!r} is not followed by a QuantizeLinear; qadd produces "
                      f"an 8-bit result")
    (a, qa), (b, qb) = operands
    try:
        attrs = ops.qadd_attrs(qa.scale[0], qb.scale[0], tail.quant.scale[0],
                               tail.quant.zero_point[0], out_dtype=tail.dtype)
    except ValueError as exc:
        raise Refused(f"Add {node.name!r}: {exc}") from None
    spans = []
    for q, quant in ((a, qa), (b, qb)):
        lo, hi = ops.INT_RANGE[graph.tensors[q].dtype]
        spans.append(max(abs(lo - quant.zero_point[0]), abs(hi - quant.zero_point[0])))
    bound = ops.qadd_error_bound(attrs, qa.scale[0], qb.scale[0], tail.quant.scale[0], *spans)
    if bound >= 0.5:
        # Past half an LSB the rounded sum can be 2 LSBs from ONNX's: keep the promise of
        # one LSB by leaving this Add in float rather than folding it.
        raise Refused(f"Add {node.name!r}: the int8 multipliers {attrs['a_mult']}/"
                      f"{attrs['b_mult']} approximate the input scale ratio "
                      f"{qb.scale[0] / qa.scale[0]:.6g} to within {bound:.3g} output LSBs, "
                      f"more than the 0.5 that keeps qadd within one LSB of ONNX; a larger "
                      f"output scale, or input scales with a ratio of small integers, folds")
    edit = Edit(graph)
    edit.drop(node, *tail.nodes)
    for name, quant in ((a, qa), (b, qb), (tail.output, tail.quant)):
        why = edit.annotate(name, quant)
        if why:
            raise Refused(why)
    lo, hi = ops.INT_RANGE[tail.dtype]
    bounds = tail.clamp
    if bounds is None or (bounds[0] <= lo and bounds[1] >= hi):
        edit.node(f"{node.name}/qadd", "qadd", [a, b], output=tail.output, quant=tail.quant,
                  **attrs)
    else:
        y = edit.node(f"{node.name}/qadd", "qadd", [a, b], quant=tail.quant, **attrs)
        emit_activation(edit, node.name, y, bounds, tail.dtype, tail.output, tail.quant)
    return edit.apply()


def sink_dequantize(graph: Graph, node: Node) -> Graph | None:
    """Run a layout op (or Relu) of a ``DQ`` on the integers, then dequantize (exact)."""
    source = dq_source(graph, node.inputs[0])
    if source is None:
        return None
    q, quant = source
    x = graph.tensors[q]
    edit = Edit(graph)
    edit.drop(node)
    base, out = node.name, node.outputs[0]
    if quant.per_channel and node.op not in ("Transpose", "Relu", "MaxPool"):
        raise Refused(f"{node.op} {node.name!r} reshapes {q!r}, which is quantized per channel")
    if node.op == "Relu":
        # DQ(q) >= 0 exactly when q >= zero_point, so Relu is a clamp at the zero point.
        zps = set(quant.zero_point)
        if len(zps) != 1:
            raise Refused(f"Relu {node.name!r} reads {q!r}, whose channels have different zero "
                          f"points")
        lo, hi = ops.INT_RANGE[x.dtype]
        t = emit_activation(edit, base, q, (max(lo, zps.pop()), hi), x.dtype, None, quant)
    else:
        new_quant = quant
        if node.op == "MaxPool":
            if quant.per_channel and quant.axis != 1:
                raise Refused(f"MaxPool {node.name!r}: {q!r} is quantized along axis "
                              f"{quant.axis}, not per channel")
            kernel = tuple(node.attr("kernel_shape"))
            attrs = {"kernel_shape": kernel, "pads": window_pads(node, x.shape, kernel),
                     "strides": tuple(node.attr("strides") or (1,) * len(kernel)),
                     "dilations": tuple(node.attr("dilations") or (1,) * len(kernel)),
                     "ceil_mode": node.attr("ceil_mode", 0)}
        elif node.op == "Flatten":
            attrs = {"axis": node.attr("axis", 1)}
        elif node.op == "Reshape":
            attrs = {"shape": graph.tensors[out].shape}  # static: no 0 / -1 rules to carry
        else:
            perm = node.attr("perm")
            perm = tuple(perm) if perm is not None else tuple(reversed(range(len(x.shape))))
            attrs = {"perm": perm}
            if quant.per_channel:
                new_quant = Quant(quant.scale, quant.zero_point, perm.index(quant.axis))
        try:
            t = edit.node(f"{base}/{node.op.lower()}", node.op.lower(), [q], quant=new_quant,
                          **attrs)
        except GraphError as exc:
            raise Refused(str(exc)) from None
    why = edit.annotate(q, quant)
    if why:
        raise Refused(why)
    edit.node(f"{base}/dequantize", "dequantize", [t], output=out)
    return edit.apply()


def _fold_pair(graph: Graph, node: Node) -> Graph | None:
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


def _lower(edit: Edit, graph: Graph, node: Node) -> None:
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


def _lower_all(graph: Graph) -> tuple[Graph, bool]:
    """Lower every remaining ONNX Q/DQ in one edit (one graph rebuild, not one per node)."""
    edit = Edit(graph)
    for node in graph.topo_order():
        if node.op in ("QuantizeLinear", "DequantizeLinear"):
            try:
                _lower(edit, graph, node)
            except Refused:
                continue
    if not edit.dropped:
        return graph, False
    return edit.apply(), True


def _rewrite(graph: Graph, node: Node) -> Graph | None:
    """The graph with ``node``'s pattern folded, None if no pattern starts at it.

    Raises
    ------
    Refused
        When a pattern starts at ``node`` but cannot be folded.
    """
    if node.op in QOPERATOR:
        return fold_qoperator(graph, node)
    if node.op in COMPUTE:
        return fold_compute(graph, node)
    if node.op == "Add":
        return fold_residual(graph, node)
    if node.op in SINKABLE:
        return sink_dequantize(graph, node)
    if node.op in Q_OPS:
        return _fold_pair(graph, node)  # the rest are lowered after the patterns
    return None


def run(graph: Graph) -> tuple[Graph, bool]:
    """Fold every Q/DQ pattern the module docstring lists, one at a time, until none is left.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    def fold(graph: Graph, node: Node) -> Graph | None:
        try:
            return _rewrite(graph, node)
        except Refused:
            return None

    graph, changed = rewrite_each(graph, fold)
    graph, lowered = _lower_all(graph)
    return graph, changed or lowered


def explain(graph: Graph) -> list[str]:
    """Why each ONNX-semantics op left in ``graph`` was not folded (one line per op).

    Parameters
    ----------
    graph : Graph
        Usually the graph after the passes.

    Returns
    -------
    list of str
        ``"<node> (<op>): <reason>"`` lines.
    """
    lines = []
    for node in graph.topo_order():
        if node.op not in ops.ONNX_OPS:
            continue
        try:
            if node.op in ("QuantizeLinear", "DequantizeLinear"):
                _lower(Edit(graph), graph, node)
                result = graph  # lowerable: run() would have; nothing to explain
            else:
                result = _rewrite(graph, node)
        except Refused as exc:
            lines.append(f"{node.name} ({node.op}): {exc}")
            continue
        if result is None:
            lines.append(f"{node.name} ({node.op}): runs in float: its input is not "
                         f"dequantized from an integer tensor, or hwgen has no integer form "
                         f"for it")
    return lines

