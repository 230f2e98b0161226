"""onnxruntime's com.microsoft quantized ops and the average pools: imported and run by hwgen's
executor on node-level models, against the exact reference (``examples/exact_reference.py``).

A ``com.microsoft`` op is defined by onnxruntime's kernel (its documentation gives no
rounding). hwgen's executor follows QLinearAdd's arithmetic step by step (float32 scale
ratios, the zero point added before rounding half to even), and rounds the quantized pools'
exact quotient half to even (integer window sums over the divisor), as QuantizeLinear would.
So:

- every output is within 1 LSB of the exact reference, and equal to it (QGemm, the pools,
  MaxPool) except where QLinearAdd's float32 steps meet a rounding half (``NEAR_HALVES``);
- QLinearAdd and MaxPool are also bit-exact with onnxruntime's kernel. Those sum no products
  and are the same on every CPU; the kernels that sum u8 x s8 products (QGemm, QLinearConv,
  QLinearMatMul) are not (without VNNI they saturate int16 pair sums), so QGemm is checked
  against the exact reference only. onnxruntime's quantized pools add the zero point before
  rounding in float32, and so part from the exact value at some halves.
"""

import numpy as np
import pytest
from onnx import helper

from fusion.frontend import import_onnx
from fusion.ir.graph import GraphError
from tests.fusion.frontend import qlinear_pool_cases as cases

POOLS = {
    "global_avgpool_int8": lambda: cases.qlinear_global_avgpool(1),
    "global_avgpool_uint8": lambda: cases.qlinear_global_avgpool(2, "uint8"),
    "global_avgpool_8x8": lambda: cases.qlinear_global_avgpool(3, shape=(1, 64, 8, 8)),
    "avgpool_strided": lambda: cases.qlinear_avgpool(4, kernel_shape=[3, 3], strides=[2, 2]),
    "avgpool_pads_include": lambda: cases.qlinear_avgpool(
        5, kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
    "avgpool_pads_exclude": lambda: cases.qlinear_avgpool(
        6, kernel_shape=[3, 3], pads=[1, 0, 1, 2]),
    "avgpool_ceil": lambda: cases.qlinear_avgpool(
        7, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    "avgpool_uint8_same": lambda: cases.qlinear_avgpool(
        8, "uint8", kernel_shape=[3, 3], auto_pad="SAME_UPPER"),
    "qdq_global_avgpool": lambda: cases.qdq_avgpool(9, "GlobalAveragePool"),
    "qdq_avgpool": lambda: cases.qdq_avgpool(10, kernel_shape=[4, 4], strides=[1, 2]),
}
#: onnxruntime's kernels define these, and hwgen follows them bit for bit.
EXACT = {
    "add_int8": lambda: cases.qlinear_add(11),
    "add_uint8": lambda: cases.qlinear_add(12, "uint8"),
    "add_broadcast": lambda: cases.qlinear_add(13, b_shape=(6, 1, 1)),
    "maxpool_int8": lambda: cases.int8_maxpool(18, kernel_shape=[3, 3], strides=[2, 2],
                                               pads=[1, 1, 1, 1]),
    "maxpool_uint8": lambda: cases.int8_maxpool(19, "uint8", kernel_shape=[2, 2]),
}
#: Cases with integer products: onnxruntime's kernel depends on the CPU.
PRODUCTS = {
    "qgemm_per_channel": lambda: cases.qgemm(14),
    "qgemm_transB_per_tensor": lambda: cases.qgemm(15, per_channel=False, transB=1),
    "qgemm_transA_alpha": lambda: cases.qgemm(16, transA=1, alpha=0.75),
    "qgemm_uint8_no_bias": lambda: cases.qgemm(17, "uint8", bias=False),
}
#: QLinearAdd cases whose exact real-number value lands near a half, where onnxruntime's
#: arithmetic (which hwgen follows) and the exact one part: measured share of exact elements.
NEAR_HALVES = {"add_int8": 0.96, "add_uint8": 0.96, "add_broadcast": 0.95}
ALL = {**POOLS, **EXACT, **PRODUCTS}


@pytest.mark.parametrize("name", sorted(ALL))
def test_integer_outputs_match_the_exact_reference(name):
    model, feeds = ALL[name]()
    want = cases.exact_run(model, feeds)
    got, _ = cases.hwgen_run(model, feeds)
    assert got.dtype == want.dtype
    worst, fraction = cases.lsb_diff(want, got)
    assert worst <= 1 and fraction >= NEAR_HALVES.get(name, 1.0), (worst, fraction)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_product_free_outputs_match_onnxruntime_exactly(name):
    model, feeds = EXACT[name]()
    want = cases.ort_run(model, feeds)
    got, _ = cases.hwgen_run(model, feeds)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_float_qgemm_matches_the_exact_reference():
    model, feeds = cases.qgemm(20, quantized=False, alpha=0.5)
    want = cases.exact_run(model, feeds)
    got, _ = cases.hwgen_run(model, feeds)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_contrib_ops_are_annotated_with_their_quantization():
    model, _ = cases.qlinear_add(21)
    graph = import_onnx(model)
    assert graph.tensors["a"].quant.zero_point == (2,)
    assert graph.tensors["y"].quant.scale == pytest.approx((0.08,))
    model, _ = cases.qgemm(22, transB=1)
    graph = import_onnx(model)
    assert graph.tensors["b"].quant.axis == 0  # per output column = per row of B'


def _one_node(op, domain):
    model, _ = cases.qlinear_global_avgpool(23)
    model.graph.node[0].op_type = op
    model.graph.node[0].domain = domain
    return model


def test_an_unsupported_contrib_op_is_refused_by_name():
    with pytest.raises(GraphError, match=r"com\.microsoft::QLinearReduceMean, which hwgen does "
                                         r"not support.*QLinearAdd"):
        import_onnx(_one_node("QLinearReduceMean", cases.MS))


def test_a_contrib_op_in_the_standard_domain_is_refused():
    with pytest.raises(GraphError, match="give it domain 'com.microsoft'"):
        import_onnx(_one_node("QLinearGlobalAveragePool", ""))


def test_channels_last_pooling_is_refused():
    model, _ = cases.qlinear_global_avgpool(24)
    model.graph.node[0].attribute.append(helper.make_attribute("channels_last", 1))
    with pytest.raises(GraphError, match="channels_last=1"):
        import_onnx(model)


def test_qgemm_with_y_scale_needs_y_zero_point():
    model, _ = cases.qgemm(25)
    node = model.graph.node[0]
    del node.input[-1]
    with pytest.raises(GraphError, match="y_zero_point"):
        import_onnx(model)
