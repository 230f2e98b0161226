"""Q/DQ folding of the compute ops: QDQ MatMul/Gemm/Conv chains and the QOperator ops.

Each ``fold_*`` function takes a graph and an anchor node and returns the rewritten graph, or
raises :class:`~fusion.passes._qdq_common.Refused` saying why the anchor cannot be folded.
New nodes are named after the anchor (``<anchor>/qmatmul``, ``<anchor>/requant`` ...); the
tensors the rest of the graph reads keep their names.
"""

from __future__ import annotations

import numpy as np

from fusion.ir.graph import Graph, GraphError, Node, Quant
from fusion.passes._edit import Edit
from fusion.passes._qdq_common import (
    Refused,
    Tail,
    const,
    dq_source,
    match_tail,
    next_node,
    per_tensor,
    quant_from,
    requant_epilogue,
    window_pads,
)

INT8S = ("int8", "uint8")
INT32 = (-(1 << 31), (1 << 31) - 1)
#: Relative difference below which a bias's scale counts as the accumulator's (float32 round
#: trips of ``x_scale * w_scale`` differ by about 2**-24).
BIAS_SCALE_RTOL = 1e-6


def _annotate(edit: Edit, name: str, quant: Quant) -> None:
    why = edit.annotate(name, quant)
    if why:
        raise Refused(why)


def _int8_operand(graph: Graph, name: str, role: str) -> None:
    dtype = graph.tensors[name].dtype
    if dtype not in INT8S:
        raise Refused(f"its {role} {name!r} is {dtype}; the array multiplies 8-bit values")


def _acc_quant(scale: np.ndarray, axis: int) -> Quant:
    if scale.size == 1:
        return Quant(float(scale[0]), 0)
    return Quant(tuple(scale.tolist()), (0,) * scale.size, axis)


def _conv_attrs(node: Node, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> dict:
    return {"strides": tuple(node.attr("strides") or (1, 1)),
            "dilations": tuple(node.attr("dilations") or (1, 1)),
            "pads": window_pads(node, x_shape, w_shape[2:]), "group": node.attr("group", 1)}


def _channel_vector(value: np.ndarray, out_shape: tuple[int, ...], axis: int,
                    what: str) -> np.ndarray:
    """The per-channel vector of a bias that broadcasts to ``out_shape`` along ``axis`` only."""
    rank = len(out_shape)
    try:
        fits = np.broadcast_shapes(value.shape, out_shape) == tuple(out_shape)
    except ValueError:
        fits = False
    if not fits:
        raise Refused(f"{what} of shape {value.shape} does not broadcast to the output "
                      f"{out_shape}")
    # Work on the value's own elements, never the broadcast output (a batch of 10**12 is a
    # shape, not an array): the value padded to the output's rank, then one index per axis.
    value = value.reshape((1,) * (rank - value.ndim) + value.shape)
    index = [0] * rank
    index[axis] = slice(None)
    picked = value[tuple(index)]  # along the channel axis: one value, or one per channel
    shape = [1] * rank
    shape[axis] = picked.size
    if not np.array_equal(value, np.broadcast_to(picked.reshape(shape), value.shape)):
        raise Refused(f"{what} varies along more than the channel axis {axis}; only a "
                      f"per-channel bias folds into bias_add")
    return np.ascontiguousarray(np.broadcast_to(picked, (out_shape[axis],)))


def _bias(edit: Edit, graph: Graph, base: str, name: str, acc_scale: np.ndarray,
          out_shape: tuple[int, ...], axis: int, conv_b: bool = False) -> str:
    """An int32 (channels,) bias in accumulator units for the float bias tensor ``name``.

    ``conv_b`` marks a Conv's own ``B`` input: one value per output channel, not broadcast
    numpy-style against the NCHW output.
    """
    def channels(value: np.ndarray, what: str) -> np.ndarray:
        if conv_b:
            value = value.reshape(-1, 1, 1)
        return _channel_vector(value, out_shape, axis, what)

    source = dq_source(graph, name)
    if source is not None:
        bq, bquant = source
        value = const(graph, bq)
        if value is None:
            raise Refused(f"the bias {name!r} is computed; it must be constant")
        if (graph.tensors[bq].dtype == "int32" and not any(bquant.zero_point)
                and np.allclose(bquant.scale, acc_scale, rtol=BIAS_SCALE_RTOL, atol=0)):
            vector = channels(value, f"bias {bq!r}")
            if bq in graph.initializers and value.shape == vector.shape:
                return bq  # already the int32 bias the hardware adds
            return edit.const(f"{base}/bias", vector.astype(np.int32))
        zp = np.array(bquant.zero_point, np.float64)
        scale = np.array(bquant.scale, np.float64)
        if bquant.per_channel:
            dims = [1] * value.ndim
            dims[bquant.axis] = scale.size
            zp, scale = zp.reshape(dims), scale.reshape(dims)
        real = (value.astype(np.float64) - zp) * scale
    else:
        real = const(graph, name)
        if real is None:
            raise Refused(f"the bias {name!r} is neither a constant nor a dequantized constant")
    vector = channels(np.asarray(real, np.float64), f"bias {name!r}")
    # A float bias is rounded to accumulator units: an error of at most half an accumulator
    # LSB, far below an output LSB after requantization.
    ints = np.clip(np.rint(vector / acc_scale), *INT32).astype(np.int32)
    return edit.const(f"{base}/bias", ints)


def _is_constant_bias(graph: Graph, name: str) -> bool:
    if name in graph.initializers:
        return True
    source = dq_source(graph, name)
    return source is not None and source[0] in graph.initializers


def fold_compute(graph: Graph, node: Node) -> Graph:
    """Fold ``DQ -> MatMul/Gemm/Conv [-> Add bias] [-> Relu/Clip] -> Q`` into integer ops.

    Without the final quantize, the chain ends in a ``dequantize`` of the int32 accumulator.
    """
    what = f"{node.op} {node.name!r}"
    if node.op == "Gemm":
        if node.attr("transA", 0):
            raise Refused(f"{what} has transA=1; transpose A before it")
        if node.attr("alpha", 1.0) != 1.0 or node.attr("beta", 1.0) != 1.0:
            raise Refused(f"{what} has alpha or beta other than 1; fold them into the scales")
    x, w = node.inputs[0], node.inputs[1]
    sources = []
    for name, role in ((x, "input"), (w, "weights")):
        source = dq_source(graph, name)
        if source is None:
            raise Refused(f"{what} reads {name!r} ({role}), which is not dequantized from an "
                          f"integer tensor; quantize the model in QDQ form")
        _int8_operand(graph, source[0], role)
        sources.append(source)
    (xq, qx), (wq, qw) = sources
    per_tensor(xq, qx)
    removed, cur = [node], node.outputs[0]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    conv_b = bias is not None and node.op == "Conv"
    add = next_node(graph, cur) if bias is None else None
    if add is not None and add.op == "Add":
        other = add.inputs[1] if add.inputs[0] == cur else add.inputs[0]
        if _is_constant_bias(graph, other):
            bias, cur = other, add.outputs[0]
            removed.append(add)
    tail = match_tail(graph, cur)
    edit = Edit(graph)
    edit.drop(*removed, *(tail.nodes if tail else ()))
    _annotate(edit, xq, qx)
    _annotate(edit, wq, qw)
    base = node.name
    out_shape = graph.tensors[node.outputs[0]].shape
    try:
        if node.op == "Conv":
            if qw.per_channel and qw.axis != 0:
                raise Refused(f"{what}'s weights are quantized along axis {qw.axis}, not per "
                              f"output channel (axis 0)")
            axis = 1
            attrs = _conv_attrs(node, graph.tensors[xq].shape, graph.tensors[wq].shape)
            acc_scale = qx.scale[0] * np.array(qw.scale, np.float64)
            acc = edit.node(f"{base}/qconv2d", "qconv2d", [xq, wq],
                            quant=_acc_quant(acc_scale, axis), **attrs)
        else:
            axis = len(out_shape) - 1
            if node.op == "Gemm" and node.attr("transB", 0):
                moved = None if not qw.per_channel else 1 - qw.axis
                wq = edit.node(f"{base}/transpose_b", "transpose", [wq], perm=(1, 0),
                               quant=Quant(qw.scale, qw.zero_point, moved))
                qw = edit.tensors[wq].quant
            rank = len(edit.tensors[wq].shape)
            if qw.per_channel and qw.axis != rank - 1:
                raise Refused(f"{what}'s weights are quantized along axis {qw.axis}, not per "
                              f"output column (the last axis)")
            acc_scale = qx.scale[0] * np.array(qw.scale, np.float64)
            acc = edit.node(f"{base}/qmatmul", "qmatmul", [xq, wq],
                            quant=_acc_quant(acc_scale, axis))
        if bias is not None:
            b = _bias(edit, graph, base, bias, acc_scale, out_shape, axis, conv_b)
            acc = edit.node(f"{base}/bias_add", "bias_add", [acc, b], axis=axis,
                            quant=edit.tensors[acc].quant)
        if tail is None:
            edit.node(f"{base}/dequantize", "dequantize", [acc], output=cur)
        else:
            _annotate(edit, tail.output, tail.quant)
            requant_epilogue(edit, base, acc, acc_scale, axis, tail)
        return edit.apply()
    except GraphError as exc:
        raise Refused(str(exc)) from None


# -- QOperator ----------------------------------------------------------------------------


def _zero_point_only(edit: Edit, graph: Graph, tensor: str, zp: str, axis: int) -> None:
    """Record a MatMulInteger/ConvInteger zero point on ``tensor`` (unit scale if unquantized)."""
    z = const(graph, zp) if zp else np.zeros((), np.int64)
    if z is None:
        raise Refused(f"the zero point of {tensor!r} is not a constant initializer")
    z = z.ravel()
    have = edit.tensors[tensor].quant
    if have is not None:
        if have.zero_point != tuple(int(v) for v in z) and not (
                z.size > 1 and len(set(z.tolist())) == 1 and have.zero_point == (int(z[0]),)):
            raise Refused(f"{tensor!r} has zero point {list(have.zero_point)} but the node "
                          f"gives {z.tolist()}")
        return
    if z.size == 1 or len(set(z.tolist())) == 1:
        edit.annotate(tensor, Quant(1.0, int(z[0])))
    else:
        edit.annotate(tensor, Quant(np.ones(z.size), z, axis))


def fold_qoperator(graph: Graph, node: Node) -> Graph:
    """Rewrite QLinearMatMul, QLinearConv, MatMulInteger or ConvInteger into integer ops."""
    i = node.inputs + ("",) * 9
    edit = Edit(graph)
    edit.drop(node)
    base, y = node.name, node.outputs[0]
    try:
        if node.op in ("MatMulInteger", "ConvInteger"):
            conv = node.op == "ConvInteger"
            rank_a = len(graph.tensors[i[0]].shape)
            _zero_point_only(edit, graph, i[0], i[2], 1 if conv else rank_a - 2)
            if edit.tensors[i[0]].quant.per_channel:
                raise Refused(f"{node.op} {node.name!r} has a per-row zero point for "
                              f"{i[0]!r}; the array subtracts one zero point per tensor")
            _zero_point_only(edit, graph, i[1], i[3],
                             0 if conv else len(graph.tensors[i[1]].shape) - 1)
            if conv:
                attrs = _conv_attrs(node, graph.tensors[i[0]].shape, graph.tensors[i[1]].shape)
                edit.node(f"{base}/qconv2d", "qconv2d", [i[0], i[1]], output=y, **attrs)
            else:
                edit.node(f"{base}/qmatmul", "qmatmul", [i[0], i[1]], output=y)
            return edit.apply()
        conv = node.op == "QLinearConv"
        x, w = (i[0], i[3])
        qx = per_tensor(x, quant_from(graph, x, i[1], i[2], 1 if conv else -1))
        qw = quant_from(graph, w, i[4], i[5], 0 if conv else -1)
        qy = per_tensor(y, quant_from(graph, y, i[6], i[7], 1))
        for name, quant in ((x, qx), (w, qw), (y, qy)):
            _annotate(edit, name, quant)
        acc_scale = qx.scale[0] * np.array(qw.scale, np.float64)
        out_shape = graph.tensors[y].shape
        axis = 1 if conv else len(out_shape) - 1
        if conv:
            attrs = _conv_attrs(node, graph.tensors[x].shape, graph.tensors[w].shape)
            acc = edit.node(f"{base}/qconv2d", "qconv2d", [x, w],
                            quant=_acc_quant(acc_scale, axis), **attrs)
            if i[8]:
                acc = edit.node(f"{base}/bias_add", "bias_add", [acc, i[8]], axis=1,
                                quant=edit.tensors[acc].quant)
        else:
            acc = edit.node(f"{base}/qmatmul", "qmatmul", [x, w],
                            quant=_acc_quant(acc_scale, axis))
        tail = Tail((), y, qy, graph.tensors[y].dtype, None)
        requant_epilogue(edit, base, acc, acc_scale, axis, tail)
        return edit.apply()
    except GraphError as exc:
        raise Refused(f"{node.op} {node.name!r}: {exc}") from None

