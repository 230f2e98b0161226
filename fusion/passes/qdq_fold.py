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
    ``DQ(a), DQ(b) -> Add [-> Relu | Clip] -> Q`` becomes ``qadd [-> relu | clamp]``: each
    input times a 31-bit multiplier, one rounding half to even (:func:`fusion.ir.ops.qadd_attrs`),
    within about ``1e-7`` LSB of the real sum before rounding; an ``Add`` whose scales leave
    more than half an LSB (:func:`fusion.ir.ops.qadd_error_bound`: only for scales 2**30
    apart) is refused.
QOperator ops
    ``QLinearMatMul``/``QLinearConv`` become ``qmatmul``/``qconv2d [-> bias_add] -> requant``;
    ``MatMulInteger``/``ConvInteger`` become ``qmatmul``/``qconv2d`` (their zero points are
    recorded on the operands with a unit scale). onnxruntime's ``QLinearAdd`` becomes ``qadd``
    exactly as the residual ``Add`` does; ``QGemm`` becomes ``qmatmul [-> bias_add] ->
    requant`` with ``alpha`` in the requantize scale (or ``dequantize`` without ``y_scale``);
    a ``MaxPool``, ``Flatten``, ``Reshape`` or ``Transpose`` of an 8-bit tensor becomes its
    hwgen op (``maxpool`` ...), keeping the quantization.
Average pools
    ``DQ -> AveragePool | GlobalAveragePool -> Q`` and ``QLinear(Global)AveragePool`` become a
    window sum (a depthwise ``qconv2d`` with all-ones weights; padding reads the zero point,
    so it adds 0) and a ``requant`` by ``x_scale / (window * y_scale)``; where the divisor
    varies at the borders (``count_include_pad`` = 0 with padding, ``ceil_mode`` overhang), a
    GEMM against the pooling matrix with one requantize scale per window
    (:mod:`fusion.passes._qdq_pool`).
Layout ops between Q and DQ
    ``MaxPool``, ``Flatten``, ``Reshape``, ``Transpose`` and ``Relu`` of a ``DQ`` run on the
    integers instead (``maxpool`` ..., ``Relu`` as ``clamp(lo=zero_point)``), followed by a
    ``dequantize``; the order-preserving ops commute with quantization, so this is exact. A
    ``MaxPool`` of a float tensor that is then quantized (``X -> MaxPool -> Q``, after a host
    op) is ``Q(X) -> maxpool`` the same way.
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

import math

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Quant
from fusion.passes._edit import Edit, rewrite_each
from fusion.passes._qdq_common import (
    Q_OPS,
    Refused,
    Tail,
    const,
    dq_source,
    emit_activation,
    match_tail,
    maxpool_attrs,
    next_node,
    per_tensor,
    q_target,
    quant_from,
    requant_epilogue,
)
from fusion.passes._qdq_compute import _acc_quant, _channel_vector, fold_compute, fold_qoperator
from fusion.passes._qdq_pairs import fold_pair, fold_pairs, lower, lower_all
from fusion.passes._qdq_pool import fold_pool

COMPUTE = ("MatMul", "Gemm", "Conv")
QOPERATOR = ("QLinearMatMul", "QLinearConv", "MatMulInteger", "ConvInteger")
LAYOUT = ("MaxPool", "Flatten", "Reshape", "Transpose")
SINKABLE = (*LAYOUT, "Relu")
POOLS = ("AveragePool", "GlobalAveragePool", "QLinearAveragePool", "QLinearGlobalAveragePool")
INT8S = ("int8", "uint8")


def fold_residual(graph: Graph, node: Node) -> Graph:
    """``DQ(a), DQ(b) -> Add [-> Relu | Clip] -> Q`` into ``qadd [-> relu | clamp]`` (a
    ``Sum`` of two, as opset-9-era exporters wrote residuals, alike)."""
    operands = []
    for name in node.inputs:
        source = dq_source(graph, name)
        if source is None:
            raise Refused(f"{node.op} {node.name!r} reads {name!r}, which is not dequantized "
                          f"from an integer tensor")
        operands.append(source)
    tail = match_tail(graph, node.outputs[0])
    if tail is None:
        raise Refused(f"{node.op} {node.name!r} is not followed by a QuantizeLinear; qadd "
                      f"produces an 8-bit result")
    return _emit_qadd(graph, node, operands, tail)


def fold_qlinear_add(graph: Graph, node: Node) -> Graph:
    """onnxruntime's ``QLinearAdd`` into ``qadd``, exactly as the QDQ ``Add`` folds."""
    i = node.inputs + ("",) * 8
    y = node.outputs[0]
    operands = [(q, quant_from(graph, q, scale, zp, 1))
                for q, scale, zp in ((i[0], i[1], i[2]), (i[3], i[4], i[5]))]
    tail = Tail((), y, quant_from(graph, y, i[6], i[7], 1), graph.tensors[y].dtype, None)
    return _emit_qadd(graph, node, operands, tail)


def _emit_qadd(graph: Graph, node: Node, operands: list[tuple[str, Quant]], tail: Tail) -> Graph:
    """``qadd [-> relu | clamp]`` of the integer ``operands`` replacing ``node`` and ``tail``."""
    for q, _ in operands:
        if graph.tensors[q].dtype not in INT8S:
            raise Refused(f"{node.op} {node.name!r} adds {q!r}, which is "
                          f"{graph.tensors[q].dtype}; qadd adds 8-bit tensors")
    (a, qa), (b, qb) = [(q, per_tensor(q, quant)) for q, quant in operands]
    per_tensor(tail.output, tail.quant)
    try:
        attrs = ops.qadd_attrs(qa.scale[0], qb.scale[0], tail.quant.scale[0],
                               tail.quant.zero_point[0], out_dtype=tail.dtype)
    except ValueError as exc:
        raise Refused(f"{node.op} {node.name!r}: {exc}") from None
    spans = []
    for q, quant in ((a, qa), (b, qb)):
        lo, hi = ops.INT_RANGE[graph.tensors[q].dtype]
        spans.append(max(abs(lo - quant.zero_point[0]), abs(hi - quant.zero_point[0])))
    bound = ops.qadd_error_bound(attrs, qa.scale[0], qb.scale[0], tail.quant.scale[0], *spans)
    if bound >= 0.5:
        # Past half an LSB the rounded sum can be 2 LSBs from ONNX's: keep the promise of
        # one LSB by leaving this Add in float rather than folding it.
        raise Refused(f"{node.op} {node.name!r}: the multipliers {attrs['a_mult']}/"
                      f"{attrs['b_mult']} >> {attrs['shift']} approximate the input scales "
                      f"over the output's to within {float(bound):.3g} output LSBs, more than "
                      f"the 0.5 that keeps qadd within one LSB of ONNX; scales this far apart "
                      f"need a larger output scale")
    edit = Edit(graph)
    edit.drop(node, *tail.nodes)
    for name, quant in ((a, qa), (b, qb), (tail.output, tail.quant)):
        why = edit.annotate(name, quant)
        if why:
            raise Refused(why)
    lo, hi = ops.INT_RANGE[tail.dtype]
    bounds = tail.clamp
    try:
        if bounds is None or (bounds[0] <= lo and bounds[1] >= hi):
            edit.node(f"{node.name}/qadd", "qadd", [a, b], output=tail.output,
                      quant=tail.quant, **attrs)
        else:
            y = edit.node(f"{node.name}/qadd", "qadd", [a, b], quant=tail.quant, **attrs)
            emit_activation(edit, node.name, y, bounds, tail.dtype, tail.output, tail.quant)
    except GraphError as exc:
        raise Refused(f"{node.op} {node.name!r}: {exc}") from None
    return edit.apply()


def fold_integer_layout(graph: Graph, node: Node) -> Graph:
    """A ``MaxPool``, ``Flatten``, ``Reshape`` or ``Transpose`` read straight from an 8-bit
    tensor (QOperator form) as its hwgen op; the output keeps the input's quantization (max
    pooling is order-preserving, the others move values)."""
    edit = Edit(graph)
    edit.drop(node)
    q = node.inputs[0]
    _integer_layout(edit, graph, node, q, graph.tensors[q].quant, node.outputs[0])
    return edit.apply()


def fold_qgemm(graph: Graph, node: Node) -> Graph:
    """onnxruntime's ``QGemm`` as ``qmatmul [-> bias_add] -> requant`` (or ``dequantize``).

    ``alpha * a_scale * b_scale`` is the accumulator's scale and ``C`` (int32, in accumulator
    units) its bias; without ``y_scale`` the result is the dequantized accumulator.
    """
    what = f"QGemm {node.name!r}"
    i = node.inputs + ("",) * 9
    alpha = float(node.attr("alpha", 1.0))
    if node.attr("transA", 0):
        raise Refused(f"{what} has transA=1; hwgen's qmatmul reads A as [M, K]: transpose A "
                      f"before it")
    if not (math.isfinite(alpha) and alpha > 0):
        raise Refused(f"{what} has alpha {alpha!r}; only a positive alpha folds into the "
                      f"requantize scale")
    a, b, y = i[0], i[3], node.outputs[0]
    qa = per_tensor(a, quant_from(graph, a, i[1], i[2], 1))
    qb = quant_from(graph, b, i[4], i[5], 1)
    edit = Edit(graph)
    edit.drop(node)
    if node.attr("transB", 0):
        # B' = B.T: the weights are constant, so transpose them here (a per-row Quant of B
        # is per column of B').
        value = const(graph, b)
        if value is None:
            raise Refused(f"{what} has transB=1 and computed weights {b!r}; make them constant")
        qb = quant_from(graph, b, i[4], i[5], 0)
        b = edit.const(f"{b}/kxn", np.ascontiguousarray(value.T),
                       quant=Quant(qb.scale, qb.zero_point, 1 if qb.per_channel else None))
        qb = edit.tensors[b].quant
    out_shape = graph.tensors[y].shape
    try:
        for name, quant in ((a, qa), (b, qb)):
            why = edit.annotate(name, quant)
            if why:
                raise Refused(why)
        acc_scale = alpha * qa.scale[0] * np.array(qb.scale, np.float64)
        acc = edit.node(f"{node.name}/qmatmul", "qmatmul", [a, b],
                        quant=_acc_quant(acc_scale, 1))
        if i[6]:
            value = const(graph, i[6])
            vector = _channel_vector(value, out_shape, 1, f"QGemm bias {i[6]!r}")
            bias = i[6] if value.shape == vector.shape else edit.const(f"{node.name}/bias",
                                                                        vector)
            acc = edit.node(f"{node.name}/bias_add", "bias_add", [acc, bias], axis=1,
                            quant=edit.tensors[acc].quant)
        if not i[7]:
            edit.node(f"{node.name}/dequantize", "dequantize", [acc], output=y)
            return edit.apply()
        qy = per_tensor(y, quant_from(graph, y, i[7], i[8], 1))
        why = edit.annotate(y, qy)
        if why:
            raise Refused(why)
        requant_epilogue(edit, node.name, acc, acc_scale, 1,
                         Tail((), y, qy, graph.tensors[y].dtype, None))
        return edit.apply()
    except GraphError as exc:
        raise Refused(f"{what}: {exc}") from None


def sink_dequantize(graph: Graph, node: Node) -> Graph | None:
    """Run a layout op (or Relu) of a ``DQ`` on the integers, then dequantize (exact)."""
    source = dq_source(graph, node.inputs[0])
    if source is None:
        return raise_quantize(graph, node) if node.op == "MaxPool" else None
    q, quant = source
    x = graph.tensors[q]
    edit = Edit(graph)
    edit.drop(node)
    base, out = node.name, node.outputs[0]
    if node.op == "Relu":
        # DQ(q) >= 0 exactly when q >= zero_point, so Relu is a clamp at the zero point.
        zps = set(quant.zero_point)
        if len(zps) != 1:
            raise Refused(f"Relu {node.name!r} reads {q!r}, whose channels have different zero "
                          f"points")
        lo, hi = ops.INT_RANGE[x.dtype]
        t = emit_activation(edit, base, q, (max(lo, zps.pop()), hi), x.dtype, None, quant)
    else:
        t = _integer_layout(edit, graph, node, q, quant, None)
    why = edit.annotate(q, quant)
    if why:
        raise Refused(why)
    edit.node(f"{base}/dequantize", "dequantize", [t], output=out)
    return edit.apply()


def raise_quantize(graph: Graph, node: Node) -> Graph | None:
    """``X -> MaxPool -> Q`` of a float ``X`` (a host op's output, LRN's in Inception-v1) as
    ``Q(X) -> maxpool``: the quantize is monotone, so the maximum of the quantized window is
    the quantized maximum, and the pool runs on the accelerator."""
    reader = next_node(graph, node.outputs[0])
    target = q_target(graph, reader) if reader is not None else None
    if target is None:
        return None
    y, quant = target
    edit = Edit(graph)
    edit.drop(node, reader)
    q = edit.node(f"{reader.name}/before_pool", reader.op, [node.inputs[0], *reader.inputs[1:]],
                  quant=quant, **dict(reader.attrs))
    _integer_layout(edit, graph, node, q, quant, y)
    return edit.apply()


def _integer_layout(edit: Edit, graph: Graph, node: Node, q: str, quant: Quant | None,
                    output: str | None) -> str:
    """Record in ``edit`` the hwgen form of layout op ``node`` (MaxPool, Flatten, Reshape,
    Transpose) applied to integer tensor ``q``; the result keeps q's quantization."""
    x = edit.tensors[q]
    per_channel = quant is not None and quant.per_channel
    if per_channel and node.op not in ("Transpose", "MaxPool"):
        raise Refused(f"{node.op} {node.name!r} reshapes {q!r}, which is quantized per channel")
    new_quant = quant
    if node.op == "MaxPool":
        if per_channel and quant.axis != 1:
            raise Refused(f"MaxPool {node.name!r}: {q!r} is quantized along axis "
                          f"{quant.axis}, not per channel")
        attrs = maxpool_attrs(node, x.shape)
    elif node.op == "Flatten":
        attrs = {"axis": node.attr("axis", 1)}
    elif node.op == "Reshape":
        attrs = {"shape": graph.tensors[node.outputs[0]].shape}  # static: no 0 / -1 rules
    else:
        perm = node.attr("perm")
        perm = tuple(perm) if perm is not None else tuple(reversed(range(len(x.shape))))
        attrs = {"perm": perm}
        if per_channel:
            new_quant = Quant(quant.scale, quant.zero_point, perm.index(quant.axis))
    if output is not None and new_quant is not None:
        why = edit.annotate(output, new_quant)
        if why:
            raise Refused(why)
    try:
        return edit.node(f"{node.name}/{node.op.lower()}", node.op.lower(), [q], output=output,
                         quant=new_quant, **attrs)
    except GraphError as exc:
        raise Refused(f"{node.op} {node.name!r}: {exc}") from None


def _rewrite(graph: Graph, node: Node) -> Graph | None:
    """The graph with ``node``'s pattern folded, None if no pattern starts at it.

    Raises
    ------
    Refused
        When a pattern starts at ``node`` but cannot be folded.
    """
    if node.op in QOPERATOR:
        return fold_qoperator(graph, node)
    if node.op == "QGemm":
        return fold_qgemm(graph, node)
    if node.op == "QLinearAdd":
        return fold_qlinear_add(graph, node)
    if node.op in POOLS:
        return fold_pool(graph, node)
    if node.op in LAYOUT and graph.tensors[node.inputs[0]].dtype in INT8S:
        return fold_integer_layout(graph, node)
    if node.op in COMPUTE:
        return fold_compute(graph, node)
    if node.op == "Add" or (node.op == "Sum" and len(node.inputs) == 2):
        return fold_residual(graph, node)
    if node.op in SINKABLE:
        return sink_dequantize(graph, node)
    if node.op in Q_OPS:
        return fold_pair(graph, node)  # the rest are lowered after the patterns
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

    graph, paired = fold_pairs(graph)
    graph, changed = rewrite_each(graph, fold)
    graph, lowered = lower_all(graph)
    return graph, paired or changed or lowered


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
                lower(Edit(graph), graph, node)
                result = graph  # lowerable: run() would have; nothing to explain
            else:
                result = _rewrite(graph, node)
        except Refused as exc:
            lines.append(f"{node.name} ({node.op}): {exc}")
            continue
        if result is None and node.op == "BatchNormalization":
            from fusion.passes.batchnorm import why_host

            why = why_host(graph, node)
            lines.append(f"{node.name} ({node.op}): runs in float: "
                         f"{why or 'the batchnorm pass rewrites it'}")
        elif result is None:
            lines.append(f"{node.name} ({node.op}): runs in float: its input is not "
                         f"dequantized from an integer tensor, or hwgen has no integer form "
                         f"for it")
    return lines

