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
#: The C++ driver's main, compiled into a "cxx" build (:mod:`sim.cxx_driver`).
DRIVER_CPP = "sim_driver.cpp"
SIM_TEMPLATES = ("sim_top.sv.j2", "sim_top.vlt.j2", DRIVER_CPP)
#: What can drive a build's top: cocotb (VPI, a Verilog clock under --timing), or the C++
#: driver (the top's ports, the clock toggled from C++, no VPI and no --timing).
HARNESSES = ("cocotb", "cxx")


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


def render_top(config: VariantConfig, *, harness: str = "cocotb",
               dram: dict[str, Any] | None = None) -> str:
    """The Verilog of ``hwgen_tb_top`` for ``config``.

    Parameters
    ----------
    harness : {"cocotb", "cxx"}
        What drives the top (:data:`HARNESSES`): cocotb through VPI handles, with the clock
        a Verilog delay loop (``--timing``); or the C++ driver (:mod:`sim.cxx_driver`)
        through the top's ports, clock included (ideal memory only).
    dram : dict, optional
        A DRAM platform's :meth:`sim.memory.BoardMemory.template_context`; the ideal memory
        when None.
    """
    if harness not in HARNESSES:
        raise ValueError(f"harness must be one of {', '.join(HARNESSES)}, not {harness!r}")
    if dram is not None and harness == "cxx":
        raise ValueError("the C++ driver runs on the ideal memory only")
    return _environment().get_template("sim_top.sv.j2").render(
        key=config.key(),
        harness=harness,
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


def render_vlt(config: VariantConfig, *, dram: bool = False, harness: str = "cocotb") -> str:
    """The Verilator control file making public only what the testbench touches (nothing
    for the C++ driver, which drives the top's ports)."""
    handles = public_handles(dram=dram) if harness == "cocotb" else {}
    return _environment().get_template("sim_top.vlt.j2").render(
        key=config.key(), dram=dram, handles=handles)


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
