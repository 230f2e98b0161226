"""Folding onnxruntime's quantized ops and the average pools into hwgen's integer ops.

Each node-level model (``tests/fusion/frontend/qlinear_pool_cases.py``) runs in the exact
reference (``examples/exact_reference.py``; never onnxruntime's integer kernels, whose QGemm
saturates without VNNI) and, after the passes, in hwgen's executor on the folded graph: only
hwgen ops may be left, and the outputs must be within one LSB of the reference's, at least 99%
exact. The exceptions are measured and explained: ``QLinearAdd`` folds into ``qadd``, whose
int8 input multipliers approximate the scale ratio (the QDQ ``Add`` has the same bound).
"""

from fractions import Fraction
from math import floor

import numpy as np
import pytest

from fusion.frontend import import_onnx
from fusion.ir import ops
from fusion.passes import qdq_fold
from fusion.passes.driver import optimize
from tests.fusion.frontend import qlinear_pool_cases as cases

FOLDS = {
    "global_avgpool": (lambda: cases.qlinear_global_avgpool(1, shape=(2, 64, 8, 8)), 0.99),
    "global_avgpool_uint8": (lambda: cases.qlinear_global_avgpool(2, "uint8"), 0.99),
    "avgpool_2x2": (lambda: cases.qlinear_avgpool(3, kernel_shape=[2, 2], strides=[2, 2],
                                                  shape=(2, 16, 16, 16)), 0.99),
    "avgpool_pads_include": (lambda: cases.qlinear_avgpool(
        4, kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), 0.99),
    "avgpool_uint8_same_upper": (lambda: cases.qlinear_avgpool(
        5, "uint8", kernel_shape=[3, 3], auto_pad="SAME_UPPER", count_include_pad=1), 0.99),
    "avgpool_ceil_fits": (lambda: cases.qlinear_avgpool(
        6, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), 0.99),
    "qdq_global_avgpool": (lambda: cases.qdq_avgpool(7, "GlobalAveragePool",
                                                     shape=(2, 32, 8, 8)), 0.99),
    "qdq_avgpool_dilated": (lambda: cases.qdq_avgpool(8, kernel_shape=[2, 3], dilations=[2, 1],
                                                      strides=[1, 2]), 0.99),
    # the divisor varies at the borders: a GEMM against the pooling matrix
    "avgpool_pads_exclude": (lambda: cases.qlinear_avgpool(
        19, kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 0.99),
    "avgpool_shufflenet": (lambda: cases.qlinear_avgpool(
        27, shape=(2, 24, 16, 16), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        0.99),
    "qdq_avgpool_ceil_overhang": (lambda: cases.qdq_avgpool(
        20, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), 0.99),
    "qdq_avgpool_ceil_pads_include": (lambda: cases.qdq_avgpool(
        28, "AveragePool", "uint8", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 2],
        ceil_mode=1, count_include_pad=1), 0.99),
    "qgemm_per_channel": (lambda: cases.qgemm(9, m=16, k=64, n=24), 0.99),
    "qgemm_transB_alpha": (lambda: cases.qgemm(10, transB=1, alpha=0.5), 0.99),
    "qgemm_uint8_per_tensor": (lambda: cases.qgemm(11, "uint8", per_channel=False), 0.99),
    "qgemm_no_bias": (lambda: cases.qgemm(12, bias=False), 0.99),
    "maxpool_int8": (lambda: cases.int8_maxpool(13, kernel_shape=[3, 3], strides=[2, 2],
                                                pads=[1, 1, 1, 1]), 1.0),
    "maxpool_uint8_same": (lambda: cases.int8_maxpool(14, "uint8", kernel_shape=[2, 2],
                                                      auto_pad="SAME_UPPER"), 1.0),
    # These decimal scales put sums on exact halves (0.05/0.08 = 5/8 up to float32 rounding),
    # which qadd's multipliers resolve otherwise (1 LSB at most);
    # test_qadd_is_within_one_lsb_of_the_float_add_for_every_input_pair pins qadd down.
    "add_int8": (lambda: cases.qlinear_add(15, shape=(2, 16, 8, 8)), 0.95),
    "add_uint8_broadcast": (lambda: cases.qlinear_add(16, "uint8", b_shape=(6, 1, 1)), 0.95),
}


@pytest.mark.parametrize("name", sorted(FOLDS))
def test_folded_graph_is_within_one_lsb_of_the_exact_reference(name):
    build, exact = FOLDS[name]
    model, feeds = build()
    want = cases.exact_run(model, feeds)
    got, graph = cases.hwgen_run(model, feeds, fold=True)
    left = [n.op for n in graph.nodes if n.op in ops.ONNX_OPS]
    assert not left, qdq_fold.explain(graph)
    worst, fraction = cases.lsb_diff(want, got)
    assert worst <= 1 and fraction >= exact, (worst, fraction)


def test_float_qgemm_folds_to_a_dequantized_accumulator():
    model, feeds = cases.qgemm(17, quantized=False, alpha=0.5)
    want = cases.exact_run(model, feeds)
    got, graph = cases.hwgen_run(model, feeds, fold=True)
    assert [n.op for n in graph.topo_order()] == ["qmatmul", "bias_add", "dequantize"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("build", [
    lambda: cases.qlinear_global_avgpool(25, shape=(2, 16, 7, 5)),
    lambda: cases.qlinear_avgpool(26, shape=(2, 8, 6, 4), kernel_shape=[6, 4]),
])
def test_a_pool_over_the_whole_plane_is_one_gemm_over_the_spatial_axis(build):
    """[N*C, H*W] (a reshape of NCHW) times a column of H*W ones: K = H*W, every input read
    once, where a depthwise conv would multiply a C*H*W block-diagonal weight."""
    model, feeds = build()
    graph = optimize(import_onnx(model), legalize=False)
    ops_ = [n.op for n in graph.topo_order()]
    assert ops_ == ["reshape", "qmatmul", "requant", "reshape"], ops_
    n, c, h, w = feeds["x"].shape
    mm = next(n_ for n_ in graph.nodes if n_.op == "qmatmul")
    weights = graph.initializers[mm.inputs[1]]
    assert weights.shape == (h * w, 1) and (weights == 1).all()
    assert graph.tensors[mm.inputs[0]].shape == (n * c, h * w)
    want = cases.exact_run(model, feeds)
    got, _ = cases.hwgen_run(model, feeds, fold=True)
    worst, fraction = cases.lsb_diff(want, got)
    assert worst <= 1 and fraction >= 0.99, (worst, fraction)


def test_average_pool_is_a_depthwise_window_sum_with_the_divisor_in_the_requantize():
    model, _ = cases.qlinear_avgpool(18, kernel_shape=[3, 3], strides=[2, 2])
    graph = optimize(import_onnx(model), legalize=False)
    conv, requant = graph.topo_order()
    assert conv.op == "qconv2d" and conv.attr("group") == 8
    weights = graph.initializers[conv.inputs[1]]
    assert weights.shape == (8, 1, 3, 3) and weights.dtype == np.int8 and (weights == 1).all()
    want = float(np.float32(0.043)) / (9 * float(np.float32(0.031)))
    assert requant.attr("mult") / 2 ** requant.attr("shift") == pytest.approx(want, rel=1e-8)


def test_a_pool_whose_divisor_varies_is_a_gemm_against_its_pooling_matrix():
    """ShuffleNet's pools (3x3, stride 2, padding 1, count_include_pad=0): a window at a
    border divides by the 4 or 6 inputs it covers, so each output column (a window) of
    ``[N*C, H*W] @ P`` gets its own requantize scale, x_scale / (count * y_scale)."""
    model, _ = cases.qlinear_avgpool(29, shape=(1, 8, 6, 6), kernel_shape=[3, 3],
                                     strides=[2, 2], pads=[1, 1, 1, 1])
    graph = optimize(import_onnx(model), legalize=False)
    ops_ = [n.op for n in graph.topo_order()]
    assert ops_ == ["reshape", "qmatmul", "requant", "reshape"], ops_
    mm = next(n for n in graph.nodes if n.op == "qmatmul")
    pool = graph.initializers[mm.inputs[1]]
    assert pool.shape == (36, 9) and set(np.unique(pool)) == {0, 1}
    counts = pool.sum(axis=0).reshape(3, 3)
    np.testing.assert_array_equal(counts, [[4, 6, 6], [6, 9, 9], [6, 9, 9]])
    assert pool[0, 0] == 1 and pool[7, 0] == 1 and pool[2, 0] == 0  # rows 0-1, cols 0-1
    requant = next(n for n in graph.nodes if n.op == "requant")
    real = np.array(requant.attr("mult"), np.float64) / 2.0 ** np.array(requant.attr("shift"))
    want = float(np.float32(0.043)) / (counts.reshape(-1) * float(np.float32(0.031)))
    np.testing.assert_allclose(real, want, rtol=1e-8)


def _refusal(model) -> str:
    graph = optimize(import_onnx(model))
    return "\n".join(qdq_fold.explain(graph))


@pytest.mark.parametrize("build, why", [
    (lambda: cases.qlinear_avgpool(19, shape=(1, 1, 24, 24), kernel_shape=[3, 3],
                                   pads=[1, 1, 1, 1]),
     "as a GEMM its 576 x 576 pooling matrix would take 331,776 bytes, more than the "
     "262,144 allowed"),

    (lambda: cases.qdq_avgpool(21, "AveragePool", shape=(1, 4, 9), kernel_shape=[3]),
     "pools a 3-D tensor; the accelerator pools 4-D NCHW tensors"),
    (lambda: cases.qgemm(22, transA=1), "transA=1"),
    (lambda: cases.qgemm(23, alpha=-1.0), "alpha -1.0; only a positive alpha folds"),
    (lambda: cases.qlinear_add(24, scales=(0.05, 1e-25, 0.08)),
     "rounds to 0 even at shift 63; requantize it closer"),
])
def test_what_cannot_fold_is_explained_in_one_line(build, why):
    model, feeds = build()
    assert why in _refusal(model)
    got, _ = cases.hwgen_run(model, feeds, fold=True)  # left as is: still runs
    worst, fraction = cases.lsb_diff(cases.exact_run(model, feeds), got)
    assert worst <= 1 and fraction >= 0.95, (worst, fraction)
    if not any(n.op_type == "QGemm" for n in model.graph.node):
        # as onnxruntime's own kernel computes it, which sums no products here (the same on
        # every CPU; its QGemm is not: tests/fusion/references.py)
        np.testing.assert_array_equal(got, cases.ort_run(model, feeds))


def test_a_pool_whose_quotients_have_exact_halves_stays_on_the_host():
    """Quantized in and out alike, a border window's sum over 6 can be an exact half, which
    QuantizeLinear rounds to even: a multiplier just under 1/6 rounds every such half down,
    one just over rounds them up, so none folds; the host computes it exactly."""
    model, feeds = cases.qlinear_avgpool(30, kernel_shape=[3, 3], strides=[2, 2],
                                         pads=[1, 1, 1, 1], scales=(0.043, 0.043))
    assert ("divides some windows by 6: no requantize multiplier gives the quotient's "
            "rounding") in _refusal(model)
    got, _ = cases.hwgen_run(model, feeds, fold=True)
    np.testing.assert_array_equal(got, cases.exact_run(model, feeds))


def test_layout_ops_of_int8_tensors_become_hwgen_ops_keeping_the_quantization():
    model, feeds = cases.qoperator_chain(25)
    want = cases.exact_run(model, feeds)
    got, graph = cases.hwgen_run(model, feeds, fold=True)
    flatten = next(n for n in graph.nodes if n.op == "flatten")
    assert graph.tensors[flatten.outputs[0]].quant == graph.tensors[flatten.inputs[0]].quant
    assert "maxpool" in {n.op for n in graph.nodes}
    assert not [n.op for n in graph.nodes if n.op in ops.ONNX_OPS]
    assert cases.lsb_diff(want, got)[0] <= 1


@pytest.mark.parametrize(("scales", "ties"), [
    ((0.0252869, 0.018687868, 0.031), False), ((1.0, 0.996, 0.25), False),
    ((0.3, 0.0007, 0.3), False), ((0.07, 0.07, 0.07), False), ((2.0, 3.0, 0.001), False),
    ((0.01, 0.3, 0.02), True), ((0.00013, 0.00011, 0.0004), True), ((0.05, 0.025, 0.08), True),
    ((0.2, 0.1, 0.4), True), ((0.5, 0.5, 1.0), True),
])
def test_qadd_is_within_one_lsb_of_the_float_add_for_every_input_pair(scales, ties):
    """Every pair of int8 inputs against the exact reference's ``DQ -> Add -> Q`` (float64),
    over scale ratios from 1e-3 to 2e3: within one LSB, and equal wherever the real sum of the
    float32 scales (exact, Fraction) is farther from a half than qadd's input multipliers
    (float32 ratios) can move it (a few units of 2**-23 of the terms' magnitude). Near such a
    half (decimal scales like 0.2 and 0.4, whose ratio is exactly 1/2 in float32) hwgen's sum
    may land on the other side; for scales without such halves (``ties`` False, as calibration
    makes them) every element is exact."""
    sa, sb, sy = (np.float32(v) for v in scales)
    za, zb, zy = 2, -7, 1
    grid = np.arange(-128, 128, dtype=np.int8)
    a, b = np.repeat(grid, 256), np.tile(grid, 256)
    model = cases.qdq_add(sa, sb, sy, (za, zb, zy), a.shape)
    want = cases.exact_run(model, {"a": a, "b": b}).astype(np.int64)
    got, graph = cases.hwgen_run(model, {"a": a, "b": b}, fold=True)
    assert [n.op for n in graph.nodes] == ["qadd"]
    diff = got.astype(np.int64) - want
    assert np.abs(diff).max(initial=0) <= 1
    for x, y in zip(a[diff != 0], b[diff != 0], strict=True):
        ta = Fraction(float(sa)) * (int(x) - za) / Fraction(float(sy))
        tb = Fraction(float(sb)) * (int(y) - zb) / Fraction(float(sy))
        v = ta + tb
        assert abs(v - floor(v) - Fraction(1, 2)) <= Fraction(1, 2**20) * (abs(ta) + abs(tb))
    if not ties:
        assert not np.any(diff)
