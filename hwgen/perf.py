"""The hardware performance counters: their names, meaning and width.

The gateware counts them (``hwgen.gateware.counters``) and exposes one port per name
(``perf__<name>``); the simulator harness reads them back by these names. Like
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
)
