"""Batch normalization of a quantized tensor, as a per-channel affine on the accelerator.

A BatchNormalization read straight from a convolution (``DQ(x) -> Conv(DQ(w)) ->
BatchNormalization``, the convolution read by nothing else: a model quantized without
``quant_pre_process``'s fusions) folds into it: the weights' per-channel scale times
``|a_c|`` and the bias ``B_c a_c + b_c`` (:func:`_fold_into_conv`), exact up to the rounding of
a float bias to accumulator units that Q/DQ folding does for any convolution.

``quant_pre_process`` folds those itself; one that follows anything else (DenseNet's, after
each Concat) stays, and a QDQ model computes it in float: ``DQ(x) -> BatchNormalization
[-> Relu | Clip] -> Q``. Per channel ``c`` it is an affine map, ``y = a_c * x + b_c`` with
``a_c = scale_c / sqrt(var_c + epsilon)`` and ``b_c = B_c - a_c * mean_c``. This pass
writes it as the depthwise 1x1 convolution that computes the same map, in QDQ form, and Q/DQ
folding (:mod:`fusion.passes.qdq_fold`) lowers that as it lowers any convolution: a
per-channel int8 weight ``w_c`` with scale ``|a_c| / |w_c|``, an int32 bias in accumulator
units, and the per-channel requantize to the output's scale.

Exact on every input code, or left to the host. An 8-bit input has 256 codes, so the pass
computes the exact table of ``Q(BatchNormalization(DQ(code)))`` per channel, as ONNX's
reference does (:func:`fusion.reference.onnx_host_ops.batch_normalization`), and looks for
integer parameters that reproduce all of it: ``|w_c|`` from 127 down to 64 with the weight
scale ``|a_c| / |w_c|``, the bias within :data:`SEARCH` accumulator units of the nearest.
The bias resolves the affine's offset only to ``1 / |w_c|`` of an input step, about
``M_c / 127**2`` output LSBs (``M_c = s_x |a_c| / s_y``), so a code whose value lies nearer a
rounding half than that may come out one LSB off; and one LSB there grows, layer after
layer, into several at a deep model's output (in the full DenseNet-121 of
``examples/build_zoo_models.py``, taking such parameters in the 148 of 34,336 channels
(0.43%) with such a code put the logits 5 LSB from the exact reference). Such a channel's
search goes on with the slope free as well (:func:`_free_slope`): the table bounds the
requantize multiplier to an interval for each weight and bias, and a float32 weight scale
whose folded multiplier lies in it reproduces the table (in that DenseNet-121, 146 channels
take one, 7.5e-6 to 4.2e-3 of it away from ``|a_c| / |w_c|``, median 6.3e-5). That leaves 2
channels of 34,336 (codes 5e-5 and 8e-4 LSB from a half) without exact parameters. A
BatchNormalization runs on the accelerator only where every channel is exact; otherwise the
host computes it, as it does one whose input is not dequantized from 8 bits, whose output is
not quantized, whose parameters are not constants, or whose input is not 4-D.
"""

from __future__ import annotations

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each
from fusion.passes._qdq_common import (
    Refused,
    Tail,
    dq_source,
    match_tail,
    multiplier_range,
    next_node,
)
from fusion.reference.hwgen_ops import requant
from fusion.reference.onnx_host_ops import batch_normalization

#: The largest weight magnitude: the largest int8 whose negation is an int8 too.
WEIGHT = 127
#: How far from the nearest bias (in accumulator units) the search for an exact one goes,
#: with the weight scale as the gain gives it, and with it moved (:func:`_free_slope`).
SEARCH = 4
FREE_SEARCH = 16


def _value(graph: Graph, name: str) -> np.ndarray | None:
    """A constant's value: an initializer as it is (float32), or the DequantizeLinear of one
    in float64 (how onnxruntime quantizes BatchNormalization's scale and bias, and what the
    whole-model check's float64 DequantizeLinear gives)."""
    if name in graph.initializers:
        return np.asarray(graph.initializers[name])
    node = graph.producer(name)
    if node is not None and node.op == "dequantize" and node.inputs[0] in graph.initializers:
        quant = graph.tensors[node.inputs[0]].quant  # after Q/DQ folding lowered it
        if quant is None or quant.per_channel:
            return None
        q = graph.initializers[node.inputs[0]].astype(np.float64)
        return (q - quant.zero_point[0]) * np.float64(quant.scale[0])
    if node is None or node.op != "DequantizeLinear":
        return None
    inputs = node.inputs + ("",) * 2
    q = graph.initializers.get(inputs[0])
    scale = graph.initializers.get(inputs[1])
    zp = graph.initializers.get(inputs[2]) if inputs[2] else np.zeros(1, np.int64)
    if q is None or scale is None or zp is None or node.attr("block_size", 0):
        return None
    if scale.size > 1 and q.ndim != 1:
        return None  # per-axis on a parameter that is not a vector: not BN's
    return (q.astype(np.float64) - zp.astype(np.float64)) * scale.astype(np.float64)


def affine(graph: Graph, node: Node) -> tuple[np.ndarray, ...] | None:
    """BatchNormalization ``node``'s constant parameters ``(scale, B, mean, var)``, None if
    any is not a constant."""
    values = [_value(graph, name) for name in node.inputs[1:5]]
    if any(v is None for v in values):
        return None
    return tuple(v.reshape(-1) for v in values)


def gain_offset(params: tuple[np.ndarray, ...], epsilon: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)`` of the per-channel map ``a * x + b`` of parameters ``(scale, B, mean,
    var)``, in float64."""
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    a = scale / np.sqrt(var + epsilon)
    return a, bias - a * mean


def exact_table(x: np.ndarray, params: tuple[np.ndarray, ...], epsilon: float, s_y: float,
                zp_y: int, dtype: str) -> np.ndarray:
    """``Q(BatchNormalization(x))`` for float64 ``x`` of shape ``(values, channels)``, by
    :func:`fusion.reference.onnx_host_ops.batch_normalization`."""
    y = batch_normalization(x, *params, epsilon)
    lo, hi = ops.INT_RANGE[dtype]
    return np.clip(np.rint(y / s_y) + zp_y, lo, hi).astype(np.int64)


def _parameters(a: float, b: float, s_x: float, table: np.ndarray, codes: np.ndarray,
                tail: Tail) -> tuple[int, np.float32, int] | None:
    """``(weight, weight scale, int32 bias)`` of one channel's integer affine that gives
    ``table`` on every code (``codes``: the input's values less its zero point), None if
    none does.

    First the weight scale ``|a| / |w|`` (float32) for ``|w|`` from 127 down to 64, with a
    bias within :data:`SEARCH` of the nearest; then, where none of those is exact, each such
    weight and bias with the weight scale moved to a slope the table allows
    (:func:`_free_slope`)."""
    if not a:
        # a zeroed channel's weight is 0 and its scale free: 1/127 gives its bias (all its
        # output) the accumulator units a weight of 127 would have at a = 1
        return _search(a, b, s_x, table, codes, tail, 0, free=False)
    for free in (False, True):
        for magnitude in range(WEIGHT, 63, -1):
            found = _search(a, b, s_x, table, codes, tail, magnitude, free=free)
            if found is not None:
                return found
    return None


def _search(a: float, b: float, s_x: float, table: np.ndarray, codes: np.ndarray, tail: Tail,
            magnitude: int, *, free: bool) -> tuple[int, np.float32, int] | None:
    """The parameters of weight ``magnitude`` (:func:`_parameters`), or None."""
    sign = -1 if a < 0 else 1
    w_scale = np.float32(abs(a) / magnitude) if a else np.float32(1 / WEIGHT)
    if w_scale == 0 or not np.isfinite(w_scale):
        return None
    attrs = _fold_attrs(s_x, w_scale, tail)
    if attrs is None:
        return None
    nearest = b / (s_x * np.float64(w_scale))
    if not abs(nearest) < 2**31 - 2**16:
        return None
    reach = FREE_SEARCH if free else SEARCH
    steps = np.array([0] + [k for j in range(1, reach + 1) for k in (j, -j)], np.int64)
    biases = int(np.rint(nearest)) + steps  # nearest first
    acc = (sign * magnitude * codes)[:, None] + biases[None, :]
    if not free:
        exact = np.flatnonzero(_exact(acc, attrs, table, tail))
        return (sign * magnitude, w_scale, int(biases[exact[0]])) if exact.size else None
    for k, bias in enumerate(biases.tolist()):
        moved = _free_slope(acc[:, k], table, attrs, s_x, tail)
        if moved is not None:
            return sign * magnitude, moved, bias
    return None


def _fold_attrs(s_x: float, w_scale: np.float32, tail: Tail) -> dict | None:
    """The requantize Q/DQ folding gives a weight scale ``w_scale`` (None if none can)."""
    try:
        return ops.requant_attrs(s_x * np.float64(w_scale) / float(tail.quant.scale[0]),
                                 tail.quant.zero_point[0], out_dtype=tail.dtype,
                                 round_even=True)
    except ValueError:
        return None


def _exact(acc: np.ndarray, attrs: dict, table: np.ndarray, tail: Tail) -> np.ndarray:
    """Per column of accumulators ``acc`` (codes x candidates): whether it gives ``table``."""
    lo, hi = tail.clamp if tail.clamp is not None else ops.INT_RANGE[tail.dtype]
    got = requant(acc, attrs["mult"], attrs["shift"], attrs["zp"], tail.dtype,
                  round_even=True).astype(np.int64)
    return (np.clip(got, lo, hi) == table.reshape(len(table), -1)).all(axis=0)


def _free_slope(acc: np.ndarray, table: np.ndarray, attrs: dict, s_x: float, tail: Tail
                ) -> np.float32 | None:
    """A float32 weight scale whose folded multiplier gives ``table`` from the accumulators
    ``acc`` (one per code), or None.

    The table bounds the multiplier at the shift of ``attrs`` (:func:`fusion.passes.
    _qdq_common.multiplier_range`); in that interval, tens of thousands of units wide where
    one exists, the weight scales nearest its middle (a float32 step moves the multiplier by
    about 2**7) are folded as Q/DQ folding will, and checked on every code. The slope moves
    away from ``|a|``, by 1e-5 to 1e-3 of it: slope and bias together place the codes on the
    table's side of each rounding half, which a bias alone (``1/|w|`` of an input step) cannot."""
    shift = attrs["shift"]
    bounds = tail.clamp if tail.clamp is not None else ops.INT_RANGE[tail.dtype]
    found = multiplier_range(acc, table, attrs["zp"], bounds, shift)
    if found is None:
        return None
    low, high = found
    s_y = float(tail.quant.scale[0])
    start = np.float32((low + high) / 2 * 2.0**-shift * s_y / s_x)
    for k in (0, 1, -1, 2, -2, 3, -3):
        w_scale = start
        for _ in range(abs(k)):
            w_scale = np.nextafter(w_scale, np.float32(np.inf if k > 0 else -np.inf))
        moved = _fold_attrs(s_x, w_scale, tail)
        if moved is not None and moved["shift"] == shift and _exact(acc[:, None], moved,
                                                                     table, tail)[0]:
            return w_scale
    return None


def _fold_into_conv(graph: Graph, node: Node) -> Graph | None:
    """``DQ(x) -> Conv(DQ(w), B) -> BatchNormalization``, the convolution read by nothing
    else, as one convolution: per output channel, the weights' scale times ``|a_c|`` (the
    int8 weights negated where ``a_c < 0``, zeroed where it is 0) and the bias
    ``B_c * a_c + b_c``. Q/DQ folding then gives the convolution's requantize the channel's
    multiplier and rounds the bias to accumulator units, as for any float bias."""
    conv = graph.producer(node.inputs[0])
    if conv is None or conv.op != "Conv" or next_node(graph, conv.outputs[0]) is not node:
        return None
    params = affine(graph, node)
    weight = graph.producer(conv.inputs[1])
    if params is None or weight is None or weight.op != "DequantizeLinear" or \
            weight.attr("block_size", 0):
        return None
    w_inputs = weight.inputs + ("",) * 2
    wq, w_scale = graph.initializers.get(w_inputs[0]), graph.initializers.get(w_inputs[1])
    w_zp = graph.initializers.get(w_inputs[2]) if w_inputs[2] else None
    if wq is None or w_scale is None or wq.dtype != np.int8 or \
            (w_zp is not None and np.any(w_zp)) or (w_scale.size > 1 and weight.attr("axis", 1)):
        return None
    bias = np.zeros(wq.shape[0]) if len(conv.inputs) < 3 or not conv.inputs[2] else \
        _value(graph, conv.inputs[2])
    if bias is None:
        return None
    a, b = gain_offset(params, float(node.attr("epsilon", 1e-5)))
    sign = np.sign(a).reshape(-1, *([1] * (wq.ndim - 1)))
    if np.any((wq == -128) & (sign < 0)):
        return None  # -(-128) is no int8
    new_scale = np.broadcast_to(w_scale.astype(np.float64).reshape(-1), a.shape) * np.abs(a)
    new_scale = np.where(a == 0, np.broadcast_to(w_scale.reshape(-1), a.shape), new_scale)
    if np.any(new_scale.astype(np.float32) <= 0) or not np.all(np.isfinite(new_scale)):
        return None
    edit = Edit(graph)
    edit.drop(node, conv)
    base = node.name
    w = edit.node(f"{base}/folded_weight", "DequantizeLinear",
                  [edit.const(f"{base}/folded_weight_q", (wq * sign).astype(np.int8)),
                   edit.const(f"{base}/folded_weight_scale", new_scale.astype(np.float32))],
                  axis=0)
    new_bias = edit.const(f"{base}/folded_bias",
                          (bias.astype(np.float64).reshape(-1) * a + b).astype(np.float32))
    attrs = dict(conv.attrs)
    edit.node(f"{base}/folded", "Conv", [conv.inputs[0], w, new_bias], output=node.outputs[0],
              **attrs)
    return edit.apply()


def _affine_parameters(graph: Graph, node: Node) -> tuple[str, float, list] | str:
    """``(x, s_x, per-channel parameters)`` of BatchNormalization ``node``'s exact affine, or
    why it has none."""
    x = node.inputs[0]
    xt, yt = graph.tensors[x], graph.tensors[node.outputs[0]]
    if node.op == "batchnorm" and xt.dtype != "float32":
        # hwgen's batchnorm on 8-bit tensors asks only why (fusion.passes.host_quantized): it
        # dequantizes x and quantizes y itself
        source = (x, xt.quant) if xt.quant is not None else None
        tail = Tail((), yt.name, yt.quant, yt.dtype, None) if yt.quant is not None else None
    else:
        try:
            source = dq_source(graph, x)
            tail = match_tail(graph, node.outputs[0])
        except Refused as exc:
            return str(exc)
    if source is None or graph.tensors[source[0]].dtype not in ("int8", "uint8"):
        return "its input is not dequantized from an 8-bit tensor"
    if tail is None:
        return "its output is not quantized (QuantizeLinear)"
    # (hwgen's batchnorm, on a GEMM's rows, asks only why: fusion.passes.host_rows)
    if node.op == "BatchNormalization" and len(graph.tensors[x].shape) != 4:
        return f"its input is {len(graph.tensors[x].shape)}-D; the affine is a 4-D convolution"
    params = affine(graph, node)
    if params is None:
        return "its scale, bias, mean or variance is not a constant"
    xq, qx = source
    if qx.per_channel or tail.quant.per_channel:
        return "its input or output is quantized per channel"
    lo, hi = ops.INT_RANGE[graph.tensors[xq].dtype]
    codes = np.arange(lo, hi + 1, dtype=np.int64) - int(qx.zero_point[0])
    s_x, s_y = float(qx.scale[0]), float(tail.quant.scale[0])
    epsilon = float(node.attr("epsilon", 1e-5))
    table = exact_table((codes * s_x)[:, None], params, epsilon, s_y,
                        int(tail.quant.zero_point[0]), tail.dtype)
    if tail.clamp is not None:
        table = np.clip(table, *tail.clamp)
    a, b = gain_offset(params, epsilon)  # the weights' start: the table decides
    found = []
    for c in range(a.size):
        f = _parameters(float(a[c]), float(b[c]), s_x, table[:, c], codes, tail)
        if f is None:
            value = (a[c] * s_x * codes + b[c]) / s_y
            near = float(np.min(np.abs(value - np.floor(value) - 0.5)))
            return (f"no int8 weight reproduces channel {c} on every input code: one lies "
                    f"{near:.2g} output LSB from a rounding half, nearer than the weights, "
                    f"biases and slopes searched resolve (one LSB there grows with depth); the "
                    f"host computes it exactly")
        found.append(f)
    return x, s_x, found


def why_host(graph: Graph, node: Node) -> str | None:
    """Why BatchNormalization ``node`` (or hwgen's ``batchnorm`` it became on a GEMM's rows),
    left by the pass, stays a float host op (None if the affine has exact parameters after
    all)."""
    found = _affine_parameters(graph, node)
    return found if isinstance(found, str) else None


def _rewrite(graph: Graph, node: Node) -> Graph | None:
    if node.op != "BatchNormalization":
        return None
    folded = _fold_into_conv(graph, node)
    if folded is not None:
        return folded
    found = _affine_parameters(graph, node)
    if isinstance(found, str):
        return None  # the host computes it, as the model says (why_host says why)
    x, s_x, found = found
    weights, w_scales, biases = (np.array(v) for v in zip(*found, strict=True))
    channels = len(found)
    edit = Edit(graph)
    edit.drop(node)
    base = node.name
    w = edit.node(f"{base}/weight", "DequantizeLinear",
                  [edit.const(f"{base}/weight_q", weights.astype(np.int8).reshape(-1, 1, 1, 1)),
                   edit.const(f"{base}/weight_scale", w_scales.astype(np.float32)),
                   edit.const(f"{base}/weight_zero_point", np.zeros(channels, np.int8))],
                  axis=0)
    acc_scale = (s_x * w_scales.astype(np.float64)).astype(np.float32)
    bias_q = edit.node(f"{base}/bias", "DequantizeLinear",
                       [edit.const(f"{base}/bias_q", biases.astype(np.int32)),
                        edit.const(f"{base}/bias_scale", acc_scale),
                        edit.const(f"{base}/bias_zero_point", np.zeros(channels, np.int32))],
                       axis=0)
    edit.node(f"{base}/affine", "Conv", [x, w, bias_q], output=node.outputs[0],
              group=channels, kernel_shape=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0),
              dilations=(1, 1))
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Rewrite every quantized BatchNormalization the module docstring describes.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, _rewrite)
