"""The board's top: the system on chip on the pins of an ``amaranth-boards`` platform.

The top is Amaranth, so that the pins, their I/O standards and the constraints file come
from the board's ``amaranth-boards`` definition. It holds what LiteX's system on chip
(:mod:`hwgen.board.soc`) leaves to the board:

- the **PLL** (``EHXPLLL``, :mod:`hwgen.board.pll`) from the board's oscillator to the system
  clock; nextpnr derives the system clock's constraint from the oscillator's and the
  dividers, and :mod:`hwgen.board.build` checks that it timed that clock;
- the **reset**: held from power-up until the PLL has locked and a further
  :data:`POR_CYCLES` have passed (the board's buttons are not a reset: no board's is wired
  alike, and a host link must not depend on one);
- the **SDRAM clock**: the system clock inverted through an output DDR register
  (``ODDRX1F``), so the SDRAM samples commands and data in the middle of their cycle, as
  LiteX's SDR boards do;
- the pins of the UART and the SDRAM, passed to the system on chip unbuffered (its PHY has
  its own I/O registers and tristates).
"""

from __future__ import annotations

from amaranth import ClockDomain, ClockSignal, Const, Elaboratable, Instance, Module, Signal
from amaranth.lib import io
from amaranth.lib.cdc import FFSynchronizer

from hwgen.board import soc
from hwgen.board.design import BoardDesign
from hwgen.board.pll import solve

#: Cycles of the system clock the reset is held after the PLL locks.
POR_CYCLES = 4096
#: amaranth-boards' SDRAM subsignal -> the system on chip's port.
SDRAM_PORTS = {"a": "sdram_a", "ba": "sdram_ba", "cs": "sdram_cs_n", "clk_en": "sdram_cke",
               "ras": "sdram_ras_n", "cas": "sdram_cas_n", "we": "sdram_we_n",
               "dq": "sdram_dq", "dqm": "sdram_dm"}
#: Which of them the system on chip drives (the rest it reads or drives both ways).
SDRAM_OUTPUTS = {"a", "ba", "cs", "clk_en", "ras", "cas", "we", "dqm"}


class BoardTop(Elaboratable):
    """The top of one board design (module ``top``).

    Parameters
    ----------
    design : BoardDesign
    clock_input_hz : int
        The board oscillator's frequency.
    """

    def __init__(self, design: BoardDesign, clock_input_hz: int):
        self.design = design
        self.pll = solve(clock_input_hz, design.clock_hz)

    def elaborate(self, platform):
        m = Module()
        board = self.design.board
        m.submodules.clk_in = clk_in = io.Buffer(
            "i", platform.request(board.clock_resource, 0, dir="-"))
        sys_clk, locked = Signal(name="sys_clk"), Signal(name="pll_locked")
        m.submodules.pll = Instance(
            "EHXPLLL", **self.pll.parameters(),
            i_CLKI=clk_in.i, o_CLKOP=sys_clk, i_CLKFB=sys_clk, o_LOCK=locked,
            i_RST=Const(0), i_STDBY=Const(0), i_PHASESEL0=Const(0), i_PHASESEL1=Const(0),
            i_PHASEDIR=Const(0), i_PHASESTEP=Const(0), i_PHASELOADREG=Const(0),
            i_PLLWAKESYNC=Const(0), i_ENCLKOP=Const(0))
        # No constraint of its own: nextpnr derives the PLL output's from the oscillator's
        # (amaranth-boards constrains the pin) and the PLL's dividers; a FREQUENCY NET on
        # this signal would name a net that synthesis renames, and be ignored.

        # A reset-less domain counts the cycles since lock; the system's reset is its output.
        m.domains.por = ClockDomain("por", reset_less=True)
        m.d.comb += ClockSignal("por").eq(sys_clk)
        locked_sync = Signal()
        m.submodules.lock_sync = FFSynchronizer(locked, locked_sync, o_domain="por")
        count = Signal(range(POR_CYCLES + 1))
        sys_rst = Signal(init=1)
        with m.If(~locked_sync):
            m.d.por += count.eq(0)
        with m.Elif(count != POR_CYCLES):
            m.d.por += count.eq(count + 1)
        m.d.por += sys_rst.eq(count != POR_CYCLES)

        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx = rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = tx = io.Buffer("o", uart.tx)
        sdram = platform.request("sdram", 0, dir="-")
        conn = {}
        for sub, port in SDRAM_PORTS.items():
            pins = getattr(sdram, sub)
            conn[("o_" if sub in SDRAM_OUTPUTS else "io_") + port] = pins.io
        m.submodules.sdram_clk = Instance(
            "ODDRX1F", i_SCLK=sys_clk, i_RST=Const(0), i_D0=Const(0), i_D1=Const(1),
            o_Q=sdram.clk.io)
        m.submodules.soc = Instance(
            soc.MODULE,
            **{f"i_{soc.PORTS['clk']}": sys_clk, f"i_{soc.PORTS['rst']}": sys_rst,
               f"i_{soc.PORTS['rx']}": rx.i, f"o_{soc.PORTS['tx']}": tx.o},
            **conn)
        return m
