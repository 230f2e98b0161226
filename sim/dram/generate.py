"""The LiteDRAM memory of a DRAM platform as Verilog: controller, simulation PHY, one port.

From a :class:`hwgen.platform.PlatformConfig` (``sdr`` or ``ddr3``) this builds a Migen top
of LiteDRAM's ``SDRAMPHYModel`` (the DRAM chip: banks, rows, the DFI command decoder),
``LiteDRAMController`` (bank machines, command multiplexer, refresher; the module's tREFI
divided by the platform's :attr:`~hwgen.platform.PlatformConfig.refresh_divisor`) and a
``LiteDRAMCrossbar`` native port, and converts it with ``migen.fhdl.verilog.convert``. The
top's ports are named here, not by Migen (:data:`PORT_SIGNALS`), and recorded with the
address layout and the timings in ``dram.json`` beside ``hwgen_dram.v``, so a testbench or the
accelerator's adapter can know them without LiteDRAM.

The native port, as LiteDRAM defines it (and :mod:`sim.dram` measures it):

- ``cmd``: a stream of ``we`` (1 write, 0 read) and ``addr`` (a port-word address), and
  ``last`` (used only by a width converter: it ends a run of commands to merge);
- ``wdata``: the write data, a stream that the crossbar makes ready some cycles *after* it
  accepted the write command; whatever is on it then is written (it must be waiting);
- ``rdata``: the read data, in command order; ``valid`` for one cycle, ``ready`` ignored.

The same platform always gives the same bytes (checked by a test), so a build can be cached
by :meth:`~hwgen.platform.PlatformConfig.key` and the sha256 of the Verilog.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import json
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwgen.atomic import replacing
from hwgen.platform import PlatformConfig

#: The Verilog module name of the memory.
MODULE = "hwgen_dram"
VERILOG_FILE = f"{MODULE}.v"
SPEC_FILE = "dram.json"
#: Bumped when the layout of the folder or of ``dram.json`` changes.
SPEC_FORMAT = 1

#: Role -> Verilog port name of the top. Inputs then outputs; ``sys_clk`` and ``sys_rst``
#: (active high) are Migen's clock domain ports. ``refresh`` is high while the refresher
#: holds the controller (from its request until the refresh command is done); ``activates``
#: counts the row activations in the cycle (ACT commands on the DFI: ``cs_n``, ``ras_n`` low,
#: ``cas_n``, ``we_n`` high), over the PHY's phases.
PORT_SIGNALS: dict[str, str] = {
    "clk": "sys_clk",
    "rst": "sys_rst",
    "cmd_valid": "port_cmd_valid",
    "cmd_ready": "port_cmd_ready",
    "cmd_we": "port_cmd_we",
    "cmd_last": "port_cmd_last",
    "cmd_addr": "port_cmd_addr",
    "wdata_valid": "port_wdata_valid",
    "wdata_ready": "port_wdata_ready",
    "wdata_data": "port_wdata_data",
    "wdata_we": "port_wdata_we",
    "rdata_valid": "port_rdata_valid",
    "rdata_ready": "port_rdata_ready",
    "rdata_data": "port_rdata_data",
    "refresh": "refresh_active",
    "activates": "row_activates",
}
#: Width of ``row_activates``: ACT commands in one system cycle (one per DFI phase at most).
ACTIVATE_BITS = 4


@dataclass(frozen=True)
class DramVerilog:
    """The generated memory: its Verilog and what a testbench needs to know of it.

    Attributes
    ----------
    platform : PlatformConfig
    verilog : str
        Module :data:`MODULE`.
    spec : dict
        What ``dram.json`` holds (see :func:`generate`).
    """

    platform: PlatformConfig
    verilog: str
    spec: dict[str, Any]

    @property
    def sha256(self) -> str:
        """The sha256 of the Verilog text."""
        return hashlib.sha256(self.verilog.encode()).hexdigest()


def drop_litex_shims() -> None:
    """Take LiteX's stand-in for its deprecated ``stream_sim`` out of ``sys.modules``.

    Importing ``litex.soc.interconnect`` puts an object there whose every attribute prints a
    deprecation notice on stdout and sleeps two seconds. Code that walks ``sys.modules`` with
    ``getattr`` (``pickle.whichmodule``, skops as it loads) then writes that notice into
    whatever the process prints: ``hwgen train --json`` after a DRAM build in one process gave
    unparseable JSON. hwgen uses none of it."""
    name = "litex.soc.interconnect.stream_sim"
    shim = sys.modules.get(name)
    if shim is not None and not isinstance(shim, types.ModuleType):
        del sys.modules[name]


def litedram_module(platform: PlatformConfig):  # noqa: ANN201 - LiteDRAM's
    """The LiteDRAM module object; hot refresh is the part with its tREFI divided, so that
    the controller and the PHY model's timing checker both see the hot rate."""
    from litedram import modules

    drop_litex_shims()

    cls = getattr(modules, platform.module)
    if platform.refresh_divisor != 1:
        timings = copy.copy(cls.technology_timings)
        timings.tREFI = cls.technology_timings.tREFI / platform.refresh_divisor
        cls = type(cls.__name__, (cls,), {"technology_timings": timings})
    kwargs = {"speedgrade": platform.speedgrade} if platform.speedgrade else {}
    return cls(platform.clock_hz, platform.rate, **kwargs)


def phy_settings(platform: PlatformConfig, module):  # noqa: ANN001, ANN201 - LiteDRAM's
    """The PHY settings (LiteDRAM's ``PhySettings``) the simulation PHY takes for
    ``platform``'s memory and ``module`` (its LiteDRAM module object).

    At 1:1 and 1:4 they are LiteDRAM's own for the kind (those of its SDR and Xilinx DDR3
    PHYs). At 1:2, DDR3 on an ECP5, they are those of ``ECP5DDRPHY`` itself, read from one
    made on stand-in pads, so that the model has that PHY's read and write latencies rather
    than a copy of the arithmetic that gives them.
    """
    from litedram.phy.model import get_sdram_phy_settings

    if platform.rate != "1:2":
        return get_sdram_phy_settings(memtype=module.memtype, data_width=16,
                                      clk_freq=platform.clock_hz)
    from litedram.phy.ecp5ddrphy import ECP5DDRPHY
    from migen import Record

    geom = module.geom_settings
    pads = Record([("a", geom.addressbits), ("ba", geom.bankbits), ("clk_p", 1), ("cke", 1),
                   ("ras_n", 1), ("cas_n", 1), ("we_n", 1), ("odt", 1), ("dq", 16),
                   ("dm", 2), ("dqs_p", 2)])
    return ECP5DDRPHY(pads, sys_clk_freq=platform.clock_hz).settings


def _build_top(platform: PlatformConfig, checker: bool, data_width: int | None):
    """The Migen top and its named port signals (``role -> Signal``) and facts."""
    from litedram.core.controller import ControllerSettings, LiteDRAMController
    from litedram.core.crossbar import LiteDRAMCrossbar
    from litedram.phy.model import SDRAM_VERBOSE_OFF, SDRAM_VERBOSE_STD, SDRAMPHYModel
    from migen import Module, Signal

    drop_litex_shims()
    module = litedram_module(platform)
    timing = module.timing_settings
    top = Module()
    phy = SDRAMPHYModel(module, phy_settings(platform, module), clk_freq=platform.clock_hz,
                        verbosity=SDRAM_VERBOSE_STD if checker else SDRAM_VERBOSE_OFF)
    ctrl = LiteDRAMController(phy.settings, module.geom_settings, timing, platform.clock_hz,
                              controller_settings=ControllerSettings(with_refresh=True))
    xbar = LiteDRAMCrossbar(ctrl.interface)
    port = xbar.get_port(data_width=data_width)
    top.submodules += phy, ctrl, xbar
    top.comb += ctrl.dfi.connect(phy.dfi)

    aw, dw = port.address_width, port.data_width
    sig = {role: Signal(width, name=PORT_SIGNALS[role]) for role, width in (
        ("cmd_valid", 1), ("cmd_ready", 1), ("cmd_we", 1), ("cmd_last", 1), ("cmd_addr", aw),
        ("wdata_valid", 1), ("wdata_ready", 1), ("wdata_data", dw), ("wdata_we", dw // 8),
        ("rdata_valid", 1), ("rdata_ready", 1), ("rdata_data", dw), ("refresh", 1),
        ("activates", ACTIVATE_BITS))}
    acts = [~p.cs_n[0] & ~p.ras_n & p.cas_n & p.we_n for p in ctrl.dfi.phases]
    top.comb += [
        port.cmd.valid.eq(sig["cmd_valid"]), sig["cmd_ready"].eq(port.cmd.ready),
        port.cmd.we.eq(sig["cmd_we"]), port.cmd.addr.eq(sig["cmd_addr"]),
        port.cmd.last.eq(sig["cmd_last"]),
        port.wdata.valid.eq(sig["wdata_valid"]), sig["wdata_ready"].eq(port.wdata.ready),
        port.wdata.data.eq(sig["wdata_data"]), port.wdata.we.eq(sig["wdata_we"]),
        sig["rdata_valid"].eq(port.rdata.valid), port.rdata.ready.eq(sig["rdata_ready"]),
        sig["rdata_data"].eq(port.rdata.data),
        sig["refresh"].eq(ctrl.refresher.cmd.valid),
        sig["activates"].eq(sum(acts[1:], acts[0])),
    ]
    geom = module.geom_settings
    align = ctrl.interface.address_align  # log2 of DRAM columns per controller word
    # A port narrower than the controller's words addresses parts of them (more column bits).
    ratio = ctrl.interface.data_width // dw if dw < ctrl.interface.data_width else 1
    wider = dw // ctrl.interface.data_width if dw > ctrl.interface.data_width else 1
    col_bits = geom.colbits - align + ratio.bit_length() - wider.bit_length()
    facts = {
        "address_width": aw,
        "data_width": dw,
        "controller_data_width": ctrl.interface.data_width,
        "words": 1 << aw,
        # ROW_BANK_COL (LiteDRAM's default): consecutive words fill a row of one bank, then
        # the same row of the next bank.
        "address_layout": {
            "column": [0, col_bits],
            "bank": [col_bits, geom.bankbits],
            "row": [col_bits + geom.bankbits, geom.rowbits],
        },
        "geometry": {"banks": 1 << geom.bankbits, "rows": 1 << geom.rowbits,
                     "columns": 1 << geom.colbits, "words_per_row": 1 << col_bits},
        "timing_cycles": {name: getattr(timing, name) for name in (
            "tRP", "tRCD", "tWR", "tWTR", "tREFI", "tRFC", "tFAW", "tCCD", "tRRD", "tRC",
            "tRAS", "tZQCS")},
        "phy": {"memtype": phy.settings.memtype, "nphases": phy.settings.nphases,
                "read_latency": phy.settings.read_latency,
                "write_latency": phy.settings.write_latency},
    }
    return top, sig, facts


def _check_ports(verilog: str, names: list[str]) -> None:
    """Migen renames a port whose name another signal took: refuse that, naming it."""
    header = verilog[verilog.index(f"module {MODULE}("):verilog.index(");")]
    found = set(re.findall(r"\b(?:input|output)\s+(?:wire\s+|reg\s+)?(?:\[[^\]]*\]\s*)?(\w+)",
                           header))
    missing = sorted(set(names) - found)
    if missing:
        raise RuntimeError(f"the generated {MODULE} lacks port(s) {', '.join(missing)} "
                           f"(Migen renamed them); its ports are {', '.join(sorted(found))}")


def _versions() -> dict[str, str]:
    return {dist: importlib.metadata.version(dist) for dist in ("litedram", "litex", "migen")}


def check_data_width(data_width: int | None) -> None:
    """Refuse a port width that is not None or a power of two from 8 to 512 bits."""
    if data_width is not None and (not isinstance(data_width, int) or data_width < 8
                                   or data_width > 512 or data_width & (data_width - 1)):
        raise ValueError(f"data_width must be a power of two from 8 to 512 bits, "
                         f"not {data_width!r}")


def generate(platform: PlatformConfig, *, checker: bool = False,
             data_width: int | None = None) -> DramVerilog:
    """The memory of ``platform`` as Verilog, with its description.

    Parameters
    ----------
    platform : PlatformConfig
        A DRAM platform (``sdr`` or ``ddr3``).
    checker : bool
        Add the PHY model's DFI timing checker (LiteDRAM's ``verbosity=1``), which prints every
        timing violation it sees: slower to simulate, for checking the controller.
    data_width : int, optional
        The port's word width in bits (e.g. the variant's ``port_bits``); the controller's
        (128 for DDR3 x16 at 1:4, 16 for SDR x16) by default. Another width puts LiteDRAM's
        converter in the port: a narrower port's consecutive commands are merged into the
        controller's words until one has ``cmd_last`` set; a wider port's are split.

    Returns
    -------
    DramVerilog
        Its ``spec`` has ``format``, ``module``, ``platform`` (the config), ``key``,
        ``checker``, ``signals`` (:data:`PORT_SIGNALS`), ``address_width``, ``data_width``
        (bits of a port word), ``words``, ``address_layout`` (``[lsb, width]`` of column,
        bank and row in a port-word address), ``geometry``, ``timing_cycles`` (the
        controller's, in system cycles, tREFI as divided for the refresh setting), ``phy``
        and the LiteDRAM, LiteX and Migen ``versions``.

    Raises
    ------
    ValueError
        If the platform has no DRAM (``ideal``).
    """
    if not platform.is_dram:
        raise ValueError("the ideal memory has no LiteDRAM controller to generate; "
                         "use a platform with memory sdr or ddr3")
    from migen.fhdl.verilog import convert

    check_data_width(data_width)
    top, sig, facts = _build_top(platform, checker, data_width)
    text = str(convert(top, ios=set(sig.values()), name=MODULE))
    _check_ports(text, list(PORT_SIGNALS.values()))
    spec = {
        "format": SPEC_FORMAT,
        "module": MODULE,
        "platform": platform.to_dict(),
        "key": platform.key(),
        "checker": checker,
        "signals": dict(PORT_SIGNALS),
        **facts,
        "versions": _versions(),
    }
    return DramVerilog(platform=platform, verilog=text, spec=spec)


def write(dram: DramVerilog, directory: str | Path) -> Path:
    """Write ``hwgen_dram.v`` and ``dram.json`` (with the Verilog's sha256) into
    ``directory``, replacing it whole (:func:`hwgen.atomic.replacing`).

    Returns
    -------
    Path
        The folder.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with replacing(directory) as tmp:
        (tmp / VERILOG_FILE).write_text(dram.verilog)
        spec = {**dram.spec, "verilog_sha256": dram.sha256}
        (tmp / SPEC_FILE).write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    return directory
