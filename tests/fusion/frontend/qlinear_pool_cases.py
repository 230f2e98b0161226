"""Node-level models of onnxruntime's quantized ops and the pools, run by onnxruntime and hwgen.

Each case builder returns ``(model, feeds)``: a one- or two-node model (opset 21 plus
``com.microsoft`` version 1) with random integer inputs. :func:`exact_run` runs it in the exact
reference (``examples/exact_reference.py``), :func:`ort_run` in onnxruntime (CPU, graph
optimizations off, so that onnxruntime runs exactly these nodes; not exact on every CPU where
a node sums integer products: ``tests/fusion/references.py``);
:func:`hwgen_run` imports it and runs hwgen's executor, optionally after the passes.
:func:`lsb_diff` measures the disagreement of integer outputs.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from examples.exact_reference import reference_session
from fusion.frontend import import_onnx
from fusion.passes.driver import optimize
from fusion.reference import executor
from tests.fusion.references import as_written

MS = "com.microsoft"
_TYPES = {np.dtype("int8"): TensorProto.INT8, np.dtype("uint8"): TensorProto.UINT8,
          np.dtype("float32"): TensorProto.FLOAT}


def build(nodes, feeds: dict, inits: dict, out_type=TensorProto.INT8) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info(k, _TYPES[v.dtype], v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid(MS, 1)])


def exact_run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return reference_session(model).run(None, feeds)[0]


def ort_run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return as_written(model).run(None, feeds)[0]


def hwgen_run(model: onnx.ModelProto, feeds: dict, *, fold: bool = False):
    """``(output, graph)``: hwgen's executor on the imported (or folded) graph."""
    graph = import_onnx(model)
    if fold:
        graph = optimize(graph)
    return executor.run(graph, feeds)[graph.outputs[0]], graph


def lsb_diff(want: np.ndarray, got: np.ndarray) -> tuple[int, float]:
    """Largest integer difference and fraction of equal elements."""
    assert want.shape == got.shape, (want.shape, got.shape)
    d = np.abs(want.astype(np.int64) - got.astype(np.int64))
    return int(d.max()), float((d == 0).mean())


def _ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _qparams(dtype, xs, xz, ys, yz):
    t = np.dtype(dtype).type
    return {"xs": np.float32(xs), "xz": t(xz), "ys": np.float32(ys), "yz": t(yz)}


def qlinear_avgpool(seed=0, dtype="int8", shape=(1, 8, 9, 9), scales=(0.043, 0.031), **attrs):
    rng = np.random.default_rng(seed)
    inits = _qparams(dtype, scales[0], -3 if dtype == "int8" else 120, scales[1],
                     5 if dtype == "int8" else 131)
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS, **attrs)
    feeds = {"x": _ints(rng, shape, dtype)}
    return build([node], feeds, inits, _TYPES[np.dtype(dtype)]), feeds


def qlinear_global_avgpool(seed=0, dtype="int8", shape=(2, 16, 7, 5), scales=(0.043, 0.011)):
    rng = np.random.default_rng(seed)
    inits = _qparams(dtype, scales[0], -3 if dtype == "int8" else 120, scales[1],
                     5 if dtype == "int8" else 131)
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS)
    feeds = {"x": _ints(rng, shape, dtype)}
    return build([node], feeds, inits, _TYPES[np.dtype(dtype)]), feeds


def qdq_avgpool(seed=0, op="AveragePool", dtype="int8", shape=(1, 8, 9, 9), **attrs):
    """``DQ -> AveragePool | GlobalAveragePool -> Q`` on an integer input."""
    rng = np.random.default_rng(seed)
    inits = _qparams(dtype, 0.043, -3 if dtype == "int8" else 120, 0.029,
                     5 if dtype == "int8" else 131)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xd"]),
             helper.make_node(op, ["xd"], ["p"], **attrs),
             helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"])]
    feeds = {"x": _ints(rng, shape, dtype)}
    return build(nodes, feeds, inits, _TYPES[np.dtype(dtype)]), feeds


def qlinear_add(seed=0, dtype="int8", shape=(2, 6, 5, 5), b_shape=None,
                scales=(0.05, 0.025, 0.08)):
    rng = np.random.default_rng(seed)
    t = np.dtype(dtype).type
    inits = {"as": np.float32(scales[0]), "az": t(2 if dtype == "int8" else 128),
             "bs": np.float32(scales[1]), "bz": t(-7 if dtype == "int8" else 121),
             "cs": np.float32(scales[2]), "cz": t(1 if dtype == "int8" else 127)}
    node = helper.make_node("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"],
                            domain=MS)
    feeds = {"a": _ints(rng, shape, dtype), "b": _ints(rng, b_shape or shape, dtype)}
    return build([node], feeds, inits, _TYPES[np.dtype(dtype)]), feeds


def qdq_add(a_scale, b_scale, y_scale, zero_points, shape, dtype="int8"):
    """ONNX's float ``DequantizeLinear -> Add -> QuantizeLinear`` of inputs ``a`` and ``b``."""
    t = np.dtype(dtype).type
    za, zb, zy = (t(z) for z in zero_points)
    inits = {"as": np.float32(a_scale), "az": za, "bs": np.float32(b_scale), "bz": zb,
             "ys": np.float32(y_scale), "yz": zy}
    nodes = [helper.make_node("DequantizeLinear", ["a", "as", "az"], ["fa"]),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["fb"]),
             helper.make_node("Add", ["fa", "fb"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["y"])]
    feeds = {"a": np.zeros(shape, dtype), "b": np.zeros(shape, dtype)}
    return build(nodes, feeds, inits, _TYPES[np.dtype(dtype)])


def qgemm(seed=0, dtype="int8", m=7, k=20, n=9, per_channel=True, bias=True, quantized=True,
          **attrs):
    rng = np.random.default_rng(seed)
    t = np.dtype(dtype).type
    b_shape = (n, k) if attrs.get("transB") else (k, n)
    a_shape = (k, m) if attrs.get("transA") else (m, k)
    inits = {"as": np.float32(0.037), "az": t(4 if dtype == "int8" else 130),
             "b": _ints(rng, b_shape, "int8"),
             "bs": (rng.uniform(0.002, 0.01, n) if per_channel else np.array(0.006))
             .astype(np.float32),
             "bz": np.zeros(n if per_channel else (), np.int8)}
    inputs = ["a", "as", "az", "b", "bs", "bz", "c" if bias else ""]
    if bias:
        inits["c"] = rng.integers(-5000, 5000, n).astype(np.int32)
    out_type = TensorProto.FLOAT
    if quantized:
        inits.update({"ys": np.float32(0.09), "yz": t(-6 if dtype == "int8" else 122)})
        inputs += ["ys", "yz"]
        out_type = _TYPES[np.dtype(dtype)]
    node = helper.make_node("QGemm", inputs, ["y"], domain=MS, **attrs)
    feeds = {"a": _ints(rng, a_shape, dtype)}
    return build([node], feeds, inits, out_type), feeds


def int8_maxpool(seed=0, dtype="int8", shape=(1, 4, 9, 9), **attrs):
    """A QOperator-style MaxPool applied directly to an int8/uint8 tensor."""
    rng = np.random.default_rng(seed)
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    feeds = {"x": _ints(rng, shape, dtype)}
    return build([node], feeds, {}, _TYPES[np.dtype(dtype)]), feeds


def qoperator_chain(seed=0):
    """A QOperator-style chain of every op here: MaxPool of int8, QLinearAveragePool (padding
    counted), QLinearAdd of the two, QLinearGlobalAveragePool, Flatten, QGemm with a bias."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    inits = {"s0": f32(0.04), "z0": np.int8(-2), "s1": f32(0.03), "z1": np.int8(1),
             "s2": f32(0.06), "z2": np.int8(-4), "s3": f32(0.02), "z3": np.int8(3),
             "w": _ints(rng, (5, 8), "int8"), "ws": rng.uniform(0.003, 0.01, 5).astype(f32),
             "wz": np.zeros(5, np.int8), "c": rng.integers(-2000, 2000, 5).astype(np.int32),
             "ys": f32(0.05), "yz": np.int8(-1)}
    nodes = [
        helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[2, 2]),
        helper.make_node("QLinearAveragePool", ["mp", "s0", "z0", "s1", "z1"], ["ap"],
                         domain=MS, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=1),
        helper.make_node("QLinearAdd", ["mp", "s0", "z0", "ap", "s1", "z1", "s2", "z2"],
                         ["sum"], domain=MS),
        helper.make_node("QLinearGlobalAveragePool", ["sum", "s2", "z2", "s3", "z3"], ["gap"],
                         domain=MS),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("QGemm", ["flat", "s3", "z3", "w", "ws", "wz", "c", "ys", "yz"], ["y"],
                         domain=MS, transB=1),
    ]
    feeds = {"x": _ints(rng, (1, 8, 8, 8), "int8")}
    return build(nodes, feeds, inits), feeds
