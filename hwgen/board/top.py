"""The board's top: the system on chip on the pins of an ``amaranth-boards`` platform.

The top is Amaranth, so that the pins, their I/O standards and the constraints file come
from the board's ``amaranth-boards`` definition. It holds what LiteX's system on chip
(:mod:`hwgen.board.soc`) leaves to the board:

- the **PLL** (``EHXPLLL``, :mod:`hwgen.board.pll`) from the board's oscillator to the system
  clock (with DDR3, to twice it: the system on chip's DDR3 PHY divides it, see
  :mod:`hwgen.board.soc`); nextpnr derives the clocks' constraints from the oscillator's and
  the dividers, and :mod:`hwgen.board.build` checks that it timed the system clock;
- the **reset**: held from power-up until the PLL has locked and a further
  :data:`POR_CYCLES` have passed (the board's buttons are not a reset: no board's is wired
  alike, and a host link must not depend on one);
- the **SDRAM clock** (SDR): the system clock inverted through an output DDR register
  (``ODDRX1F``), so the SDRAM samples commands and data in the middle of their cycle, as
  LiteX's SDR boards do (the DDR3 PHY drives its clock itself);
- the pins of the UART and the DRAM, passed to the system on chip unbuffered (its PHY has
  its own I/O registers and tristates); of a differential pair, the P pin, whose I/O
  standard makes the N.
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
#: Per memory: amaranth-boards' DRAM resource, and its subsignals -> the system on chip's
#: ports (:func:`hwgen.board.soc._dram_pads`).
DRAM_RESOURCE = {"sdr": "sdram", "ddr3": "ddr3"}
DRAM_PORTS = {
    "sdr": {"a": "sdram_a", "ba": "sdram_ba", "cs": "sdram_cs_n", "clk_en": "sdram_cke",
            "ras": "sdram_ras_n", "cas": "sdram_cas_n", "we": "sdram_we_n",
            "dq": "sdram_dq", "dqm": "sdram_dm"},
    "ddr3": {"a": "sdram_a", "ba": "sdram_ba", "clk_en": "sdram_cke", "ras": "sdram_ras_n",
             "cas": "sdram_cas_n", "we": "sdram_we_n", "dq": "sdram_dq", "dm": "sdram_dm",
             "odt": "sdram_odt", "clk": "sdram_clk_p", "dqs": "sdram_dqs_p"},
}
#: The subsignals both ways (the system on chip drives the rest).
DRAM_INOUTS = {"dq", "dqs"}


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
        self.ddr3 = design.board.memory == "ddr3"
        self.pll = solve(clock_input_hz, design.clock_hz * (2 if self.ddr3 else 1))

    def elaborate(self, platform):
        m = Module()
        board = self.design.board
        m.submodules.clk_in = clk_in = io.Buffer(
            "i", platform.request(board.clock_resource, 0, dir="-"))
        pll_clk, locked = Signal(name="pll_clk"), Signal(name="pll_locked")
        m.submodules.pll = Instance(
            "EHXPLLL", **self.pll.parameters(),
            i_CLKI=clk_in.i, o_CLKOP=pll_clk, i_CLKFB=pll_clk, o_LOCK=locked,
            i_RST=Const(0), i_STDBY=Const(0), i_PHASESEL0=Const(0), i_PHASESEL1=Const(0),
            i_PHASEDIR=Const(0), i_PHASESTEP=Const(0), i_PHASELOADREG=Const(0),
            i_PLLWAKESYNC=Const(0), i_ENCLKOP=Const(0))
        # No constraint of its own: nextpnr derives the PLL output's from the oscillator's
        # (amaranth-boards constrains the pin) and the PLL's dividers; a FREQUENCY NET on
        # this signal would name a net that synthesis renames, and be ignored.

        # A reset-less domain counts the cycles since lock; the system's reset is its output.
        # With DDR3 it counts on the oscillator: the system clock is made inside the system
        # on chip, and stops while the DDR3 PHY initializes.
        m.domains.por = ClockDomain("por", reset_less=True)
        m.d.comb += ClockSignal("por").eq(clk_in.i if self.ddr3 else pll_clk)
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
        ports = soc.PORTS
        conn = {f"i_{ports['rst']}": sys_rst, f"i_{ports['rx']}": rx.i,
                f"o_{ports['tx']}": tx.o}
        memory = board.memory
        dram = platform.request(DRAM_RESOURCE[memory], 0, dir="-")
        for sub, port in DRAM_PORTS[memory].items():
            pins = getattr(dram, sub)
            pins = pins.p if isinstance(pins, io.DifferentialPort) else pins.io
            conn[("io_" if sub in DRAM_INOUTS else "o_") + port] = pins
        if self.ddr3:
            conn[f"i_{ports['clk2x']}"] = pll_clk
            conn[f"i_{ports['init_clk']}"] = clk_in.i
        else:
            conn[f"i_{ports['clk']}"] = pll_clk
            m.submodules.sdram_clk = Instance(
                "ODDRX1F", i_SCLK=pll_clk, i_RST=Const(0), i_D0=Const(0), i_D1=Const(1),
                o_Q=dram.clk.io)
        m.submodules.soc = Instance(soc.MODULE, **conn)
        return m
