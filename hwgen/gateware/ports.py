"""Signatures shared by the accelerator, its memory model and the simulation testbench.

The Verilog port names follow from these signatures (the path joined by ``__``), so the
testbench and the memory model know them in advance:

``mem__rd_addr__{valid,ready,payload}``
    Read requests: a word address. The memory accepts one a cycle when ``ready``.
``mem__rd_data__{valid,payload}``
    Read data, in request order, ``config.port_latency`` cycles after the request was
    accepted. There is no ``ready``: the DMA only requests what it can absorb.
``mem__wr__{valid,ready,payload}``
    Writes. The payload packs ``addr`` in its low ``mem_addr_bits`` bits, ``data`` above.
``perf__<name>``
    One free-running 48-bit counter per name in :data:`COUNTERS`.
"""

from __future__ import annotations

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig

COUNTER_BITS = 48

#: Hardware performance counters, in the order the testbench reports them.
COUNTERS = (
    "cycles",  # start to done
    "array_busy",  # cycles an operand pair entered the PE array
    "stall_memory",  # array idle while the DMA load engine was busy
    "stall_epilogue",  # a tile was ready to finish but the previous one was still draining
    "bytes_read",  # memory-port read beats x port_bytes
    "bytes_written",  # memory-port write beats x port_bytes
    "instret",  # microcode instructions retired
)


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
    })


def counters_signature() -> wiring.Signature:
    """The performance counter outputs, one member per name in :data:`COUNTERS`."""
    return wiring.Signature({name: Out(COUNTER_BITS) for name in COUNTERS})
