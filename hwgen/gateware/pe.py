"""One processing element of the output-stationary systolic array."""

from __future__ import annotations

from amaranth import Array, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hwgen.config import VariantConfig


class ProcessingElement(wiring.Component):
    """A multiply-accumulate cell that keeps its output in place.

    Operands enter from the left (``a``) and the top (``b``) and leave, one cycle later,
    to the right and the bottom. ``last`` travels with ``a``: the cycle it arrives, the cell
    moves its finished sum (including this product) into ``res`` and restarts its
    accumulator at zero, so the next tile can stream in behind the last one with no gap.
    ``res`` registers form one shift chain per column: while ``shift`` is high every cell
    takes ``res_in`` from the cell below, and the top row leaves the array.

    With ``acc_banks`` > 1 the cell holds that many accumulators, and ``bank`` (travelling
    with ``a`` and ``last``) picks the one a product adds to; ``last`` moves that bank's sum
    out and restarts it. So several tiles can each be part way through their reduction at
    once (a super tile's tiles over one k chunk, then the next chunk), while one tile at a
    time drains. One bank is the single register it always was.

    The accumulator wraps at ``acc_bits``, like the reference.
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        op, acc = signed(config.operand_bits), signed(config.acc_bits)
        a_op = signed(config.operand_bits + 1)  # A less its zero point (the array's edge)
        bits = ceil_log2(config.acc_banks)
        banks = {"bank_in": In(bits), "bank_out": Out(bits)} if config.acc_banks > 1 else {}
        super().__init__({
            "a_in": In(a_op), "b_in": In(op), "last_in": In(1),
            "a_out": Out(a_op), "b_out": Out(op), "last_out": Out(1),
            "shift": In(1), "res_in": In(acc), "res": Out(acc),
            **banks,
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        if c.acc_banks > 1:
            accs = Array(Signal(signed(c.acc_bits), name=f"acc{n}") for n in range(c.acc_banks))
            acc = accs[self.bank_in]
            m.d.sync += self.bank_out.eq(self.bank_in)
        else:
            acc = Signal(signed(c.acc_bits))
        total = Signal(signed(c.acc_bits))  # truncation here is the wrap-around
        m.d.comb += total.eq(acc + self.a_in * self.b_in)
        m.d.sync += [
            self.a_out.eq(self.a_in),
            self.b_out.eq(self.b_in),
            self.last_out.eq(self.last_in),
        ]
        # The feeder never lets a capture coincide with a shift (one tile drains at a time).
        with m.If(self.last_in):
            m.d.sync += [acc.eq(0), self.res.eq(total)]
        with m.Else():
            m.d.sync += acc.eq(total)
            with m.If(self.shift):
                m.d.sync += self.res.eq(self.res_in)
        return m
