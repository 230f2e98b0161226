"""The host interface: a Wishbone target that is the only way into the accelerator.

Through it a host writes the program into the instruction memory, starts it, sees it finish
(by polling ``STATUS`` or by the ``irq`` line) and reads the performance counters. Addresses
and fields come from :mod:`hwgen.regmap`, which also generates the documentation.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.gateware.ports import counters_signature, imem_write_signature, wishbone_signature
from hwgen.perf import COUNTERS
from hwgen.regmap import (
    DATA_BITS,
    MAGIC,
    bus_addr_bits,
    counter_word,
    csr,
)


def build_id(config: VariantConfig) -> int:
    """What ``BUILD`` reads: the first 8 hex digits of the variant's key."""
    return int(config.key()[:8], 16)


class HostInterface(wiring.Component):
    """Wishbone B4 classic target (:func:`~hwgen.gateware.ports.wishbone_signature`).

    Ports: ``bus``; ``irq``; ``start`` (a one-cycle pulse to the core on a write of
    ``CTRL.START`` while it is not running); the core's ``running`` and ``done``; its
    ``counters``; ``imem``, the instruction memory's write port.

    Every access takes two cycles (``ack`` is registered): the address decode and the
    counters' read multiplexer get a cycle of their own rather than lengthening a path
    the array's clock must meet.
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        super().__init__({
            "bus": In(wishbone_signature(bus_addr_bits(config.imem_depth))),
            "irq": Out(1),
            "start": Out(1),
            "running": In(1),
            "done": In(1),
            "counters": In(counters_signature()),
            "imem": Out(imem_write_signature(config)),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        bus = self.bus
        ack = Signal()
        req = bus.cyc & bus.stb & ~ack
        m.d.sync += ack.eq(req)
        m.d.comb += bus.ack.eq(ack)
        write, read = req & bus.we, req & ~bus.we
        top = len(bus.adr) - 1
        in_imem = bus.adr[top]  # regmap.imem_base_word is the address's top bit
        word = bus.adr[:top]

        # The instruction memory: the low address bit picks the half.
        m.d.comb += [
            self.imem.addr.eq(word[1:]),
            self.imem.data.eq(Cat(bus.dat_w, bus.dat_w)),
            self.imem.en.eq(Mux(write & in_imem, Cat(~word[0], word[0]), 0)),
        ]

        irq_enable = Signal(1)
        irq_pending = Signal(1)
        done_before = Signal()
        hi_latch = Signal(max(1, len(self.counters.cycles) - DATA_BITS))
        m.d.sync += done_before.eq(self.done)
        with m.If(self.done & ~done_before):
            m.d.sync += irq_pending.eq(1)
        m.d.comb += self.irq.eq(irq_pending & irq_enable)

        csr_write = write & ~in_imem
        start_bit = csr("CTRL").field("START").lo
        with m.If(csr_write & (word == csr("CTRL").word) & bus.dat_w[start_bit]
                  & ~self.running):
            m.d.sync += self.start.eq(1)
        with m.Else():
            m.d.sync += self.start.eq(0)
        with m.If(csr_write & (word == csr("IRQ_ENABLE").word)):
            m.d.sync += irq_enable.eq(bus.dat_w[:1])
        with m.If(csr_write & (word == csr("IRQ_PENDING").word) & bus.dat_w[0]):
            m.d.sync += irq_pending.eq(0)

        status = csr("STATUS")
        readable = {
            csr("ID").word: Const(MAGIC, DATA_BITS),
            csr("BUILD").word: Const(build_id(c), DATA_BITS),
            status.word: (self.running << status.field("RUNNING").lo)
            | (self.done << status.field("DONE").lo),
            csr("IRQ_ENABLE").word: irq_enable,
            csr("IRQ_PENDING").word: irq_pending,
            csr("IMEM_DEPTH").word: Const(c.imem_depth, DATA_BITS),
        }
        dat_r = Signal(DATA_BITS)
        m.d.comb += bus.dat_r.eq(dat_r)
        with m.If(read):
            m.d.sync += dat_r.eq(0)
            with m.If(~in_imem):
                with m.Switch(word):
                    for addr, value in readable.items():
                        with m.Case(addr):
                            m.d.sync += dat_r.eq(value)
                    for name in COUNTERS:
                        value = getattr(self.counters, name)
                        with m.Case(counter_word(name)):
                            m.d.sync += [dat_r.eq(value[:DATA_BITS]),
                                         hi_latch.eq(value[DATA_BITS:])]
                        with m.Case(counter_word(name) + 1):
                            m.d.sync += dat_r.eq(hi_latch)
        return m
