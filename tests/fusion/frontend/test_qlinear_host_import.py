"""onnxruntime's QLinearMul, QLinearSigmoid, QLinearLeakyRelu and QLinearConcat: imported and
run by hwgen's executor, against the exact reference and onnxruntime's own kernels.

These ``com.microsoft`` ops are defined by onnxruntime's kernels (its documentation gives no
rounding). It runs Sigmoid, LeakyRelu and the rescaling of Concat inputs through a 256-entry
table built in float32, and QLinearMul as the integer product times a float32 scale ratio;
hwgen's reference does the same steps (:mod:`fusion.reference.onnx_host_ops`), so every
integer output is bit-exact with those kernels (measured: 100% on every case here, int8 and
uint8). They sum no products, so they are the same on every CPU (unlike the u8 x s8 dot
products of QGemm and QLinearConv: ``tests/fusion/references.py``). Against the exact
reference (float64 on the dequantized values) the float32 steps put a few outputs 1 LSB off,
where the real value is near a half: ``NEAR_HALVES``.
"""

import numpy as np
import pytest

from fusion.frontend import import_onnx
from fusion.ir.graph import GraphError
from tests.fusion.frontend import qlinear_host_cases as cases
from tests.fusion.frontend.qlinear_pool_cases import exact_run, hwgen_run, lsb_diff, ort_run

EXACT = {
    "mul_int8": lambda: cases.qlinear_mul(1),
    "mul_uint8": lambda: cases.qlinear_mul(2, "uint8"),
    "mul_int8_ratio_below_one": lambda: cases.qlinear_mul(3, scales=(0.1, 0.1, 0.3)),
    "mul_uint8_ratio_above_one": lambda: cases.qlinear_mul(4, "uint8", scales=(0.013, 0.2, 0.01)),
    "mul_broadcast": lambda: cases.qlinear_mul(5, b_shape=(6, 1, 1)),
    "sigmoid_int8": lambda: cases.qlinear_unary("QLinearSigmoid"),
    "sigmoid_uint8": lambda: cases.qlinear_unary("QLinearSigmoid", "uint8", (0.1, 0.004)),
    "sigmoid_coarse": lambda: cases.qlinear_unary("QLinearSigmoid", scales=(0.02, 0.03),
                                                  y_zp=4),
    "leaky_relu_default_alpha": lambda: cases.qlinear_unary("QLinearLeakyRelu",
                                                            scales=(0.05, 0.04), y_zp=4),
    "leaky_relu_uint8": lambda: cases.qlinear_unary("QLinearLeakyRelu", "uint8", (0.1, 0.07),
                                                    y_zp=3, alpha=0.1),
    "concat_int8": lambda: cases.qlinear_concat(6),
    "concat_uint8": lambda: cases.qlinear_concat(7, "uint8"),
    "concat_last_axis": lambda: cases.qlinear_concat(8, axis=-1),
}


#: Share of exact elements against the exact reference where it is below 1 (as measured).
NEAR_HALVES = {"concat_int8": 0.997, "concat_uint8": 0.997, "leaky_relu_default_alpha": 0.968,
               "mul_int8_ratio_below_one": 0.976, "mul_uint8": 0.996,
               "mul_uint8_ratio_above_one": 0.996}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_integer_outputs_are_within_one_lsb_of_the_exact_reference(name):
    model, feeds = EXACT[name]()
    want = exact_run(model, feeds)
    got, _ = hwgen_run(model, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    worst, fraction = lsb_diff(want, got)
    assert worst <= 1 and fraction >= NEAR_HALVES.get(name, 1.0), (worst, fraction)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_integer_outputs_match_onnxruntime_exactly(name):
    model, feeds = EXACT[name]()
    want = ort_run(model, feeds)
    got, _ = hwgen_run(model, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_concat_inputs_and_output_are_annotated():
    model, _ = cases.qlinear_concat(9)
    graph = import_onnx(model)
    assert graph.tensors["x1"].quant.zero_point == (-7,)
    assert graph.tensors["x2"].quant.scale == pytest.approx((0.11,))
    assert graph.tensors["y"].quant.zero_point == (1,)


def test_concat_inputs_must_agree_outside_the_axis():
    model, _ = cases.qlinear_concat(10)
    model.graph.input[1].type.tensor_type.shape.dim[2].dim_value = 6  # x1 (2, 4, 6, 5)
    with pytest.raises(GraphError, match=r"'x1' has shape \(2, 4, 6, 5\).*outside axis 1"):
        import_onnx(model)


def test_an_unsupported_contrib_op_is_still_refused_by_name():
    model, _ = cases.qlinear_unary("QLinearSigmoid")
    model.graph.node[0].op_type = "QLinearReduceMean"
    with pytest.raises(GraphError, match=r"com\.microsoft::QLinearReduceMean, which hwgen does "
                                         r"not support.*QLinearSigmoid"):
        import_onnx(model)
