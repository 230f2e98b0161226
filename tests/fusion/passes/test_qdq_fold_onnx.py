"""Q/DQ folding on ONNX models built here: the folded integer graph against the imported one.

The imported graph runs with ONNX semantics (checked against onnx.reference by
``tests/fusion/test_examples.py``); after the passes the same inputs must give outputs within
one LSB, 99% exact (integer-only models: exactly). Covers the patterns the bundled examples do
not: QLinearConv with a bias, ConvInteger, MatMulInteger, Gemm with a float bias, SAME-padded
MaxPool and Transpose between Q and DQ.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusion.frontend import import_onnx
from fusion.passes.driver import optimize
from fusion.reference import executor

RNG = np.random.default_rng(3)
FLOAT_OPS = {"MatMul", "Gemm", "Conv", "Add", "Relu", "Clip", "MaxPool", "Transpose",
             "QLinearMatMul", "QLinearConv", "MatMulInteger", "ConvInteger"}


def model(nodes, inits, x_shape, y_shape, x_type=TensorProto.FLOAT, y_type=TensorProto.INT8):
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", x_type, x_shape)],
        [helper.make_tensor_value_info("y", y_type, y_shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(m)
    return m


def node(op, inputs, output, **attrs):
    return helper.make_node(op, inputs, [output], name=output, **attrs)


def qlinear_conv():
    w = RNG.integers(-127, 128, (5, 3, 3, 3), dtype=np.int8)
    inits = {"xs": np.float32(0.0213), "xz": np.uint8(128), "w": w,
             "ws": RNG.uniform(0.002, 0.01, 5).astype(np.float32), "wz": np.zeros(5, np.int8),
             "ys": np.float32(0.0731), "yz": np.uint8(7),
             "b": RNG.integers(-3000, 3000, 5, dtype=np.int32)}
    nodes = [node("QuantizeLinear", ["x", "xs", "xz"], "xq"),
             node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], "y",
                  pads=[1, 0, 1, 0], strides=[1, 2])]
    return model(nodes, inits, (1, 3, 6, 7), (1, 5, 6, 3), y_type=TensorProto.UINT8), (1, 3, 6, 7)


def qdq_gemm_pool_transpose():
    w = RNG.integers(-127, 128, (6, 12), dtype=np.int8)
    inits = {"xs": np.float32(0.0417), "xz": np.int8(3), "ws": np.float32(0.0061),
             "wz": np.int8(0), "w": w, "bias": RNG.normal(0, 0.3, 6).astype(np.float32),
             "ys": np.float32(0.0512), "yz": np.int8(-10), "shape": np.int64([2, 12])}
    nodes = [node("QuantizeLinear", ["x", "xs", "xz"], "xq"),
             node("DequantizeLinear", ["xq", "xs", "xz"], "xd"),
             node("MaxPool", ["xd"], "p", kernel_shape=[3, 3], auto_pad="SAME_UPPER",
                  strides=[2, 2]),
             node("Transpose", ["p"], "t", perm=[0, 1, 3, 2]),
             node("Reshape", ["t", "shape"], "f"),
             node("DequantizeLinear", ["w", "ws", "wz"], "wd"),
             node("Gemm", ["f", "wd", "bias"], "g", transB=1),
             node("QuantizeLinear", ["g", "ys", "yz"], "y")]
    return model(nodes, inits, (2, 3, 4, 3), (2, 6)), (2, 3, 4, 3)


def matmul_integer():
    w = RNG.integers(-127, 128, (16, 8), dtype=np.int8)
    inits = {"w": w, "az": np.uint8(131), "bz": np.int8(0)}
    nodes = [node("MatMulInteger", ["x", "w", "az", "bz"], "y")]
    return model(nodes, inits, (5, 16), (5, 8), TensorProto.UINT8, TensorProto.INT32), (5, 16)


def conv_integer():
    w = RNG.integers(-127, 128, (4, 3, 2, 2), dtype=np.int8)
    inits = {"w": w, "xz": np.int8(-5), "wz": np.int8(0)}
    nodes = [node("ConvInteger", ["x", "w", "xz", "wz"], "y", auto_pad="SAME_UPPER")]
    proto = model(nodes, inits, (1, 3, 5, 5), (1, 4, 5, 5), TensorProto.INT8, TensorProto.INT32)
    return proto, (1, 3, 5, 5)


MODELS = {"qlinear_conv": qlinear_conv, "qdq_gemm_pool_transpose": qdq_gemm_pool_transpose,
          "matmul_integer": matmul_integer, "conv_integer": conv_integer}


def sample(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return rng.normal(0, 1, shape).astype(np.float32)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    return rng.integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("legalize", [False, True], ids=["folded", "legalized"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_folded_graph_matches_the_imported_one(name, legalize):
    proto, shape = MODELS[name]()
    imported = import_onnx(proto)
    folded = optimize(imported, legalize=legalize)
    left = sorted({n.op for n in folded.nodes} & FLOAT_OPS)
    assert not left, f"ONNX compute ops left: {left}"
    dtype = imported.tensors["x"].dtype
    diffs = []
    for seed in range(20):
        x = sample(shape, dtype, seed)
        want = executor.run(imported, {"x": x})["y"].astype(np.int64)
        diffs.append((executor.run(folded, {"x": x})["y"].astype(np.int64) - want).ravel())
    diffs = np.concatenate(diffs)
    if name.endswith("integer"):
        assert not diffs.any(), "integer-output models must match exactly"
    assert np.abs(diffs).max() <= 1
    assert np.mean(diffs == 0) >= 0.99
