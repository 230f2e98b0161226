"""Weights with zero points on the simulator: an asymmetric-uint8-weight MatMulInteger and a
QLinearConv whose folded weights need the split along K, bit-exact with the reference (the
shadow check) and matching the exact reference (``examples/exact_reference.py``; onnxruntime's
integer kernels, which run these two ops, saturate without VNNI)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from examples.exact_reference import reference_session
from fusion.compiler.plan import HostStep, compile_model
from fusion.frontend import import_onnx
from fusion.kernels.cache import KernelCache
from fusion.runtime.run import run_compiled
from hwgen.presets import SIM_VARIANTS

pytestmark = pytest.mark.slow


def two_layers() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    w_mm = rng.integers(0, 256, (20, 6)).astype(np.uint8)
    w_mm[:, 0] = np.maximum(w_mm[:, 0], 1)
    w_mm[4, 0] = 255  # column 0 has zero point 0: 255 needs three int8 parts
    w_conv = rng.integers(0, 256, (5, 3, 3, 3)).astype(np.uint8)
    inits = {"w_mm": w_mm, "az": np.int8(-9), "wz_mm": np.array([0, 128, 200, 37, 128, 90],
                                                                 np.uint8),
             "xs": np.float32(0.03), "xz": np.uint8(128), "w_conv": w_conv,
             "ws": np.linspace(0.002, 0.004, 5, dtype=np.float32),
             "wz_conv": np.array([128, 10, 250, 128, 60], np.uint8),
             "ys": np.float32(0.35), "yz": np.uint8(110),
             "b": np.array([300, -200, 0, 1000, -50], np.int32)}
    nodes = [helper.make_node("MatMulInteger", ["a", "w_mm", "az", "wz_mm"], ["y_mm"],
                              name="mm"),
             helper.make_node("QLinearConv", ["x", "xs", "xz", "w_conv", "ws", "wz_conv", "ys",
                                              "yz", "b"], ["y_conv"], name="conv",
                              pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "wzp", [helper.make_tensor_value_info("a", TensorProto.INT8, (7, 20)),
                       helper.make_tensor_value_info("x", TensorProto.UINT8, (1, 3, 6, 6))],
        [helper.make_tensor_value_info("y_mm", TensorProto.INT32, (7, 6)),
         helper.make_tensor_value_info("y_conv", TensorProto.UINT8, (1, 5, 6, 6))],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(proto)
    return proto


def test_split_weights_run_bit_exact_and_match_the_exact_reference():
    proto = two_layers()
    rng = np.random.default_rng(5)
    inputs = {"a": rng.integers(-128, 128, (7, 20)).astype(np.int8),
              "x": rng.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)}
    session = reference_session(proto)
    want = dict(zip(["y_mm", "y_conv"], session.run(["y_mm", "y_conv"], inputs), strict=True))

    compiled = compile_model(import_onnx(proto), SIM_VARIANTS["4x4"],
                             cache=KernelCache(disk=False))
    repeats = [s.node.attr("times") for s in compiled.steps
               if isinstance(s, HostStep) and s.node.op == "repeat"]
    assert sorted(repeats) == [2, 3]  # the conv's weights need two parts, the matmul's three
    report = run_compiled(compiled, inputs)  # raises ShadowMismatch on any bit of difference
    assert len(report.kernels) == 2
    np.testing.assert_array_equal(report.outputs["y_mm"], want["y_mm"])  # integers: exact
    # requantized: hwgen's fixed-point multiplier against the reference's float64 one: within
    # one LSB, 99% exact (exact here)
    diff = report.outputs["y_conv"].astype(np.int64) - want["y_conv"]
    assert np.abs(diff).max() <= 1 and np.mean(diff == 0) >= 0.99
