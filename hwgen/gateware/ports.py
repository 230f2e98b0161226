"""Signatures shared by the accelerator, its memory model and the simulation testbench.

The Verilog port names follow from these signatures (the path joined by ``__``), so the
testbench and the memory model know them in advance:

``mem__rd_addr__{valid,ready,payload}``
    Read requests: a word address. The memory accepts one a cycle when ``ready``.
``mem__rd_data__{valid,payload}``
    Read data, in request order, whenever the memory delivers it (exactly
    ``config.port_latency`` cycles after the request on the ideal memory). There is no
    ``ready``: the DMA only requests what its read buffer can hold (its credits).
``mem__wr__{valid,ready,payload}``
    Writes. The payload packs ``addr`` in its low ``mem_addr_bits`` bits, ``data`` above.
``mem__idle``, ``mem__refresh``, ``mem__activates``
    From the memory system: ``idle`` (no write waiting, no read outstanding: ``done`` waits
    for it, so that a halted program's stores are in memory), ``refresh`` (the DRAM
    refresher holds the controller) and ``activates`` (DRAM row activations this cycle),
    for the counters. The ideal memory ties them to 1, 0 and 0.
``bus__*``, ``irq``
    The host's Wishbone bus (:func:`wishbone_signature`) and interrupt line: the only
    way to load a program, start it, see it finish and read the counters
    (:mod:`hwgen.regmap`).
"""

from __future__ import annotations

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.perf import COUNTER_BITS, COUNTERS, VALUE_INPUTS
from hwgen.regmap import DATA_BITS

#: Width of ``mem__activates`` (row activations a cycle: up to 4 DFI phases on DDR3).
ACTIVATE_BITS = VALUE_INPUTS["row_activates"]


def write_layout(config: VariantConfig) -> data.StructLayout:
    """Payload of one memory write: a word address and a word of data."""
    return data.StructLayout({"addr": config.mem_addr_bits, "data": config.port_bits})


def mem_port_signature(config: VariantConfig) -> wiring.Signature:
    """The external memory port, seen from the accelerator (the initiator)."""
    return wiring.Signature({
        "rd_addr": Out(stream.Signature(config.mem_addr_bits)),
        # valid + payload and no ready: a stream that cannot be refused.
        "rd_data": In(wiring.Signature({"valid": Out(1), "payload": Out(config.port_bits)})),
        "wr": Out(stream.Signature(write_layout(config))),
        "idle": In(1),
        "refresh": In(1),
        "activates": In(ACTIVATE_BITS),
    })


def counters_signature() -> wiring.Signature:
    """The performance counter outputs, one member per name in :data:`hwgen.perf.COUNTERS`."""
    return wiring.Signature({name: Out(COUNTER_BITS) for name in COUNTERS})


def wishbone_signature(addr_bits: int) -> wiring.Signature:
    """A Wishbone B4 classic bus with 32-bit data and word addresses, seen from the
    initiator (the host); the accelerator takes it flipped (``In``). Verilog ports
    ``bus__{cyc,stb,we,adr,sel,dat_w,dat_r,ack}`` (:mod:`hwgen.regmap` maps its words)."""
    return wiring.Signature({
        "cyc": Out(1), "stb": Out(1), "we": Out(1), "adr": Out(addr_bits),
        "sel": Out(DATA_BITS // 8), "dat_w": Out(DATA_BITS),
        "dat_r": In(DATA_BITS), "ack": In(1),
    })


def imem_write_signature(config: VariantConfig) -> wiring.Signature:
    """A write into the instruction memory, seen from the writer (the host interface): one
    half of a 64-bit word at a time (``en`` holds one bit per 32-bit half)."""
    return wiring.Signature({
        "addr": Out(range(config.imem_depth)),
        "data": Out(2 * DATA_BITS),
        "en": Out(2),
    })
