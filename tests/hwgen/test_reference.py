"""The numpy reference: exact integer semantics of the GEMM and every epilogue stage."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwgen import reference as ref
from hwgen.reference import INT32_MAX, INT32_MIN, EpilogueParams

int32s = st.integers(INT32_MIN, INT32_MAX)


def test_gemm_matches_integer_matmul():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (7, 300))
    b = rng.integers(-128, 128, (300, 5))
    got = ref.gemm(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_gemm_wraps_like_32_bit_accumulators():
    a = np.full((1, 1 << 17), -128)
    b = np.full((1 << 17, 1), -128)
    assert ref.gemm(a, b)[0, 0] == np.int32(np.int64(1 << 31) - (1 << 32))  # 2**31 wraps


def test_gemm_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="M x K and K x N"):
        ref.gemm(np.zeros((2, 3), int), np.zeros((4, 2), int))


@pytest.mark.parametrize("x, shift, want", [
    (5, 1, 3), (-5, 1, -2), (-3, 1, -1), (3, 1, 2), (7, 2, 2), (-6, 2, -1), (-10, 2, -2),
    (100, 0, 100), (1, 63, 0),
])
def test_requantize_rounds_half_toward_plus_infinity(x, shift, want):
    assert ref.requantize(np.array([x]), 1, shift, 0)[0] == want


@given(x=int32s, mult=int32s, shift=st.integers(0, 63), zp=st.integers(-300, 300))
def test_requantize_is_exact(x, mult, shift, zp):
    exact = Fraction(x * mult, 1 << shift) + Fraction(1, 2)
    y = exact.numerator // exact.denominator  # floor(x*mult/2**shift + 1/2)
    want = min(max(y + zp, -128), 127)
    assert ref.requantize(np.array([x], np.int32), mult, shift, zp)[0] == want


def test_bias_saturates_to_int32():
    x = np.array([[INT32_MAX, INT32_MIN, 5]], np.int32)
    got = ref.bias_add(x, np.array([1, -1, -10]))
    np.testing.assert_array_equal(got, [[INT32_MAX, INT32_MIN, -5]])


def test_residual_saturates_to_int8():
    got = ref.residual_add(np.array([100, -100, 1000, 3]), np.array([100, -100, -128, 4]))
    np.testing.assert_array_equal(got, [127, -128, 127, 7])


def test_relu_and_clamp():
    x = np.array([-5, 0, 7, 300])
    np.testing.assert_array_equal(ref.relu(x), [0, 0, 7, 300])
    np.testing.assert_array_equal(ref.clamp(x, -2, 100), [-2, 0, 7, 100])


def test_epilogue_applies_stages_in_the_given_order():
    x = np.array([[-1000, 1000]])
    params = EpilogueParams(mult=1, shift=2, zp=0)
    # relu then requant: 0 and 250 -> 0 and sat8(250) = 127
    a = ref.epilogue(x, ("requant", "relu"), params)
    np.testing.assert_array_equal(a, [[0, 127]])
    bias = np.array([2000, 0])
    np.testing.assert_array_equal(ref.epilogue(x, ("bias", "requant"), params, bias=bias),
                                  [[127, 127]])


def test_epilogue_needs_its_operands():
    with pytest.raises(ValueError, match="bias stage needs a bias"):
        ref.epilogue(np.zeros((1, 1), int), ("bias",), EpilogueParams())
    with pytest.raises(ValueError, match="residual stage needs"):
        ref.epilogue(np.zeros((1, 1), int), ("residual",), EpilogueParams())


@pytest.mark.parametrize("stages, match", [
    (("relu", "bias"), "out of order"),
    (("bias", "bias"), "repeated or out of order"),
    (("gelu",), "is not in the chain"),
    ("bias", "not the string"),
])
def test_check_stages_names_the_problem(stages, match):
    with pytest.raises(ValueError, match=match):
        ref.check_stages(stages)


def test_output_dtype_and_low_byte_store():
    assert ref.output_dtype(()) == np.int32
    assert ref.output_dtype(("bias", "relu")) == np.int32
    assert ref.output_dtype(("requant",)) == np.int8
    assert ref.output_dtype(("residual",)) == np.int8
    np.testing.assert_array_equal(ref.to_dtype(np.array([200, -129, 5]), np.int8), [-56, 127, 5])


def test_gemm_epilogue_end_to_end():
    rng = np.random.default_rng(1)
    a, b = rng.integers(-128, 128, (4, 9)), rng.integers(-128, 128, (9, 3))
    bias = rng.integers(-1000, 1000, 3)
    params = EpilogueParams.from_scale(0.01, zp=-3)
    got = ref.gemm_epilogue(a, b, ("bias", "requant", "relu"), params, bias=bias)
    acc = a @ b + bias
    want = np.clip(np.floor(acc * params.mult / 2.0**params.shift + 0.5) - 3, -128, 127)
    np.testing.assert_array_equal(got, np.maximum(want, 0))
    assert got.dtype == np.int8


@pytest.mark.parametrize("kwargs, match", [
    ({"shift": 64}, "shift must be an integer from 0 to 63"),
    ({"shift": -1}, "shift"),
    ({"mult": 1 << 31}, "mult must be a signed 32-bit"),
    ({"zp": 1.5}, "zp must be a signed 32-bit"),
    ({"clamp_lo": 5, "clamp_hi": 4}, "clamp_lo \\(5\\) must not exceed clamp_hi \\(4\\)"),
])
def test_params_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EpilogueParams(**kwargs)


@given(scale=st.floats(2.0**-40, 2.0**30, allow_nan=False) | st.floats(-(2.0**30), -(2.0**-40)))
def test_quantize_multiplier_is_precise(scale):
    mult, shift = ref.quantize_multiplier(scale)
    assert INT32_MIN <= mult <= INT32_MAX and 0 <= shift <= 63
    error = abs(mult / 2.0**shift - scale)
    if shift < 63:
        # full precision: abs(mult) in [2**30, 2**31), rounded to the nearest
        assert 1 << 30 <= abs(mult) < 1 << 31
        assert error <= abs(scale) * 2.0**-31
    else:
        # the shift limit binds (abs(scale) < 2**-33): rounded to the nearest 2**-63
        assert error <= 2.0**-64
    assert (mult < 0) == (scale < 0)


def test_quantize_multiplier_edges():
    assert ref.quantize_multiplier(0.0) == (0, 0)
    assert ref.quantize_multiplier(1.0) == (1 << 30, 30)
    mult, shift = ref.quantize_multiplier(2.0**-60)
    assert shift == 63 and mult == 8
    with pytest.raises(ValueError, match="too large"):
        ref.quantize_multiplier(2.0**31)
    with pytest.raises(ValueError, match="rounds to zero"):
        ref.quantize_multiplier(2.0**-70)
    with pytest.raises(ValueError, match="finite"):
        ref.quantize_multiplier(float("nan"))


def test_per_channel_requantize_is_per_column_per_tensor():
    rng = np.random.default_rng(5)
    x = rng.integers(-(1 << 24), 1 << 24, (6, 4))
    mults = np.array([1 << 30, -1518500250, 7, INT32_MAX])
    shifts = np.array([30, 0, 3, 63])
    params = EpilogueParams(zp=-4, per_channel=True, mult=99, shift=1)  # fields unused
    got = ref.epilogue(x, ("requant",), params, mult=mults, shift=shifts)
    for c in range(4):
        np.testing.assert_array_equal(got[:, c], ref.requantize(x[:, c], int(mults[c]),
                                                                int(shifts[c]), -4))
    # and gemm_epilogue threads the vectors through
    a, b = rng.integers(-128, 128, (3, 5)), rng.integers(-128, 128, (5, 4))
    np.testing.assert_array_equal(
        ref.gemm_epilogue(a, b, ("requant",), params, mult=mults, shift=shifts),
        ref.epilogue(ref.gemm(a, b), ("requant",), params, mult=mults, shift=shifts))


@pytest.mark.parametrize("mult, shift, match", [
    (None, [1, 2], "needs a mult vector of 2 values"),
    ([1, 2], None, "needs a shift vector of 2 values"),
    ([1, 2, 3], [1, 2], r"mult must be 2 integers .* shape \(3,\)"),
    ([1, 1 << 31], [1, 2], "mult has values outside"),
    ([1, 2], [0, 64], r"shift has values outside 0\.\.63"),
])
def test_per_channel_vectors_are_checked(mult, shift, match):
    params = EpilogueParams(per_channel=True)
    with pytest.raises(ValueError, match=match):
        ref.epilogue(np.zeros((1, 2), np.int32), ("requant",), params, mult=mult, shift=shift)


def test_residual_max_mode():
    x = np.array([[-300, -5, 5, 300, 10]])
    r = np.array([[-128, -6, 6, 127, 10]])
    params = EpilogueParams(residual_op="max")
    np.testing.assert_array_equal(ref.epilogue(x, ("residual",), params, residual=r),
                                  [[-128, -5, 6, 127, 10]])  # max, saturated to int8
    np.testing.assert_array_equal(ref.epilogue(x, ("residual",), EpilogueParams(), residual=r),
                                  [[-128, -11, 11, 127, 20]])


@pytest.mark.parametrize("kwargs, match", [
    ({"per_channel": 1}, "per_channel must be True or False"),
    ({"residual_op": "min"}, "residual_op must be one of add, max"),
])
def test_mode_params_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EpilogueParams(**kwargs)
