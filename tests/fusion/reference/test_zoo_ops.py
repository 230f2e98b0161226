"""The operators the model-zoo classics brought (issue 32): ``Sum``, ``LRN``,
``BatchNormalization`` and onnxruntime's ``QLinearSoftmax``, imported and run by hwgen's
reference executor against ONNX's own definitions (and ``Sum`` of two quantized tensors folded
into the residual add)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from examples.exact_reference import reference_session
from fusion.frontend import import_onnx
from fusion.ir.graph import GraphError
from fusion.passes import driver
from fusion.reference import executor
from tests.fusion.references import as_written

MS = "com.microsoft"


def _model(nodes, inputs, output, inits=(), opset=17):
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(output[0], output[1], output[2])],
        [numpy_helper.from_array(v, k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def test_sum_of_three_broadcasts_as_onnx_does():
    rng = np.random.default_rng(0)
    feeds = {"a": rng.normal(size=(2, 3, 4)).astype(np.float32),
             "b": rng.normal(size=(3, 1)).astype(np.float32),
             "c": rng.normal(size=(4,)).astype(np.float32)}
    model = _model([helper.make_node("Sum", ["a", "b", "c"], ["y"])],
                   [(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
                   ("y", TensorProto.FLOAT, (2, 3, 4)))
    graph = import_onnx(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(executor.run(graph, feeds)["y"], want)


def _quantized_sum(inputs: int) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(inputs)
    names = [f"x{i}" for i in range(inputs)]
    nodes = [helper.make_node("DequantizeLinear", [n, f"s{i}", "z"], [f"{n}_d"])
             for i, n in enumerate(names)]
    nodes += [helper.make_node("Sum", [f"{n}_d" for n in names], ["s"], name="sum"),
              helper.make_node("QuantizeLinear", ["s", "sy", "z"], ["q"]),
              helper.make_node("DequantizeLinear", ["q", "sy", "z"], ["y"])]
    inits = [(f"s{i}", np.array(0.01 * (i + 1), np.float32)) for i in range(inputs)]
    inits += [("sy", np.array(0.03, np.float32)), ("z", np.array(3, np.int8))]
    model = _model(nodes, [(n, TensorProto.INT8, (4, 8)) for n in names],
                   ("y", TensorProto.FLOAT, (4, 8)), inits)
    feeds = {n: rng.integers(-128, 128, (4, 8)).astype(np.int8) for n in names}
    return model, feeds


def test_a_quantized_sum_of_two_is_the_residual_add():
    model, feeds = _quantized_sum(2)
    graph = driver.optimize(import_onnx(model), legalize=False)
    assert "qadd" in [n.op for n in graph.nodes]
    assert "Sum" not in [n.op for n in graph.nodes]
    want = reference_session(model).run(["y"], feeds)[0]
    np.testing.assert_array_equal(executor.run(graph, feeds)["y"], want.astype(np.float32))


def test_a_quantized_sum_of_three_stays_a_float_sum():
    """qadd adds two tensors with one rounding: three would need two."""
    model, feeds = _quantized_sum(3)
    graph = driver.optimize(import_onnx(model), legalize=False)
    assert "Sum" in [n.op for n in graph.nodes]
    want = reference_session(model).run(["y"], feeds)[0]
    np.testing.assert_array_equal(executor.run(graph, feeds, float64=True)["y"],
                                  want.astype(np.float32))


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn_sums_squares_across_channels(size):
    """Against the exact reference's LRN (ONNX's specification; the evaluator's own sums over
    the batch axis) and onnxruntime's float kernel (odd sizes: it refuses even ones)."""
    x = np.random.default_rng(size).normal(0, 3, (2, 7, 3, 3)).astype(np.float32)
    model = _model([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.01, beta=0.75,
                                     bias=1.5)],
                   [("x", TensorProto.FLOAT, x.shape)], ("y", TensorProto.FLOAT, x.shape))
    got = executor.run(import_onnx(model), {"x": x}, float64=True)["y"]
    want = reference_session(model).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)  # both float64, then float32
    if size % 2:  # onnxruntime's float kernel (optimizations off) takes odd sizes only
        np.testing.assert_allclose(got, as_written(model).run(None, {"x": x})[0], rtol=1e-5)


def test_batch_normalization_in_float_is_onnxs():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 4, 3, 3)).astype(np.float32)
    params = [("s", rng.uniform(0.5, 1.5, 4)), ("b", rng.normal(size=4)),
              ("m", rng.normal(size=4)), ("v", rng.uniform(0.5, 1.5, 4))]
    model = _model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                     epsilon=1e-3)],
                   [("x", TensorProto.FLOAT, x.shape)], ("y", TensorProto.FLOAT, x.shape),
                   [(k, v.astype(np.float32)) for k, v in params])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(executor.run(import_onnx(model), {"x": x})["y"], want,
                               rtol=1e-6)


def test_training_mode_batch_normalization_is_refused():
    model = _model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                     training_mode=1)],
                   [("x", TensorProto.FLOAT, (1, 2, 2, 2))], ("y", TensorProto.FLOAT, None),
                   [(k, np.ones(2, np.float32)) for k in "sbmv"])
    with pytest.raises(GraphError, match="training_mode=1; hwgen runs inference"):
        import_onnx(model)


def _qsoftmax(shape, axis: int, opset: int) -> tuple[onnx.ModelProto, np.ndarray]:
    x = np.random.default_rng(opset).integers(-128, 128, shape).astype(np.int8)
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS, axis=axis, opset=opset)
    model = _model([node], [("x", TensorProto.INT8, shape)], ("y", TensorProto.INT8, shape),
                   [("xs", np.array(0.05, np.float32)), ("xz", np.array(-3, np.int8)),
                    ("ys", np.array(1 / 256, np.float32)), ("yz", np.array(-128, np.int8))])
    return model, x


def test_qlinear_softmax_is_q_of_softmax_of_dq():
    model, x = _qsoftmax((2, 3, 10), -1, 13)
    got = executor.run(import_onnx(model), {"x": x})["y"]
    np.testing.assert_array_equal(got, reference_session(model).run(["y"], {"x": x})[0])


def test_qlinear_softmax_before_opset_13_normalizes_the_flattened_trailing_axes():
    model, x = _qsoftmax((2, 3, 4), 1, 12)
    real = (x.astype(np.float64) + 3) * np.float64(np.float32(0.05))
    flat = real.reshape(2, 12)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    want = np.clip(np.rint((e / e.sum(axis=1, keepdims=True)) * 256) - 128, -128, 127)
    got = executor.run(import_onnx(model), {"x": x})["y"]
    np.testing.assert_array_equal(got, want.reshape(2, 3, 4).astype(np.int8))


def test_a_sum_of_one_input_is_removed():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = _model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("Sum", ["r"], ["y"])],
                   [("x", TensorProto.FLOAT, x.shape)], ("y", TensorProto.FLOAT, x.shape))
    graph = driver.optimize(import_onnx(model), legalize=False)
    assert "Sum" not in [n.op for n in graph.nodes]
    np.testing.assert_array_equal(executor.run(graph, {"x": x})["y"], x)
