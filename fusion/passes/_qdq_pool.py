"""Average pools of the Q/DQ fold: an integer window sum and one requantize.

``DQ -> AveragePool | GlobalAveragePool -> Q`` and ``QLinear(Global)AveragePool`` sum their
windows in integers (padding reads x's zero point, so it adds 0) and requantize by
``x_scale / (divisor * y_scale)``, rounding half to even as QuantizeLinear does. How the
windows are summed depends on the divisor:

- the same for every window (``count_include_pad`` = 1, or no padding, and no ``ceil_mode``
  overhang): a depthwise ``qconv2d`` with all-ones weights, or for a window over the whole
  plane (a global pool) one GEMM over the spatial axis (:func:`_global_sum`);
- varying at the borders (``count_include_pad`` = 0 with padding, or ``ceil_mode`` windows
  that hang over: ShuffleNet's 3x3 stride-2 pools): one GEMM of the ``[N*C, H*W]`` view of x
  against the 0/1 pooling matrix ``[H*W, OH*OW]`` (input position in output window), whose
  output columns are the windows, so the per-column requantize of the GEMM's epilogue gives
  each window its own divisor (:func:`_matrix_sum`). It does ``H*W / window`` times the
  additions of a window sum, so it is taken only while the matrix stays small
  (:data:`MATRIX_BYTES`); a larger pool stays on the host, saying why.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fusion.ir import ops, shapes
from fusion.ir.graph import Graph, GraphError, Node, Quant
from fusion.ir.windows import window_sums, windows
from fusion.passes._edit import Edit
from fusion.passes._qdq_common import (
    Refused,
    Tail,
    dq_source,
    exact_multiplier,
    match_tail,
    per_tensor,
    quant_from,
    requant_epilogue,
    window_pads,
)
from fusion.passes._qdq_compute import INT8S

#: The largest pooling matrix (``H*W x OH*OW`` int8 bytes) of a pool whose divisor varies:
#: 256 KiB holds ShuffleNet's 16x16 -> 8x8 pool (16 KiB) with room; a 56x56 -> 28x28 one
#: would take 9.8 MB of weights and 196 times the additions of its window sums.
MATRIX_BYTES = 1 << 18


def fold_pool(graph: Graph, node: Node) -> Graph | None:
    """An average pool as a window sum and one requantize (see the module docstring). None
    for a float pool."""
    i = node.inputs + ("",) * 5
    if node.op.startswith("QLinear"):
        x, y = i[0], node.outputs[0]
        qx = quant_from(graph, x, i[1], i[2], 1)
        tail = Tail((), y, quant_from(graph, y, i[3], i[4], 1), graph.tensors[y].dtype, None)
    else:
        source = dq_source(graph, i[0])
        if source is None:
            return None
        x, qx = source
        tail = match_tail(graph, node.outputs[0])
        if tail is None:
            raise Refused(f"{node.op} {node.name!r} is not followed by a QuantizeLinear; the "
                          f"integer pool produces an 8-bit result")
    per_tensor(x, qx)
    if graph.tensors[x].dtype not in INT8S:
        raise Refused(f"{node.op} {node.name!r} pools {x!r}, which is "
                      f"{graph.tensors[x].dtype}; the integer pool takes 8-bit tensors")
    x_shape = graph.tensors[x].shape
    window = average_window(node, x_shape)
    edit = Edit(graph)
    edit.drop(node, *tail.nodes)
    for name, quant in ((x, qx), (tail.output, per_tensor(tail.output, tail.quant))):
        why = edit.annotate(name, quant)
        if why:
            raise Refused(why)
    try:
        if window["varies"]:
            _matrix_sum(edit, node, x, qx, x_shape, window, tail, graph.tensors[x].dtype)
            return edit.apply()
        acc_scale = np.array([qx.scale[0] / math.prod(window["kernel"])], np.float64)
        if window["kernel"] == tuple(x_shape[2:]) and not any(window["pads"]):
            _global_sum(edit, node.name, x, qx, x_shape, acc_scale, tail)
            return edit.apply()
        channels = x_shape[1]
        ones = edit.const(f"{node.name}/ones",
                          np.ones((channels, 1, *window["kernel"]), np.int8), quant=Quant(1.0, 0))
        acc = edit.node(f"{node.name}/qconv2d", "qconv2d", [x, ones], group=channels,
                        quant=Quant(float(acc_scale[0]), 0), strides=window["strides"],
                        dilations=window["dilations"], pads=window["pads"])
        requant_epilogue(edit, node.name, acc, acc_scale, 1, tail)
    except GraphError as exc:
        raise Refused(f"{node.op} {node.name!r}: {exc}") from None
    return edit.apply()


def average_window(node: Node, x_shape: tuple[int, ...]) -> dict:
    """The window of an average pool (kernel, strides, dilations, pads, ``ceil_mode``,
    ``count_include_pad``) and whether its divisor ``varies`` at the borders
    (``count_include_pad`` = 0 with padding, or a ``ceil_mode`` window that hangs over).

    Raises
    ------
    Refused
        For a pool that is not 2-D.
    """
    what = f"{node.op} {node.name!r}"
    if len(x_shape) != 4:
        raise Refused(f"{what} pools a {len(x_shape)}-D tensor; the accelerator pools 4-D "
                      f"NCHW tensors")
    if node.op.endswith("GlobalAveragePool"):
        return {"kernel": tuple(x_shape[2:]), "strides": (1, 1), "dilations": (1, 1),
                "pads": (0, 0, 0, 0), "ceil_mode": 0, "count_include_pad": 1, "varies": False}
    kernel = tuple(node.attr("kernel_shape"))
    strides = tuple(node.attr("strides") or (1, 1))
    dilations = tuple(node.attr("dilations") or (1, 1))
    pads = window_pads(node, x_shape, kernel)
    ceil_mode, include = node.attr("ceil_mode", 0), node.attr("count_include_pad", 0)
    floor, _, _ = shapes.window(x_shape[2:], kernel, strides, dilations, pads)
    ceil, _, _ = shapes.window(x_shape[2:], kernel, strides, dilations, pads, "NOTSET",
                               ceil_mode)
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads,
            "ceil_mode": ceil_mode, "count_include_pad": include,
            "varies": bool(any(pads) and not include) or floor != ceil}


def pool_matrix(spatial: tuple[int, int], window: dict) -> tuple[np.ndarray, np.ndarray]:
    """The 0/1 pooling matrix ``[H*W, OH*OW]`` of ``window`` over a ``spatial`` plane (row q,
    column p: input position q lies in output window p) and each window's divisor, int64
    ``[OH*OW]``, as ONNX AveragePool counts it (:func:`fusion.ir.windows.window_sums`)."""
    h, w = spatial
    index = np.arange(1, h * w + 1, dtype=np.int64).reshape(1, 1, h, w)  # 0: padding
    args = (window["kernel"], window["strides"], window["dilations"], window["pads"])
    cols = windows(index, *args, 0, "NOTSET", window["ceil_mode"])  # [1, 1, kh, kw, OH, OW]
    oh, ow = cols.shape[-2:]
    cols = cols.reshape(-1, oh * ow)
    matrix = np.zeros((h * w, oh * ow), np.int8)
    k, p = np.nonzero(cols)
    matrix[cols[k, p] - 1, p] = 1
    _, counts = window_sums(np.zeros((1, 1, h, w), np.int64), *args, "NOTSET",
                            window["ceil_mode"], window["count_include_pad"], np.int64)
    return matrix, counts.reshape(-1)


def _matrix_sum(edit: Edit, node: Node, x: str, qx: Quant, x_shape: tuple[int, ...],
                window: dict, tail: Tail, x_dtype: str) -> None:
    """``y = requant(reshape(x, [N*C, H*W]) @ P)`` with the pooling matrix ``P`` and one
    requantize scale per column, ``x_scale / divisor``, reshaped to ``[N, C, OH, OW]``."""
    n, c, h, w = x_shape
    out, _, _ = shapes.window((h, w), window["kernel"], window["strides"], window["dilations"],
                              window["pads"], "NOTSET", window["ceil_mode"])
    size = h * w * math.prod(out)
    if size > MATRIX_BYTES:
        raise Refused(f"{node.op} {node.name!r} divides by a count that varies at the borders "
                      f"(count_include_pad=0 with padding, or ceil_mode): as a GEMM its "
                      f"{h * w} x {math.prod(out)} pooling matrix would take {size:,} bytes, "
                      f"more than the {MATRIX_BYTES:,} allowed; export it with "
                      f"count_include_pad=1, or without padding")
    matrix, counts = pool_matrix((h, w), window)
    attrs = _exact_requant(node, x_dtype, qx, counts, tail)
    base = node.name
    rows = edit.node(f"{base}/rows", "reshape", [x], quant=qx, shape=(n * c, h * w))
    pool = edit.const(f"{base}/windows", matrix, quant=Quant(1.0, 0))
    acc_scale = qx.scale[0] / counts.astype(np.float64)
    acc = edit.node(f"{base}/qmatmul", "qmatmul", [rows, pool],
                    quant=Quant(tuple(acc_scale.tolist()), (0,) * acc_scale.size, 1))
    pooled = dataclasses.replace(tail, output=f"{base}/pooled")
    requant_epilogue(edit, base, acc, acc_scale, -1, pooled, attrs)
    edit.node(f"{base}/reshape", "reshape", [pooled.output], output=tail.output,
              quant=tail.quant, shape=(n, c, *out))


def _exact_requant(node: Node, x_dtype: str, qx: Quant, counts: np.ndarray,
                   tail: Tail) -> dict:
    """The per-window requantize of the window sums, exact on every sum a window of each
    divisor can have: the quotient as ONNX defines it (the sum of the dequantized inputs,
    exact in float64, over the divisor, over the output scale, rounded half to even,
    saturated), reproduced by one multiplier per divisor
    (:func:`fusion.passes._qdq_common.exact_multiplier`)."""
    lo, hi = ops.INT_RANGE[x_dtype]
    x_zp, x_scale = int(qx.zero_point[0]), np.float64(qx.scale[0])
    y_zp, y_scale = int(tail.quant.zero_point[0]), np.float64(tail.quant.scale[0])
    found = {}
    for count in sorted({int(c) for c in counts}):
        sums = np.arange(count * (lo - x_zp), count * (hi - x_zp) + 1, dtype=np.int64)
        want = np.clip(np.rint(sums.astype(np.float64) * x_scale / count / y_scale) + y_zp,
                       *ops.INT_RANGE[tail.dtype]).astype(np.int64)
        pair = exact_multiplier(sums, want, float(x_scale / (count * y_scale)), y_zp,
                                tail.dtype)
        if pair is None:
            raise Refused(f"{node.op} {node.name!r} divides some windows by {count}: no "
                          f"requantize multiplier gives the quotient's rounding on every "
                          f"window sum (exact halves at these scales, which round to even); "
                          f"it stays on the host")
        found[count] = pair
    return {"mult": tuple(found[int(c)][0] for c in counts),
            "shift": tuple(found[int(c)][1] for c in counts), "zp": y_zp,
            "out_dtype": tail.dtype, "axis": -1, "round_even": 1}


def _global_sum(edit: Edit, base: str, x: str, qx: Quant, x_shape: tuple[int, ...],
                acc_scale: np.ndarray, tail: Tail) -> None:
    """``y = requant(reshape(x, [N*C, H*W]) @ ones[H*W, 1])`` reshaped to ``[N, C, 1, 1]``:
    a global window sum as one GEMM with K = H*W. As a depthwise conv it was a GEMM with
    K = C*H*W against a block-diagonal weight, C times the work, whose weight (C*C*H*W bytes,
    256 KiB for ResNet-8's pool) dominated its cycles."""
    n, c, h, w = x_shape
    rows = edit.node(f"{base}/rows", "reshape", [x], quant=qx, shape=(n * c, h * w))
    ones = edit.const(f"{base}/ones", np.ones((h * w, 1), np.int8), quant=Quant(1.0, 0))
    acc = edit.node(f"{base}/qmatmul", "qmatmul", [rows, ones],
                    quant=Quant(float(acc_scale[0]), 0))
    pooled = dataclasses.replace(tail, output=f"{base}/pooled")
    requant_epilogue(edit, base, acc, acc_scale, -1, pooled)
    edit.node(f"{base}/reshape", "reshape", [pooled.output], output=tail.output,
              quant=tail.quant, shape=(n, c, 1, 1))
