"""Small ONNX models with ops the accelerator has no kernel for, built with ``onnx.helper``.

:func:`mlp_sigmoid_softmax` is a QOperator MLP: ``QuantizeLinear -> QLinearMatMul ->
QLinearSigmoid -> QLinearMatMul -> DequantizeLinear -> Softmax``. The two GEMMs run on the
accelerator; ``QLinearSigmoid`` (a table lookup) and ``Softmax`` (an exponential) run on the
host.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def mlp_sigmoid_softmax(batch: int = 4, width: int = 16, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = {
        "xs": np.float32(0.02), "xz": np.int8(0),
        "w1": rng.integers(-127, 128, (width, width)).astype(np.int8),
        "w1s": np.float32(0.004), "w1z": np.int8(0),
        "h1s": np.float32(0.06), "h1z": np.int8(-3),
        "s1s": np.float32(1 / 256), "s1z": np.int8(-128),
        "w2": rng.integers(-127, 128, (width, 10)).astype(np.int8),
        "w2s": np.float32(0.005), "w2z": np.int8(0),
        "h2s": np.float32(0.04), "h2z": np.int8(2),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="quant"),
        helper.make_node("QLinearMatMul", ["xq", "xs", "xz", "w1", "w1s", "w1z", "h1s", "h1z"],
                         ["h1"], name="fc1"),
        helper.make_node("QLinearSigmoid", ["h1", "h1s", "h1z", "s1s", "s1z"], ["s1"],
                         name="sig", domain=MS),
        helper.make_node("QLinearMatMul", ["s1", "s1s", "s1z", "w2", "w2s", "w2z", "h2s", "h2z"],
                         ["h2"], name="fc2"),
        helper.make_node("DequantizeLinear", ["h2", "h2s", "h2z"], ["logits"], name="dq"),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp_sigmoid_softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (batch, width))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (batch, 10))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid(MS, 1)])


def sample(batch: int = 4, width: int = 16, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1.5, (batch, width)).astype(np.float32)
