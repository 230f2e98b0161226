"""Hypothesis properties of the graph-level requantize against exact rational arithmetic.

``tests/hwgen/test_reference.py`` already pins the scalar ``hwgen.reference.requantize``
(int8 output, one mult/shift) to ``Fraction`` arithmetic and bounds ``quantize_multiplier``'s
error. Here we check what the graph ops add on top of it:

* the ``requant`` op per channel and with a uint8 output (the sign-bit flip of the int8 unit);
* that requantizing with ``requant_attrs(scale)`` is the exact ``round(x * scale)``, except where
  ``x * scale`` lies within the multiplier's approximation error of a rounding boundary
  (the one reason the integer graph can differ from float ONNX by one LSB);
* the same kind of bound for ``qadd`` (whose int8 input multipliers add their own error)
  against the exact real sum of its dequantized inputs.
"""

from fractions import Fraction
from math import floor

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir import ops
from fusion.reference.hwgen_ops import requant
from hwgen.reference import INT32_MAX, INT32_MIN

int32s = st.integers(INT32_MIN, INT32_MAX)
out_dtypes = st.sampled_from(["int8", "uint8"])


def round_half_up(value: Fraction) -> int:
    return floor(value + Fraction(1, 2))


def saturate(value: int, dtype: str) -> int:
    lo, hi = ops.INT_RANGE[dtype]
    return min(max(value, lo), hi)


@given(data=st.data(), channels=st.integers(1, 4), rows=st.integers(1, 3),
       axis=st.sampled_from([0, 1, -1]), out_dtype=out_dtypes)
def test_per_channel_requant_is_exact(data, channels, rows, axis, out_dtype):
    shape = [rows, channels] if axis in (1, -1) else [channels, rows]
    x = np.array(data.draw(st.lists(int32s, min_size=rows * channels,
                                    max_size=rows * channels)), np.int64).reshape(shape)
    mults = tuple(data.draw(st.lists(int32s, min_size=channels, max_size=channels)))
    shifts = tuple(data.draw(st.lists(st.integers(0, 63), min_size=channels, max_size=channels)))
    lo, hi = ops.INT_RANGE[out_dtype]
    zp = data.draw(st.integers(lo, hi))
    got = requant(x, mults, shifts, zp, out_dtype, axis)
    assert got.dtype == out_dtype
    for index in np.ndindex(*shape):
        c = index[axis]
        exact = Fraction(int(x[index]) * mults[c], 1 << shifts[c])
        assert got[index] == saturate(round_half_up(exact) + zp, out_dtype)


@given(x=int32s, mult=int32s, shift=st.integers(0, 63), zp=st.integers(0, 255))
def test_uint8_requant_is_the_int8_unit_with_a_flipped_sign_bit(x, mult, shift, zp):
    got = requant(np.array([x]), mult, shift, zp, "uint8")[0]
    via_int8 = requant(np.array([x]), mult, shift, zp - 128, "int8")[0]
    assert int(got) == saturate(round_half_up(Fraction(x * mult, 1 << shift)) + zp, "uint8")
    assert int(got) == (int(via_int8) ^ -128) & 0xFF  # the hardware's view: flip bit 7


scales = st.floats(2.0**-20, 2.0**6, allow_nan=False, allow_infinity=False)


@settings(max_examples=300)
@given(x=st.integers(-(1 << 24), 1 << 24), scale=scales, zp=st.integers(-128, 127))
def test_requant_rounds_the_exact_product_unless_it_is_within_the_error_of_a_tie(x, scale, zp):
    attrs = ops.requant_attrs(scale, zp)
    got = int(requant(np.array([x]), attrs["mult"], attrs["shift"], zp, "int8")[0])
    exact = Fraction(x) * Fraction(scale)
    # quantize_multiplier's documented bound: |mult / 2**shift - scale| <= scale * 2**-31
    err = abs(Fraction(x)) * Fraction(scale) * Fraction(1, 1 << 31)
    lo = saturate(round_half_up(exact - err) + zp, "int8")
    hi = saturate(round_half_up(exact + err) + zp, "int8")
    assert lo <= got <= hi
    assert hi - lo <= 1  # so the integer result is at most one LSB from the float one
    if lo == hi:
        assert got == saturate(round_half_up(exact) + zp, "int8")


@settings(max_examples=300)
@given(a=st.integers(-128, 127), b=st.integers(-128, 127), a_zp=st.integers(-128, 127),
       b_zp=st.integers(-128, 127), a_scale=scales, b_ratio=st.floats(1 / 250, 250),
       ratio=st.floats(0.25, 4), zp=st.integers(-128, 127))
def test_qadd_is_within_its_bound_of_the_exact_sum(a, b, a_zp, b_zp, a_scale, b_ratio, ratio,
                                                   zp):
    b_scale = a_scale * b_ratio
    y_scale = max(a_scale, b_scale) * ratio
    attrs = ops.qadd_attrs(a_scale, b_scale, y_scale, zp)
    am, bm = attrs["a_mult"], attrs["b_mult"]
    assert 1 <= min(am, bm) and max(am, bm) <= ops.QADD_MULT_MAX  # int8 GEMM weights
    # The best ratio is a fraction p/q; its largest multiple kp/kq <= 127 wins the tie.
    assert max(am, bm) >= (ops.QADD_MULT_MAX + 1) // 2
    da, db = a - a_zp, b - b_zp
    acc = da * am + db * bm
    got = int(requant(np.array([acc]), attrs["mult"], attrs["shift"], zp, "int8")[0])
    exact = (Fraction(a_scale) * da + Fraction(b_scale) * db) / Fraction(y_scale)
    # Error sources: the multipliers stand for the scales in units of larger / max(am, bm)
    # (the larger-scale input exactly, the other within half a unit), and the output
    # multiplier is within 2**-31 relative (quantize_multiplier).
    unit = Fraction(max(a_scale, b_scale)) / max(am, bm)
    off_a, off_b = abs(am * unit - Fraction(a_scale)), abs(bm * unit - Fraction(b_scale))
    assert min(off_a, off_b) == 0 and max(off_a, off_b) <= unit / 2
    grid = (abs(da) * off_a + abs(db) * off_b) / Fraction(y_scale)
    err = grid + (abs(exact) + grid) * Fraction(1, 1 << 31)
    lo = saturate(round_half_up(exact - err) + zp, "int8")
    hi = saturate(round_half_up(exact + err) + zp, "int8")
    assert lo <= got <= hi
    # qadd_error_bound bounds the error before rounding for any inputs of these zero points;
    # where it is below 1/2 (where qdq_fold folds an Add into a qadd) the result is at most
    # one LSB from the exactly rounded sum.
    spans = (max(128 + a_zp, 127 - a_zp), max(128 + b_zp, 127 - b_zp))
    bound = ops.qadd_error_bound(attrs, a_scale, b_scale, y_scale, *spans)
    computed = Fraction(acc * attrs["mult"], 1 << attrs["shift"])
    slack = Fraction(bound) * Fraction(1, 1 << 20) + Fraction(1, 1 << 40)  # bound is float64
    assert abs(computed - exact) <= Fraction(bound) + slack
    if bound < 0.5:
        assert abs(got - saturate(round_half_up(exact) + zp, "int8")) <= 1
