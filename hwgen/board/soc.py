"""The board's system on chip: the accelerator, its DRAM and a UART host bridge, as Verilog.

A LiteX ``SoCMini`` (no CPU) built in Migen and converted to one Verilog module,
:data:`MODULE`, whose ports are the board's pins (the clock and reset come from the board
top's PLL, :mod:`hwgen.board.top`). Inside it:

- **the host bridge**: LiteX's ``UARTBone`` (a UART-to-Wishbone master) at the board's baud
  rate, with a FIFO on its receiver. Its protocol (:mod:`hwgen.board.link`) reads and
  writes 32-bit words anywhere on the bus; it is the only way in, as a soft CPU's loads and
  stores would be;
- **the DRAM**: LiteDRAM's controller and crossbar behind the board's PHY (``GENSDRPHY`` for
  SDR, ``ECP5DDRPHY`` for DDR3; LiteDRAM's ``SDRAMPHYModel``, the DRAM chip as logic with
  the board PHY's settings, in a simulation build), with its initialization registers
  (``DFII``, and the DDR3 PHY's read-leveling registers) on the bus as LiteDRAM defines
  them, and the memory itself at :data:`DRAM_BASE` through a Wishbone-to-native port;
- **the DDR3 clocks** (a DDR3 board): the ECP5 PHY runs on the PLL's clock at twice the
  system clock, through the edge-clock primitives LiteX's ECP5 DDR3 boards use
  (``ECLKBRIDGECS``, ``ECLKSYNCB``, then ``CLKDIVF`` for the system clock), which the PHY's
  initialization stops and resets while its DLL locks; so the system clock is made here,
  not in the board top;
- **the accelerator**, ``hwgen_accel``, with its Wishbone target at :data:`ACCEL_BASE` and
  its memory port on a native port of its own through ``hwgen_mem_adapter``
  (:mod:`hwgen.gateware.native`), exactly as the accelerator-only DRAM simulation joins
  them (``rtl_templates/sim_top.sv.j2``);
- **the build identity** at :data:`IDENT_BASE`: :data:`IDENT_MAGIC`, then the eight words
  of the SHA-256 of the board design (:func:`hwgen.board.design.BoardDesign.digest`), which
  the host runtime reads first to refuse a bitstream that is not the folder's.

The CSR map (DFII's addresses) is LiteX's own and goes into ``soc.json`` beside the Verilog,
so the host never guesses an address.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from typing import Any

from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from hwgen.regmap import DATA_BITS, bus_addr_bits

#: The Verilog module name of the system on chip.
MODULE = "hwgen_board_soc"
#: Bus byte addresses of the regions (LiteX decodes the top bits).
ACCEL_BASE = 0x1000_0000
IDENT_BASE = 0x2000_0000
DRAM_BASE = 0x4000_0000
CSR_BASE = 0xF000_0000
#: Bytes the host bridge's receiver can hold while the bridge waits on the bus.
RX_FIFO_BYTES = 64
#: LiteX's CSR regions (2 KB each from :data:`CSR_BASE`), fixed so that a simulation build,
#: which lacks the DDR3 PHY's, has the board's map.
CSR_MAP = {"sdram": 0, "ddrphy": 1}
#: What the first identity word reads: "HWGB" in ASCII.
IDENT_MAGIC = 0x48574742
#: Words of the identity region: the magic, then the design digest's eight words.
IDENT_WORDS = 9
#: The SoC's Verilog ports, by role. A DDR3 board's SoC has no ``clk``: it takes ``clk2x``
#: (the PLL's output, twice the system clock) and ``init_clk`` (the board's oscillator, for
#: the PHY's initialization) and makes the system clock itself; a simulation build takes
#: ``clk`` whatever the memory.
PORTS = {"clk": "sys_clk", "rst": "sys_rst", "tx": "serial_tx", "rx": "serial_rx",
         "clk2x": "sys2x_clk", "init_clk": "init_clk"}
#: The DRAM pins both ways, which Migen declares as inputs when only a ``TRELLIS_IO`` or
#: ``BB`` drives them (:func:`hwgen.board.build.gateware_files` declares them ``inout``).
INOUT_PORTS = {"sdr": ("sdram_dq",), "ddr3": ("sdram_dq", "sdram_dqs_p")}
#: The ports each kind of build has.
CLOCK_PORTS = {"sdr": ("clk", "rst"), "ddr3": ("clk2x", "init_clk", "rst"),
               "sim": ("clk", "rst")}


@dataclass(frozen=True)
class SocVerilog:
    """A generated system on chip.

    Attributes
    ----------
    verilog : str
        Module :data:`MODULE` (LiteX's, with the accelerator and adapter as instances).
    spec : dict
        What ``soc.json`` holds: ``module``, ``ports``, ``regions`` (byte address and size of
        ``accel``, ``ident``, ``dram``, ``csr``), ``csr_registers`` (LiteX's name -> byte
        address, size in words), ``constants``, ``baud``, ``clock_hz``, ``sim``, ``dram``
        (what the host needs to initialize it: module, memtype, phase count, the init
        sequence's commands).
    """

    verilog: str
    spec: dict[str, Any]


def clock_ports(memory: str, sim: bool) -> dict[str, str]:
    """The SoC's clock and reset ports, role -> Verilog name, of a build."""
    return {role: PORTS[role] for role in CLOCK_PORTS["sim" if sim else memory]}


def _ios(memory: str, sim: bool, module) -> list:  # noqa: ANN001 - a LiteDRAM module
    from litex.build.generic_platform import Pins, Subsignal

    ios = [(name, 0, Pins(1)) for name in clock_ports(memory, sim).values()]
    ios.append(("serial", 0, Subsignal("tx", Pins(1)), Subsignal("rx", Pins(1))))
    if not sim:
        ios.append(("sdram", 0, *_dram_pads(memory, module)))
    return ios


def _dram_pads(memory: str, module) -> list:  # noqa: ANN001 - a LiteDRAM module
    """The DRAM's pins as LiteDRAM's PHY names them (one x16 chip)."""
    from litex.build.generic_platform import Pins, Subsignal

    geom = module.geom_settings
    common = [Subsignal("a", Pins(geom.addressbits)), Subsignal("ba", Pins(geom.bankbits)),
              Subsignal("cke", Pins(1)), Subsignal("ras_n", Pins(1)),
              Subsignal("cas_n", Pins(1)), Subsignal("we_n", Pins(1)),
              Subsignal("dq", Pins(16)), Subsignal("dm", Pins(2))]
    if memory == "sdr":
        return [*common, Subsignal("cs_n", Pins(1))]
    # DDR3: the clock and strobes are differential, of which the design drives the P pin
    # (the I/O standard makes the N); the ECPIX-5 ties CS# low and has no RESET# pin.
    return [*common, Subsignal("odt", Pins(1)), Subsignal("clk_p", Pins(1)),
            Subsignal("dqs_p", Pins(2))]


def _add_host_bridge(soc, baud: int) -> None:  # noqa: ANN001 - a LiteX SoC
    """LiteX's ``UARTBone``, as ``SoC.add_uartbone`` adds it, with a FIFO of
    :data:`RX_FIFO_BYTES` between the UART's receiver and the bridge.

    The receiver holds one byte, for one cycle. While the bridge waits on the bus, the next
    byte of a write burst would be lost: a DRAM write held up by a DDR3 refresh (75 cycles at
    50 MHz) outlasts a byte at 6 Mbaud (83 cycles), and one lost byte turns the rest of the
    session into garbage. The FIFO takes the bytes while the bus is busy; the bridge catches
    up between refreshes.
    """
    from litex.soc.cores import uart
    from litex.soc.interconnect import stream

    phy = uart.UARTPHY(soc.platform.request("serial"), soc.sys_clk_freq, baud)
    fifo = stream.SyncFIFO([("data", 8)], RX_FIFO_BYTES)
    soc.comb += phy.source.connect(fifo.sink)

    class Buffered:  # what the bridge takes of a UART PHY: its byte streams
        source, sink = fifo.source, phy.sink

    bridge = uart.UARTBone(phy=Buffered, clk_freq=soc.sys_clk_freq,
                           address_width=soc.bus.address_width)
    soc.add_module(name="uartbone_phy", module=phy)
    soc.add_module(name="uartbone_rx_fifo", module=fifo)
    soc.add_module(name="uartbone", module=bridge)
    soc.bus.add_master(name="uartbone", master=bridge.wishbone)


def _ddr3_clocks(soc, platform, phy) -> None:  # noqa: ANN001 - LiteX objects
    """The system and PHY clocks of a DDR3 board, as LiteX's ECP5 DDR3 CRG makes them from
    the PLL's double-rate clock (``litedram.gen.LiteDRAMECP5DDRPHYCRG``)."""
    from migen import ClockDomain, Instance, Signal
    from migen.genlib.resetsync import AsyncResetSynchronizer

    soc.cd_sys2x = ClockDomain("sys2x")
    soc.cd_init = ClockDomain("init")
    rst = platform.request(PORTS["rst"])
    ecsout = Signal()
    soc.comb += soc.cd_init.clk.eq(platform.request(PORTS["init_clk"]))
    soc.specials += [
        AsyncResetSynchronizer(soc.cd_init, rst),
        Instance("ECLKBRIDGECS", i_CLK0=platform.request(PORTS["clk2x"]), i_SEL=0,
                 o_ECSOUT=ecsout),
        Instance("ECLKSYNCB", i_ECLKI=ecsout, i_STOP=phy.init.stop,
                 o_ECLKO=soc.cd_sys2x.clk),
        Instance("CLKDIVF", p_DIV="2.0", i_ALIGNWD=0, i_CLKI=soc.cd_sys2x.clk,
                 i_RST=phy.init.reset, o_CDIVX=soc.cd_sys.clk),
        AsyncResetSynchronizer(soc.cd_sys, rst | phy.init.reset),
        AsyncResetSynchronizer(soc.cd_sys2x, rst | phy.init.reset),
    ]


def _soc_class():
    """LiteX's ``SoCMini`` with the CSR regions at fixed places: a simulation build has no
    PHY registers, and must still put DFII where the board's does (the host reads the map of
    the board's build)."""
    from litex.soc.integration.soc_core import SoCMini

    class SoC(SoCMini):
        csr_map = CSR_MAP

    return SoC


def _build(config: VariantConfig, *, platform_config: PlatformConfig, baud: int, sim: bool,
           ident: list[int], device: str):
    """The LiteX SoC (not yet finalized) and its platform."""
    from litedram.phy import ECP5DDRPHY, GENSDRPHY
    from litedram.phy.model import SDRAMPHYModel
    from litex.build.lattice import LatticePlatform
    from litex.soc.integration.soc import SoCRegion
    from litex.soc.interconnect import wishbone
    from migen import Case, ClockDomain, Instance, Signal

    from sim.dram.generate import ACTIVATE_BITS, drop_litex_shims, litedram_module, phy_settings

    drop_litex_shims()
    _SoC = _soc_class()  # noqa: N806 - a class
    memory, clock_hz = platform_config.memory, platform_config.clock_hz
    if memory not in ("sdr", "ddr3") or (memory == "ddr3" and platform_config.rate != "1:2"):
        raise ValueError(f"a board's memory is SDR SDRAM, or DDR3 through the ECP5's 1:2 PHY, "
                         f"not {platform_config.describe()} at {platform_config.rate}")
    module = litedram_module(platform_config)
    platform = LatticePlatform(device, _ios(memory, sim, module), toolchain="trellis")

    soc = _SoC(platform, clk_freq=clock_hz, ident="", ident_version=False,
               with_ctrl=False, bus_timeout=None)
    soc.mem_map.update({"csr": CSR_BASE, "main_ram": DRAM_BASE})

    # One system clock domain. The board top's PLL makes it (or, with DDR3, its double),
    # and holds reset until it locks.
    soc.cd_sys = ClockDomain("sys")
    if sim or memory == "sdr":
        soc.comb += [soc.cd_sys.clk.eq(platform.request(PORTS["clk"])),
                     soc.cd_sys.rst.eq(platform.request(PORTS["rst"]))]

    _add_host_bridge(soc, baud)

    if sim:
        phy = SDRAMPHYModel(module, phy_settings(platform_config, module), clk_freq=clock_hz)
        soc.sdrphy = phy
    elif memory == "sdr":
        phy = soc.sdrphy = GENSDRPHY(platform.request("sdram"), sys_clk_freq=clock_hz)
    else:
        # LiteX's ECP5 boards delay the command pins by 100 taps below 64 MHz, where the
        # DRAM clock's edge would otherwise fall too near them (gsd_orangecrab.py).
        phy = soc.ddrphy = ECP5DDRPHY(platform.request("sdram"), sys_clk_freq=clock_hz,
                                      cmd_delay=0 if clock_hz > 64_000_000 else 100)
        _ddr3_clocks(soc, platform, phy)
    soc.add_sdram("sdram", phy=phy, module=module, l2_cache_size=0)

    # The accelerator's memory port: a native port of the variant's width, through the
    # adapter that the accelerator-only DRAM simulation uses.
    port = soc.sdram.crossbar.get_port(data_width=config.port_bits)
    ctrl = soc.sdram.controller
    acts = [~p.cs_n[0] & ~p.ras_n & p.cas_n & p.we_n for p in ctrl.dfi.phases]
    aw, pb = config.mem_addr_bits, config.port_bits
    rd_addr = dict(valid=Signal(), ready=Signal(), payload=Signal(aw))
    rd_data = dict(valid=Signal(), payload=Signal(pb))
    wr = dict(valid=Signal(), ready=Signal(), payload=Signal(aw + pb))
    idle, refresh, activates = Signal(), Signal(), Signal(ACTIVATE_BITS)
    mem = {
        "rd_addr__valid": rd_addr["valid"], "rd_addr__ready": rd_addr["ready"],
        "rd_addr__payload": rd_addr["payload"], "rd_data__valid": rd_data["valid"],
        "rd_data__payload": rd_data["payload"], "wr__valid": wr["valid"],
        "wr__ready": wr["ready"], "wr__payload": wr["payload"], "idle": idle,
        "refresh": refresh, "activates": activates,
    }
    refresh_in, activates_in = Signal(), Signal(ACTIVATE_BITS)
    soc.comb += [refresh_in.eq(ctrl.refresher.cmd.valid),
                 activates_in.eq(sum(acts[1:], acts[0]))]
    soc.specials += Instance(
        "hwgen_mem_adapter",
        i_clk=soc.cd_sys.clk, i_rst=soc.cd_sys.rst,
        **{("i_" if role in ("rd_addr__valid", "rd_addr__payload", "wr__valid",
                             "wr__payload") else "o_") + f"mem__{role}": sig
           for role, sig in mem.items()},
        o_cmd_valid=port.cmd.valid, i_cmd_ready=port.cmd.ready, o_cmd_we=port.cmd.we,
        o_cmd_last=port.cmd.last, o_cmd_addr=port.cmd.addr,
        o_wdata_valid=port.wdata.valid, i_wdata_ready=port.wdata.ready,
        o_wdata_data=port.wdata.data, o_wdata_we=port.wdata.we,
        i_rdata_valid=port.rdata.valid, o_rdata_ready=port.rdata.ready,
        i_rdata_data=port.rdata.data,
        i_refresh_in=refresh_in, i_activates_in=activates_in,
    )

    # The accelerator's host bus, a region of the SoC's.
    bits = bus_addr_bits(config.imem_depth)
    accel_bus = wishbone.Interface(data_width=DATA_BITS, address_width=32, addressing="word")
    soc.bus.add_slave("accel", accel_bus, SoCRegion(origin=ACCEL_BASE, size=4 << bits,
                                                    cached=False))
    irq = Signal()
    soc.specials += Instance(
        "hwgen_accel",
        i_clk=soc.cd_sys.clk, i_rst=soc.cd_sys.rst,
        i_bus__cyc=accel_bus.cyc, i_bus__stb=accel_bus.stb, i_bus__we=accel_bus.we,
        i_bus__adr=accel_bus.adr[:bits], i_bus__sel=accel_bus.sel,
        i_bus__dat_w=accel_bus.dat_w, o_bus__dat_r=accel_bus.dat_r, o_bus__ack=accel_bus.ack,
        o_irq=irq,
        **{("o_" if role in ("rd_addr__valid", "rd_addr__payload", "wr__valid",
                             "wr__payload") else "i_") + f"mem__{role}": sig
           for role, sig in mem.items()},
    )

    # The identity: constants read through a bus target of its own (LiteX's ROM would put
    # them in an initialization file beside the Verilog).
    ident_bus = wishbone.Interface(data_width=DATA_BITS, address_width=32, addressing="word")
    soc.bus.add_slave("ident", ident_bus, SoCRegion(origin=IDENT_BASE, size=4 * 16,
                                                    cached=False, mode="r"))
    words = [IDENT_MAGIC, *ident]
    soc.sync += [
        ident_bus.ack.eq(ident_bus.cyc & ident_bus.stb & ~ident_bus.ack),
        Case(ident_bus.adr[:4], {**{i: ident_bus.dat_r.eq(w) for i, w in enumerate(words)},
                                 "default": ident_bus.dat_r.eq(0)}),
    ]
    soc.native_address_width = len(port.cmd.addr)
    return soc, platform, module, phy


def _init_sequence(phy, module) -> list[dict[str, Any]]:
    """The DRAM's initialization as commands for DFII (LiteDRAM's own sequence, which its
    BIOS would play): ``{"name", "a", "ba", "cmd", "delay_us"}``."""
    from litedram.init import get_sdram_phy_init_sequence

    seq, _mr = get_sdram_phy_init_sequence(phy.settings, module.timing_settings)
    return [{"name": name, "a": a, "ba": ba, "cmd": cmd, "delay_us": delay}
            for name, a, ba, cmd, delay in seq]


def generate(config: VariantConfig, *, platform: PlatformConfig, baud: int,
             ident: list[int], sim: bool = False,
             device: str = "LFE5U-85F-6BG381C") -> SocVerilog:
    """The Verilog of :data:`MODULE` for ``config`` on a board.

    Parameters
    ----------
    config : VariantConfig
        The accelerator.
    platform : PlatformConfig
        The board's memory (SDR, or DDR3 at 1:2) and system clock (accelerator, controller
        and UART): LiteDRAM's timings in cycles and the UART's divider come from it.
    baud : int
        The UART's bit rate.
    ident : list of int
        The eight 32-bit words of the design digest that :data:`IDENT_BASE` + 4 holds.
    sim : bool
        LiteDRAM's simulation PHY (the DRAM as logic) instead of the board's PHY and pins.
    device : str
        The FPGA, for LiteX's platform (its primitives for the PHY's registers).

    Raises
    ------
    ValueError
        For a memory no board has, or an identity of the wrong size.
    """
    from litex.soc.integration import export
    from migen.fhdl.verilog import convert  # noqa: F401 - LiteX converts through it

    if len(ident) != IDENT_WORDS - 1 or any(not 0 <= w < 1 << 32 for w in ident):
        raise ValueError("the identity is eight 32-bit words (a SHA-256 digest)")
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), _quiet_logs():
        soc, litex_platform, dram_module, phy = _build(
            config, platform_config=platform, baud=baud, sim=sim, ident=ident, device=device)
        soc.finalize()
        out = litex_platform.get_verilog(soc, name=MODULE, regular_comb=False)
        if out.data_files:
            raise RuntimeError(f"the system on chip needs data files "
                               f"({', '.join(out.data_files)}) beside its Verilog")
        verilog = out.main_source
        csr = json.loads(export.get_csr_json(soc.csr_regions, soc.constants, soc.mem_regions))
    spec = {
        "module": MODULE,
        "ports": {**clock_ports(platform.memory, sim), "tx": PORTS["tx"], "rx": PORTS["rx"]},
        "regions": {
            "accel": [ACCEL_BASE, 4 << bus_addr_bits(config.imem_depth)],
            "ident": [IDENT_BASE, 4 * IDENT_WORDS],
            "dram": [DRAM_BASE, csr["memories"]["main_ram"]["size"]],
            "csr": [CSR_BASE, csr["memories"]["csr"]["size"]],
        },
        "csr_registers": {name: [reg["addr"], reg["size"]]
                          for name, reg in csr["csr_registers"].items()},
        "native_address_width": soc.native_address_width,
        "clock_hz": platform.clock_hz,
        "baud": baud,
        "sim": sim,
        "dram": {
            "memory": platform.memory, "module": platform.module, "rate": platform.rate,
            "memtype": phy.settings.memtype, "nphases": phy.settings.nphases,
            "init": _init_sequence(phy, dram_module),
            # The PHY's read delays and bitslips, which the host levels (not in simulation,
            # whose PHY has none).
            "read_leveling": ({"modules": phy.settings.databits // 8,
                               "bitslips": phy.settings.bitslips,
                               "delays": phy.settings.delays}
                              if not sim and phy.settings.read_leveling else None),
        },
    }
    return SocVerilog(verilog=verilog, spec=spec)


@contextlib.contextmanager
def _quiet_logs():
    import logging

    logging.disable(logging.INFO)  # LiteX logs its whole bus and CSR map as it builds
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
