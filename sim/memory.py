"""The memory system a simulation build puts behind the accelerator, from its platform.

The ideal memory is the Verilog model in ``rtl_templates/sim_top.sv.j2``. A DRAM platform
(``sdr``, ``ddr3``) is LiteDRAM's controller and DRAM model (:mod:`sim.dram.generate`, with a
native port as wide as the variant's memory word) joined to the accelerator by
:class:`hwgen.gateware.native.NativePortAdapter`. :func:`board_memory` checks that the
variant fits the platform and gives the Verilog files, the template's context and what the
testbench must know to fill and read the DRAM's bank memories.

How a port word lies in the DRAM: the native port's word ``p`` is the controller words
``p * ratio + k`` (``k`` from 0, lowest bits first) when the port is ``ratio`` times the
controller's width (LiteDRAM's down-converter splits it; SDR's 16-bit words); controller word
``c`` is column ``c % words_per_row``, bank ``(c // words_per_row) % banks`` and row above
(LiteDRAM's ``ROW_BANK_COL``), and sits at index ``row * words_per_row + column`` of its
bank's memory.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import json
import re
from dataclasses import dataclass, field
from typing import Any

from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig

ADAPTER_FILE = "hwgen_mem_adapter.v"


@dataclass(frozen=True)
class BoardMemory:
    """The memory of one simulation build.

    Attributes
    ----------
    config : VariantConfig
    platform : PlatformConfig
    files : dict of str to str
        Verilog files the build adds beside ``hwgen_accel.v`` (none for the ideal memory).
    spec : dict, optional
        The DRAM's ``dram.json`` (:func:`sim.dram.generate.generate`).
    layout : dict, optional
        For a DRAM: ``banks``, ``words_per_row``, ``ratio`` (controller words a port word),
        ``controller_bytes``, ``bank_memories`` (the bank memories' Verilog names, bank
        order), ``stride`` (bank-memory words a controller word steps by) and the template's
        port names; None for the ideal memory.
    """

    config: VariantConfig
    platform: PlatformConfig
    files: dict[str, str] = field(default_factory=dict)
    layout: dict[str, Any] | None = None
    spec: dict[str, Any] | None = None

    def template_context(self) -> dict[str, Any] | None:
        """What ``sim_top.sv.j2`` needs of a DRAM (None: the ideal memory)."""
        return self.layout

    def folder_files(self) -> dict[str, str]:
        """What a variant folder for this platform holds of the memory system: the Verilog
        files and ``dram.json`` (none for the ideal memory)."""
        if self.spec is None:
            return {}
        return {**self.files, "dram.json": json.dumps(self.spec, indent=2) + "\n"}

    def testbench_header(self) -> dict[str, Any]:
        """What the testbench needs to fill and read memory (``jobs.json``'s ``memory``)."""
        if self.layout is None:
            return {"kind": "ideal"}
        keys = ("banks", "words_per_row", "ratio", "controller_bytes", "stride")
        return {"kind": "dram", **{k: self.layout[k] for k in keys}}


def _bank_memories(verilog: str, bits: int, words: int, banks: int) -> tuple[list[str], int]:
    """The names of the DRAM model's bank memories, in bank order (Migen names them in the
    order the model creates them: ``mem``, ``mem_1``, ...), and how many of their words a
    controller word takes a step of: 1, or 2 for the ECP5's 1:2 PHY, whose bursts the model
    addresses in steps of two (it divides columns by two phases of two beats, while a DDR3
    burst is eight), leaving every other word unused."""
    found = re.findall(rf"^reg \[{bits - 1}:0\] (\w+)\[0:(\d+)\];", verilog, re.MULTILINE)
    depths = {int(depth) + 1 for _, depth in found}
    names = [name for name, _ in found]
    if len(names) != banks or len(depths) != 1 or depths.pop() % words:
        raise RuntimeError(f"the DRAM Verilog has {len(names)} memories of {bits} bits, not "
                           f"one per bank ({banks}) of a multiple of {words} words: "
                           f"LiteDRAM's model changed")
    return names, (int(found[0][1]) + 1) // words


@functools.lru_cache(maxsize=8)
def board_memory(config: VariantConfig, platform: PlatformConfig) -> BoardMemory:
    """The memory system of ``config`` on ``platform``.

    Raises
    ------
    ValueError
        If the variant does not fit the platform: a memory word narrower than the DRAM
        controller's (LiteDRAM's up-converter would cost about 7 cycles a word), or a word
        address wider than the DRAM's.
    """
    if not platform.is_dram:
        return BoardMemory(config, platform)
    from hwgen.gateware.native import adapter_verilog
    from sim.dram.generate import VERILOG_FILE, generate

    probe = generate(platform)  # the controller's own width
    ctrl_bits = probe.spec["controller_data_width"]
    if config.port_bits < ctrl_bits:
        raise ValueError(
            f"a memory word of {config.port_bytes} bytes is narrower than the {platform.memory} "
            f"controller's {ctrl_bits // 8}-byte word, and LiteDRAM's converter takes about 7 "
            f"cycles a word; generate the variant with --port-bytes {ctrl_bits // 8} or more")
    dram = probe if config.port_bits == ctrl_bits else generate(platform,
                                                                data_width=config.port_bits)
    spec = dram.spec
    if config.mem_addr_bits > spec["address_width"]:
        raise ValueError(
            f"the variant's {config.mem_addr_bits}-bit word address does not fit the "
            f"{platform.memory} DRAM's {spec['address_width']}-bit port address ({spec['words']} "
            f"words of {config.port_bytes} bytes); use --mem-addr-bits {spec['address_width']} "
            f"or less")
    ratio = config.port_bits // ctrl_bits
    geometry = spec["geometry"]
    words_per_row = geometry["words_per_row"] * ratio  # in controller words
    banks = geometry["banks"]
    layout = {
        "module": platform.module,
        "platform_key": platform.key(),
        "signals": spec["signals"],
        "address_width": spec["address_width"],
        "banks": banks,
        "words_per_row": words_per_row,
        "ratio": ratio,
        "controller_bits": ctrl_bits,
        "controller_bytes": ctrl_bits // 8,
    }
    layout["bank_memories"], layout["stride"] = _bank_memories(
        dram.verilog, ctrl_bits, geometry["rows"] * words_per_row, banks)
    files = {VERILOG_FILE: dram.verilog,
             ADAPTER_FILE: adapter_verilog(config, spec["address_width"])}
    return BoardMemory(config, platform, files, layout, dict(spec))


def memory_digest(platform: PlatformConfig) -> str:
    """What decides a platform's part of a build, without generating it (a cache hit must
    stay fast): the platform, the LiteDRAM versions and the sources that turn them into
    Verilog. Empty for the ideal memory."""
    if not platform.is_dram:
        return ""
    from sim.dram import generate as dram_generate

    h = hashlib.sha256(platform.key().encode())
    for dist in ("litedram", "litex", "migen"):
        h.update(f"{dist} {importlib.metadata.version(dist)}\n".encode())
    h.update(inspect.getsource(dram_generate).encode())
    h.update(inspect.getsource(board_memory).encode())
    return h.hexdigest()[:16]
