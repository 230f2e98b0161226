"""The simulation top: the Verilog ``hwgen_tb_top`` that wraps a variant's ``hwgen_accel``
(clock, external memory model, the handles the testbench drives), its Verilator control file,
and the check that a Verilog file has the interface the top connects.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2

import rtl_templates
from hwgen.config import VariantConfig
from sim.tb import host_script

#: The Verilog top of every simulation build; the harness's ``dut``.
TOP = "hwgen_tb_top"
#: Verilog half period of the clock, in ns (the timescale is 1ns/1ps).
HALF_PERIOD_NS = 5
CLOCK_PERIOD_NS = 2 * HALF_PERIOD_NS

TEMPLATES = Path(rtl_templates.__file__).parent  # package data, wherever it is installed
SIM_TEMPLATES = ("sim_top.sv.j2", "sim_top.vlt.j2")


class BuildError(RuntimeError):
    """Amaranth or Verilator failed, or a build cannot be made; the message names the log."""


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_top(config: VariantConfig, *, standalone: bool = False,
               dram: dict[str, Any] | None = None) -> str:
    """The Verilog of ``hwgen_tb_top`` for ``config``.

    Parameters
    ----------
    standalone : bool
        False for the cocotb build; True for a ``verilator --binary`` top that loads memory
        and host script with ``$readmemh`` and ends with ``$finish`` when the script ends
        (ideal memory only).
    dram : dict, optional
        A DRAM platform's :meth:`sim.memory.BoardMemory.template_context`; the ideal memory
        when None.
    """
    if dram is not None and standalone:
        raise ValueError("a standalone build runs on the ideal memory only")
    return _environment().get_template("sim_top.sv.j2").render(
        key=config.key(),
        standalone=standalone,
        dram=dram,
        addr_bits=config.mem_addr_bits,
        port_bits=config.port_bits,
        mem_words=config.mem_words,
        latency=config.port_latency,
        ptr_bits=max(1, (config.port_latency - 1).bit_length()),
        half_period_ns=HALF_PERIOD_NS,
        **host_script.template_context(config.imem_depth),
    )


def public_handles(*, dram: bool = False) -> dict[str, str]:
    """The signals of ``hwgen_tb_top`` the control file makes public ("rw" or "rd"): those
    of :data:`sim.tb.host_script.TB_HANDLES`, nothing inside the accelerator."""
    memory = host_script.MEMORY_HANDLES["dram" if dram else "ideal"]
    return {**host_script.TB_HANDLES, **memory}


def render_vlt(config: VariantConfig, *, dram: bool = False) -> str:
    """The Verilator control file making public only what the testbench touches."""
    return _environment().get_template("sim_top.vlt.j2").render(
        key=config.key(), dram=dram, handles=public_handles(dram=dram))


def expected_ports(config: VariantConfig) -> set[str]:
    """The Verilog ports of ``hwgen_accel`` the simulation top connects."""
    mem = [f"mem__{path}" for path in (
        "rd_addr__valid", "rd_addr__ready", "rd_addr__payload", "rd_data__valid",
        "rd_data__payload", "wr__valid", "wr__ready", "wr__payload", "idle", "refresh",
        "activates")]
    bus = [f"bus__{name}" for name in ("cyc", "stb", "we", "adr", "sel", "dat_w", "dat_r",
                                       "ack")]
    return {"clk", "rst", "irq", *bus, *mem}


def check_interface(text: str, config: VariantConfig) -> None:
    """Refuse Verilog that the simulation top cannot drive, before a long Verilator build.

    Raises
    ------
    BuildError
        Naming the missing module or ports.
    """
    header = re.search(r"^module\s+hwgen_accel\s*\(([^)]*)\)", text, re.MULTILINE)
    if header is None:
        raise BuildError("the Verilog has no module hwgen_accel: convert the accelerator with "
                         "amaranth.back.verilog.convert(accel, name='hwgen_accel')")
    ports = {p.strip() for p in header[1].split(",")}
    missing = sorted(expected_ports(config) - ports)
    if missing:
        raise BuildError(f"module hwgen_accel lacks the port(s) {', '.join(missing)} that the "
                         f"simulation top connects (see hwgen/gateware/ports.py)")
