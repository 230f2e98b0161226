"""A FuseSoC core for a variant folder: what an FPGA engineer adds to a project.

The core (CAPI2, ``<name>.core`` beside ``hwgen_accel.v``) names the Verilog, its top
``hwgen_accel`` and the variant's parameters, and has two targets: ``default`` (the files and
the top, for a project that depends on the core) and ``synth`` (yosys ``synth_ecp5`` to a
JSON netlist, the synthesis ``hwgen variants build`` measures). The parameters are Verilog
defines (``HWGEN_ROWS`` ...): the generated Verilog has no parameters (Amaranth elaborated
them), so the defines describe the variant to the project, which may test them, and change
nothing in the accelerator.

Not gateware: :mod:`hwgen.gateware.sources` leaves this module out of the build digest.
"""

from __future__ import annotations

import json

from hwgen.config import VariantConfig

#: The core's vendor and library (``vendor:library:name:version``).
VENDOR, LIBRARY = "hwgen", "variants"
#: The version every core gets (the Verilog's sha256 is in the description).
VERSION = "0.1.0"


def core_name(name: str) -> str:
    """The VLNV of the core of variant ``name``."""
    return f"{VENDOR}:{LIBRARY}:{name}:{VERSION}"


def _defines(config: VariantConfig) -> dict[str, tuple[str, int, str]]:
    """The parameters: define -> (datatype, value, description)."""
    return {
        "HWGEN_ROWS": ("int", config.rows, "rows of the systolic array"),
        "HWGEN_COLS": ("int", config.cols, "columns of the systolic array"),
        "HWGEN_PORT_BYTES": ("int", config.port_bytes, "bytes a memory word"),
        "HWGEN_MEM_ADDR_BITS": ("int", config.mem_addr_bits, "bits of a word address"),
        "HWGEN_WINDOW_UNIT": ("int", int(config.window_unit), "1 with the window unit"),
    }


def core_text(name: str, config: VariantConfig, verilog: str, verilog_sha256: str,
              top: str) -> str:
    """The CAPI2 core of a variant folder.

    Parameters
    ----------
    name : str
        The variant's name (letters, digits, underscores: :func:`hwgen.specs.spec_name`).
    config : VariantConfig
        The variant.
    verilog, verilog_sha256 : str
        Its Verilog file's name in the folder, and the file's sha256.
    top : str
        The Verilog's top module.
    """
    q = json.dumps  # a JSON string is a YAML double-quoted scalar
    description = (f"hwgen accelerator {config.rows}x{config.cols}, epilogue "
                   f"{','.join(config.epilogue) or 'none'}, "
                   f"{'window unit, ' if config.window_unit else ''}"
                   f"{config.port_bytes}-byte port; {verilog} sha256 {verilog_sha256}")
    defines = _defines(config)
    lines = [
        "CAPI=2:",
        f"name: {q(core_name(name))}",
        f"description: {q(description)}",
        "",
        "filesets:",
        "  rtl:",
        f"    files: [{q(verilog)}]",
        "    file_type: verilogSource",
        "",
        "targets:",
        "  default:",
        "    filesets: [rtl]",
        f"    toplevel: {q(top)}",
        f"    parameters: [{', '.join(defines)}]",
        "  synth:",
        "    default_tool: yosys",
        "    filesets: [rtl]",
        f"    toplevel: {q(top)}",
        "    tools:",
        "      yosys:",
        "        arch: ecp5",
        "        output_format: json",
        "",
        "parameters:",
    ]
    for define, (datatype, value, text) in defines.items():
        lines += [f"  {define}:", f"    datatype: {datatype}", f"    default: {value}",
                  f"    description: {q(text + ' (informational: the Verilog reads none)')}",
                  "    paramtype: vlogdefine"]
    return "\n".join(lines) + "\n"
