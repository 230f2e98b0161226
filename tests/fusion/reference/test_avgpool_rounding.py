"""fusion/reference/onnx_ops.py: the host's quantized average pools round half to even on the
exact quotient, checked against :class:`fractions.Fraction`.

``QLinearAveragePool`` and ``QLinearGlobalAveragePool`` mean
``QuantizeLinear(AveragePool(DequantizeLinear(x)))``. onnxruntime's kernels add the zero point
before rounding, so an exact half rounds by the parity of ``value + zero point`` (an exact
-73.5 becomes -73 with an odd zero point, where QuantizeLinear's round half to even gives
-74), and divide in float32. The executor takes the exact quotient instead.

A QDQ ``DequantizeLinear -> AveragePool -> QuantizeLinear`` run as a float host op computes in
float64 (``executor.run(float64=True)``, as the runtime runs host steps): in float32 an exact
-73.5 came out as -73 at some scales; in float64 the half is exact. Folded (its divisor varies:
the pooling-matrix GEMM of :mod:`fusion.passes._qdq_pool`), the requantize of each divisor is
exact on every window sum, so the halves round to even there too.
"""

from fractions import Fraction

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from fusion.frontend import import_onnx
from fusion.passes.driver import optimize
from fusion.reference import executor

MS = "com.microsoft"


def _model(op, x, scales, zps, **attrs):
    dtype = {np.dtype("int8"): TensorProto.INT8, np.dtype("uint8"): TensorProto.UINT8}[x.dtype]
    t = x.dtype.type
    inits = {"xs": np.float32(scales[0]), "xz": t(zps[0]), "ys": np.float32(scales[1]),
             "yz": t(zps[1])}
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", dtype,
                                                                             x.shape)],
                              [helper.make_tensor_value_info("y", dtype, None)],
                              [numpy_helper.from_array(np.asarray(v), k)
                               for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid(MS, 1)])


def _run(model, x):
    return executor.run(import_onnx(model), {"x": x})["y"]


def _round_half_even(value: Fraction) -> int:
    floor = value.numerator // value.denominator
    rest = value - floor
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2):
        return floor + 1
    return floor


def _exact(window_sum: int, count: int, scales, zps, dtype) -> int:
    real = Fraction(window_sum) * Fraction(float(np.float32(scales[0]))) / (
        count * Fraction(float(np.float32(scales[1]))))
    info = np.iinfo(dtype)
    return min(max(_round_half_even(real) + int(zps[1]), int(info.min)), int(info.max))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("y_zp", [0, 1, 5, 6])  # even and odd zero points
def test_exact_halves_of_both_signs_round_to_even(dtype, y_zp):
    # A [1, 2] window over x with x_zp = 0 (int8) or 128 (uint8): each pair sums to 2k + 1,
    # an exact half k + 0.5 of both signs and parities (-73.5, -72.5, ..., 72.5, 73.5).
    x_zp = 0 if dtype == "int8" else 128
    halves = [-147, -145, -3, -1, 1, 3, 145, 147]
    pairs = [(s // 2, s - s // 2) for s in halves]
    x = (np.array(pairs, np.int64).reshape(1, 1, len(halves), 2) + x_zp).astype(dtype)
    y_zp_typed = y_zp if dtype == "int8" else y_zp + 100
    scales, zps = (0.05, 0.05), (x_zp, y_zp_typed)
    got = _run(_model("QLinearAveragePool", x, scales, zps, kernel_shape=[1, 2]), x)
    want = [_exact(s, 2, scales, zps, dtype) for s in halves]
    assert got.ravel().tolist() == want
    # -73.5 rounds to -74 (even), 72.5 to 72, whatever the zero point's parity
    assert int(got.ravel()[0]) - y_zp_typed == -74
    assert int(got.ravel()[-2]) - y_zp_typed == 72


@pytest.mark.parametrize("y_zp", [0, 3])
def test_global_pool_halves_round_to_even(y_zp):
    sums = np.array([-147, -145, 145, 147], np.int64)
    x = np.stack([sums // 2, sums - sums // 2], axis=-1).astype(np.int8).reshape(1, 4, 1, 2)
    scales, zps = (0.02, 0.02), (0, y_zp)
    got = _run(_model("QLinearGlobalAveragePool", x, scales, zps), x)
    assert got.ravel().tolist() == [_exact(int(s), 2, scales, zps, "int8") for s in sums]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), kernel=st.sampled_from([(2, 2), (3, 3), (1, 4)]),
       pad=st.sampled_from([0, 1]), include=st.sampled_from([0, 1]),
       scales=st.sampled_from([(0.05, 0.05), (0.043, 0.031), (0.5, 0.125), (0.01, 0.07)]),
       zps=st.sampled_from([(0, 0), (-3, 7), (5, -1)]))
def test_window_pools_match_fractions(seed, kernel, pad, include, scales, zps):
    # count_include_pad = 0 with padding gives border windows other divisors than the kernel
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, 2, 5, 6)).astype(np.int8)
    pads = [min(pad, k - 1) for k in kernel] * 2
    model = _model("QLinearAveragePool", x, scales, zps, kernel_shape=list(kernel),
                   pads=pads, count_include_pad=include)
    # the host's pool, and the folded integer one (exact multipliers, or left to the host)
    host, folded = _run(model, x), executor.run(optimize(import_onnx(model)), {"x": x})["y"]
    np.testing.assert_array_equal(folded, host)
    got = host
    padded = np.pad(x.astype(np.int64) - zps[0],
                    [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    inside = np.pad(np.ones(x.shape[2:], np.int64), [(pads[0], pads[2]), (pads[1], pads[3])],
                    constant_values=include)
    for c in range(x.shape[1]):
        for i in range(got.shape[2]):
            for j in range(got.shape[3]):
                window = (slice(i, i + kernel[0]), slice(j, j + kernel[1]))
                want = _exact(int(padded[0, c][window].sum()), int(inside[window].sum()),
                              scales, zps, "int8")
                assert int(got[0, c, i, j]) == want, (c, i, j)


def _qdq_pool(scale: float, zp: int) -> onnx.ModelProto:
    """``Q(AveragePool(DQ(x)))`` whose border windows count 2 (``count_include_pad`` = 0)."""
    inits = [numpy_helper.from_array(np.float32(scale), "s"),
             numpy_helper.from_array(np.int8(zp), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xd"]),
             helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[1, 3],
                              pads=[0, 1, 0, 1]),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_pool",
                              [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 1, 1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("pair", [(-73, -74), (72, 73), (-1, -2), (0, 1)])
@pytest.mark.parametrize("zp", [0, 3])
def test_exact_halves_round_to_even_on_the_host_and_folded(pair, zp):
    # At this scale float32 arithmetic (DequantizeLinear products, the mean, the division in
    # QuantizeLinear) gave -73 for the exact -73.5; the host computes in float64 (as
    # fusion.runtime.run runs host steps), where the half is exact and rounds to even, and the
    # folded pool's requantize divides by 2 exactly, rounding half to even.
    scale = 0.04620436206459999
    imported = import_onnx(_qdq_pool(scale, zp))
    folded = optimize(imported)
    assert "AveragePool" not in [n.op for n in folded.nodes]
    x = (np.array(pair, np.int64).reshape(1, 1, 1, 2) + zp).astype(np.int8)
    half = _exact(sum(pair), 2, (scale, scale), (0, zp), "int8")
    for graph in (imported, folded):
        got = executor.run(graph, {"x": x}, float64=True)["y"].ravel()
        assert got.tolist() == [half, half]
