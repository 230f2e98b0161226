"""The hardware performance counters: their names, meaning and width.

The gateware counts them (``hwgen.gateware.counters``) and a host reads them over the bus
(:func:`hwgen.regmap.counter_word`); the simulator harness reports them by these names. Like
:mod:`hwgen.config`, this module imports nothing else from the project.
"""

from __future__ import annotations

#: Width of every counter, in bits.
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
    # The memory system (docs/memory.md): on the ideal memory read_wait is the latency the
    # DMA could not hide, mem_refused / refresh_stall / row_activates are 0, and every read
    # takes port_latency cycles.
    "read_wait",  # reads outstanding and no read data arriving
    "mem_refused",  # a read request or a write was valid and the memory not ready
    "read_latency_sum",  # cycles from each read request accepted to its data, summed
    "read_latency_max",  # the longest of them
    "refresh_stall",  # the DRAM refresher held the controller
    "row_activates",  # DRAM row activations (ACT commands)
    "tiles_skipped",  # BZTs taken: tiles jumped over because they were all zero point
)

#: Counters that add a value given each cycle (of this many bits) instead of counting a
#: one-cycle event; ``bytes_*`` add ``port_bytes`` a beat.
VALUE_INPUTS: dict[str, int] = {"read_latency_sum": 16, "row_activates": 4}
#: Counters that keep the largest value given (of :data:`VALUE_INPUTS`'s width).
MAX_INPUTS: dict[str, int] = {"read_latency_max": 16}


def memory_summary(counters: dict[str, int], port_bytes: int) -> dict[str, int | float]:
    """The memory system's counters of one run, as ``hwgen gemm --json`` and ``hwgen run
    --json`` print them: each memory counter, and ``read_latency_mean`` (cycles a read took
    on average; 0 with no read).

    Parameters
    ----------
    counters : dict of str to int
        Every counter of :data:`COUNTERS`.
    port_bytes : int
        The variant's memory word, to count reads from ``bytes_read``.
    """
    reads = counters["bytes_read"] // port_bytes
    names = ("read_wait", "mem_refused", "read_latency_sum", "read_latency_max",
             "refresh_stall", "row_activates")
    out: dict[str, int | float] = {name: counters[name] for name in names}
    out["read_latency_mean"] = round(counters["read_latency_sum"] / reads, 2) if reads else 0
    return out
