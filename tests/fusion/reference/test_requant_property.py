"""Hypothesis properties of the graph-level requantize against exact rational arithmetic.

``tests/hwgen/test_reference.py`` already pins the scalar ``hwgen.reference.requantize``
(int8 output, one mult/shift) to ``Fraction`` arithmetic and bounds ``quantize_multiplier``'s
error. Here we check what the graph ops add on top of it:

* the ``requant`` op per channel and with a uint8 output (the sign-bit flip of the int8 unit);
* that requantizing with ``requant_attrs(scale)`` is the exact ``round(x * scale)``, except where
  ``x * scale`` lies within the multiplier's approximation error of a rounding boundary
  (the one reason the integer graph can differ from float ONNX by one LSB);
* the same kind of bound for ``qadd`` (31-bit input multipliers, one rounding half to even)
  against the exact real sum of its dequantized inputs.
"""

from fractions import Fraction
from math import floor

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir import ops
from fusion.reference.hwgen_ops import requant
from hwgen.lanes import residual_scaled
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


def round_half_even(value: Fraction) -> int:
    down = floor(value)
    rest = value - down
    return down + (rest > Fraction(1, 2) or (rest == Fraction(1, 2) and down % 2 == 1))


@settings(max_examples=500)
@given(a=st.integers(-128, 127), b=st.integers(-128, 127), a_zp=st.integers(-128, 127),
       b_zp=st.integers(-128, 127), a_scale=scales, b_ratio=st.floats(1e-4, 1e4),
       ratio=st.floats(1e-3, 1e3), zp=st.integers(-128, 127), out_dtype=out_dtypes)
def test_qadd_is_within_its_bound_of_the_exact_sum(a, b, a_zp, b_zp, a_scale, b_ratio, ratio,
                                                   zp, out_dtype):
    """``qadd`` rounds its exact integer sum once, half to even, and that sum is within
    :func:`qadd_error_bound` of the real one: so the result is ONNX's ``DQ -> Add -> Q``
    (computed here in exact rationals) unless the real sum lies within the bound (about
    1e-7 LSB) of a rounding boundary, and never more than one LSB from it."""
    b_scale = a_scale * b_ratio
    y_scale = max(a_scale, b_scale) * ratio
    zp = zp + 128 if out_dtype == "uint8" else zp
    attrs = ops.qadd_attrs(a_scale, b_scale, y_scale, zp, out_dtype=out_dtype)
    am, bm, shift = attrs["a_mult"], attrs["b_mult"], attrs["shift"]
    da, db = a - a_zp, b - b_zp
    lo, hi = ops.INT_RANGE[out_dtype]
    got = int(residual_scaled(np.array([a]), np.array([b]), am, bm, shift, a_zp, b_zp, zp,
                              lo, hi)[0])
    computed = Fraction(da * am + db * bm, 1 << shift)
    assert got == saturate(round_half_even(computed) + zp, out_dtype)  # one rounding
    exact = (Fraction(a_scale) * da + Fraction(b_scale) * db) / Fraction(y_scale)
    bound = ops.qadd_error_bound(attrs, a_scale, b_scale, y_scale, abs(da), abs(db))
    assert abs(computed - exact) <= bound <= Fraction(abs(da) + abs(db), 1 << (shift + 1))
    onnx = saturate(round_half_even(exact) + zp, out_dtype)
    assert abs(got - onnx) <= 1
    boundary = floor(exact) + Fraction(1, 2)
    if abs(exact - boundary) > bound:
        assert got == onnx
