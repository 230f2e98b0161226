"""The references themselves (``tests/fusion/references.py``, ``examples/exact_reference.py``).

The u8 x s8 case that onnxruntime's integer kernels saturate on a CPU without VNNI (they sum
pairs of products in int16): ``MatMulInteger`` of a 4x16 matrix of 255 by a 16x4 matrix of 127
is 518,160; onnxruntime without VNNI gives 262,136. Through the project's reference it must be
exact on every machine, and so must the other integer-product operators at their extremes, so
that a reference which saturates fails here wherever it runs, not only on some CPUs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.fusion.references import float_path, integer_kernel_nodes, references, session

EXACT_SUM = 16 * 255 * 127  # 518,160
#: What onnxruntime's u8 x s8 kernel gives without VNNI: pairs of products summed in
#: saturating int16 (255*127*2 = 64,770 saturates to 32,767), eight pairs a row.
SATURATED_SUM = 8 * 32767  # 262,136


def _model(nodes, inputs, output_type, inits=(), domains=(("", 21),)):
    graph = helper.make_graph(nodes, "case", inputs,
                              [helper.make_tensor_value_info("y", output_type, None)],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in domains])


def matmul_integer() -> tuple[onnx.ModelProto, dict]:
    model = _model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                   [helper.make_tensor_value_info("a", TensorProto.UINT8, (4, 16)),
                    helper.make_tensor_value_info("b", TensorProto.INT8, (16, 4))],
                   TensorProto.INT32)
    return model, {"a": np.full((4, 16), 255, np.uint8), "b": np.full((16, 4), 127, np.int8)}


def test_the_saturating_case_is_exact_through_the_reference():
    model, feeds = matmul_integer()
    (y,) = session(model).run(None, feeds)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.full((4, 4), EXACT_SUM))
    # and no reference the tests use for it is onnxruntime
    assert [label for label, _ in references(model)] == ["exact reference"]


def test_integer_product_operators_are_exact_at_their_extremes():
    """QLinearMatMul, QLinearConv and com.microsoft's QGemm with u8 255 and s8 127 throughout:
    an accumulator of 16 * 255 * 127 (zero points 0), requantized by an output scale that
    makes each product sum one LSB per 4,080 (so 127 exactly, where a saturated sum would
    give 64)."""
    f32, u8, i8 = np.float32, np.uint8, np.int8
    scales = {"s1": f32(1.0), "z8": u8(0), "w1": f32(1.0), "wz": i8(0), "ys": f32(4080.0),
              "yz": u8(0)}
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in scales.items()]
    a = np.full((4, 16), 255, u8)
    b = numpy_helper.from_array(np.full((16, 4), 127, i8), "b")
    qmatmul = _model([helper.make_node("QLinearMatMul", ["a", "s1", "z8", "b", "w1", "wz", "ys",
                                                         "yz"], ["y"])],
                     [helper.make_tensor_value_info("a", TensorProto.UINT8, (4, 16))],
                     TensorProto.UINT8, inits + [b])
    bt = numpy_helper.from_array(np.full((4, 16), 127, i8), "bt")
    qgemm = _model([helper.make_node("QGemm", ["a", "s1", "z8", "bt", "w1", "wz", "", "ys", "yz"],
                                     ["y"], domain="com.microsoft", transB=1)],
                   [helper.make_tensor_value_info("a", TensorProto.UINT8, (4, 16))],
                   TensorProto.UINT8, inits + [bt], domains=(("", 21), ("com.microsoft", 1)))
    w = numpy_helper.from_array(np.full((2, 16, 1, 1), 127, i8), "w")
    qconv = _model([helper.make_node("QLinearConv", ["x", "s1", "z8", "w", "w1", "wz", "ys",
                                                     "yz"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.UINT8, (1, 16, 2, 2))],
                   TensorProto.UINT8, inits + [w])
    for model, feeds in ((qmatmul, {"a": a}), (qgemm, {"a": a}),
                         (qconv, {"x": np.full((1, 16, 2, 2), 255, u8)})):
        (y,) = session(model).run(None, feeds)
        assert (y == 127).all(), (model.graph.node[0].op_type, y.ravel()[:4])
        assert integer_kernel_nodes(model)
        with pytest.raises(ValueError, match="integer kernel, which is not exact on every CPU"):
            float_path(model)


def test_onnxruntime_integer_kernel_is_exact_or_saturates_as_documented(capsys):
    """Documents onnxruntime's deviation (never a reference): with VNNI its MatMulInteger is
    exact, without it the pair sums saturate. Either way it is one of the two."""
    ort = pytest.importorskip("onnxruntime")
    model, feeds = matmul_integer()
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert set(np.unique(got).tolist()) <= {EXACT_SUM, SATURATED_SUM}
    with capsys.disabled():
        print(f"\nonnxruntime's MatMulInteger on this CPU: {int(got[0, 0]):,} "
              f"({'exact' if got[0, 0] == EXACT_SUM else 'saturated'})")


def test_the_float_path_turns_every_optimization_off():
    """onnxruntime's float path runs a QDQ graph as written: with its optimizations on, it
    would fuse DequantizeLinear -> MatMul -> QuantizeLinear into an integer kernel."""
    import onnxruntime as ort

    s = {"s": np.float32(0.5), "z": np.int8(0)}
    model = _model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["dx"]),
                    helper.make_node("Relu", ["dx"], ["r"]),
                    helper.make_node("QuantizeLinear", ["r", "s", "z"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.INT8, (2, 3))],
                   TensorProto.INT8, [numpy_helper.from_array(np.asarray(v), k)
                                      for k, v in s.items()])
    labels = [label for label, _ in references(model)]
    assert labels == ["exact reference", "onnxruntime float path"]
    options = float_path(model).get_session_options()
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def test_quantize_rounds_half_to_even_on_the_exact_value():
    """QuantizeLinear in the reference: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, and saturation."""
    s = {"s": np.float32(1.0), "z": np.int8(0)}
    model = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (6,))],
                   TensorProto.INT8, [numpy_helper.from_array(np.asarray(v), k)
                                      for k, v in s.items()])
    x = np.array([2.5, 3.5, -2.5, -3.5, 300.0, -300.0], np.float32)
    (y,) = session(model).run(None, {"x": x})
    assert y.tolist() == [2, 4, -2, -4, 127, -128]
