"""The LUT multiplier's terms against Python's products, in Amaranth's simulator.

Every ``y`` with a spread of ``x`` (the extremes, both signs, the values around each power
of two): Booth recoding goes wrong at its digit boundaries, which ``y`` covers exhaustively.
"""

from amaranth import Module, Signal, signed
from amaranth.sim import Simulator

from hwgen.gateware.products import BOOTH_OFFSET, booth_terms

XS = sorted({-128, -127, -65, -64, -63, -2, -1, 0, 1, 2, 63, 64, 65, 126, 127}
            | {(v * 37) % 256 - 128 for v in range(16)})


def test_booth_terms_give_every_product():
    m = Module()
    x, y = Signal(signed(8)), Signal(signed(8))
    out = Signal(signed(20))
    terms = booth_terms(x, y)
    assert all(not t.shape().signed and len(t) <= 15 for t in terms)
    m.d.comb += out.eq(sum(terms) + BOOTH_OFFSET)
    wrong = []

    async def bench(ctx):
        for yv in range(-128, 128):
            ctx.set(y, yv)
            for xv in XS:
                ctx.set(x, xv)
                if ctx.get(out) != xv * yv:
                    wrong.append((xv, yv, ctx.get(out)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, f"{len(wrong)} wrong products, first (x, y, got): {wrong[:3]}"
