"""int8 products built from LUTs, for units that must leave the DSP blocks to others.

An ECP5 has few multipliers (156 MULT18X18D on the largest part) and yosys spends a whole one
on every int8 product. The PE array and the epilogue need theirs; the window unit's nine taps a
lane would take another ``9 * cols`` (72 at 8x8) and the design would fit no part. So the
window unit multiplies in LUTs, with the terms of this module.

Radix-4 Booth: a signed 8-bit ``y`` is ``sum(d_i * 4**i)`` over four digits
``d_i = -2*y[2i+1] + y[2i] + y[2i-1]`` in ``{-2, ..., 2}`` (``y[-1] = 0``), so ``x * y`` is four
partial products ``d_i * x``, each a choice of ``0``, ``x`` or ``2x``, inverted when ``d_i < 0``
(``-v = ~v + 1``: the ``+ 1`` is a bit of a term of its own). Each inverted-or-not choice fits
9 signed bits; flipping its sign bit makes it unsigned and adds ``256`` (``v = (v ^ 0x100) -
256``), and the ``-256 * 4**i`` of the four partial products is one constant for the caller to
add once, after any number of products are summed. The terms are then unsigned and narrow (the
widest ends at bit 14), which keeps yosys's adder tree small: an unsigned form costs about 5%
more LUTs than yosys's own ``booth`` pass, a sign-extended one 50% more.
"""

from __future__ import annotations

from amaranth import Cat, Const, Mux, Value

#: What :func:`booth_terms` leaves out of every product: ``-256 * (1 + 4 + 16 + 64)``.
BOOTH_OFFSET = -256 * 85


def booth_terms(x: Value, y: Value) -> list[Value]:
    """Unsigned terms whose sum plus :data:`BOOTH_OFFSET` is ``x * y``.

    Parameters
    ----------
    x, y:
        Signed 8-bit values. ``y`` is Booth-recoded, a level of logic deeper than ``x``:
        give it the operand that is ready first.

    Returns
    -------
    list of Value
        Five unsigned terms (four partial products and their negation bits), each at most
        15 bits wide; their sum is ``x * y - BOOTH_OFFSET``, from 5,504 to 38,144 (16 bits).
    """
    xs = x.as_signed()
    terms, negs = [], []
    for i in range(4):
        lower = y[2 * i - 1] if i else Const(0, 1)
        b0, b1 = y[2 * i], y[2 * i + 1]
        one = b0 ^ lower  # |d| == 1
        two = Mux(b1, ~b0 & ~lower, b0 & lower)  # |d| == 2
        neg = b1  # d < 0, or d == -0 (b1 b0 lower all set), where ~0 + 1 is 0 too
        magnitude = Mux(two, xs << 1, Mux(one, xs, 0))
        choice = Mux(neg, ~magnitude, magnitude)[:9]
        terms.append(Cat(choice[:8], ~choice[8]).shift_left(2 * i))
        negs += [neg, Const(0, 1)]
    terms.append(Cat(*negs[:7]))
    return terms
