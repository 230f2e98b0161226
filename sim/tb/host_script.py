"""What the simulated host does on the bus: scripts for the Verilog host of ``hwgen_tb_top``.

The simulation top holds a Wishbone initiator that plays a script of bus commands
(``rtl_templates/sim_top.sv.j2``): the testbench writes one script a job and raises
``host_go``, and the Verilog plays it at bus speed, so Python is never in the per-cycle loop
and the design is reached only as a host reaches it, through :mod:`hwgen.regmap`. A job's
script writes the program, enables and clears the done interrupt, starts the program, waits
for ``irq``, and reads every counter back.

This module also names the only signals of ``hwgen_tb_top`` the testbench may touch
(:data:`TB_HANDLES`): the Verilator control file makes exactly these public, so a testbench
that reached into the accelerator would find no handle.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from hwgen.perf import COUNTERS
from hwgen.regmap import DATA_BITS, bus_addr_bits, counter_word, csr, imem_base_word

#: ``hwgen_tb_top`` signals the testbench drives or reads, and how ("rw" or "rd"); the
#: memory's handles depend on its kind: ``ext_mem`` (ideal) or ``dump_bank`` (DRAM).
TB_HANDLES: dict[str, str] = {
    "clk": "rd", "rst": "rw",
    "load_mem": "rw", "dump_mem": "rw", "dump_lo": "rw", "dump_hi": "rw",
    "load_host": "rw", "dump_host": "rw", "host_go": "rw",
    "host_done": "rd", "host_timed_out": "rd",
}
MEMORY_HANDLES = {"ideal": {"ext_mem": "rw"}, "dram": {"dump_bank": "rw"}}
#: Characters of one script line: 4 bits of command, 32 of word address, 32 of data.
LINE_DIGITS = 17


class Cmd(enum.IntEnum):
    """A script command (bits 67:64 of a line)."""

    END = 0
    WRITE = 1
    READ = 2
    WAIT_IRQ = 3


def capacity(imem_depth: int) -> tuple[int, int]:
    """Script lines and read slots the Verilog host holds for a variant's imem."""
    reads = 2 * len(COUNTERS)
    return 2 * imem_depth + reads + 8, reads


def _line(cmd: Cmd, word: int = 0, data: int = 0) -> str:
    return f"{int(cmd):x}{word:08x}{data:08x}"


def imem_writes(program: Sequence[int], imem: Sequence[int], imem_depth: int
                ) -> tuple[list[tuple[int, int]], list[int]]:
    """The bus writes that put ``program`` in an instruction memory holding ``imem``: the
    32-bit halves that differ (a kernel's directed input sets run the same program), and zeros
    over the rest of the old program (the zero word is a NOP: no stale word is fetched).

    Returns
    -------
    list of (int, int)
        ``(bus word address, value)`` in address order.
    list of int
        The instruction memory's words after them.
    """
    base = imem_base_word(imem_depth)
    mask = (1 << DATA_BITS) - 1
    words = [int(w) for w in program] + [0] * max(0, len(imem) - len(program))
    writes = []
    for i, word in enumerate(words):
        old = imem[i] if i < len(imem) else None
        for half in (0, 1):
            value = word >> (half * DATA_BITS) & mask
            if old is None or old >> (half * DATA_BITS) & mask != value:
                writes.append((base + 2 * i + half, value))
    return writes, words


def job_script(program: Sequence[int], imem: Sequence[int], imem_depth: int,
               timeout_cycles: int) -> tuple[str, list[int]]:
    """The ``$readmemh`` text of one job's script, and the instruction memory after it.

    Parameters
    ----------
    program : sequence of int
        The 64-bit instruction words.
    imem : sequence of int
        What the host wrote into the instruction memory before, in the same simulator
        (empty at first): the script writes only the halves of words that differ, as a host
        that keeps its last program does (a kernel's jobs on its directed input sets run the
        same program), and zeroes the words of the old program beyond the new one (the zero
        word is a NOP), so a stale word can never be fetched.
    imem_depth : int
        The variant's instruction memory depth (the bus's address map depends on it).
    timeout_cycles : int
        How long the host waits for the interrupt before it gives up (``host_timed_out``)
        and reads the counters as they are.

    Returns
    -------
    str
        One line a command; the reads are the counters in :data:`hwgen.perf.COUNTERS`
        order, low word then high (:func:`counters_from_reads`).
    list of int
        The instruction memory's words as the script leaves them (the next job's ``imem``).
    """
    if not 0 < timeout_cycles < 1 << 2 * DATA_BITS:
        raise ValueError(f"timeout_cycles must be from 1 to 2**64 - 1, not {timeout_cycles}")
    if len(program) > imem_depth:
        raise ValueError(f"a program of {len(program)} words does not fit an imem of "
                         f"{imem_depth}")
    mask = (1 << DATA_BITS) - 1
    writes, words = imem_writes(program, imem, imem_depth)
    lines = [_line(Cmd.WRITE, addr, value) for addr, value in writes]
    done_bit = 1 << csr("IRQ_ENABLE").field("DONE").lo
    lines += [
        _line(Cmd.WRITE, csr("IRQ_ENABLE").word, done_bit),
        _line(Cmd.WRITE, csr("IRQ_PENDING").word, done_bit),
        _line(Cmd.WRITE, csr("CTRL").word, 1 << csr("CTRL").field("START").lo),
        _line(Cmd.WAIT_IRQ, timeout_cycles >> DATA_BITS, timeout_cycles & mask),
    ]
    for name in COUNTERS:
        lines.append(_line(Cmd.READ, counter_word(name)))
        lines.append(_line(Cmd.READ, counter_word(name) + 1))
    lines.append(_line(Cmd.END))
    lines_max, _ = capacity(imem_depth)
    if len(lines) > lines_max:  # cannot happen for a program that fits: capacity() sizes it
        raise ValueError(f"a host script of {len(lines)} lines exceeds {lines_max}")
    return "\n".join(lines) + "\n", words


def hung_after(timeout_cycles: int, script: str) -> int:
    """Cycles after which a job's host counts as hung on the bus (both harnesses): its own
    watchdog ends the wait for the interrupt at ``timeout_cycles``, and each of the
    script's commands takes three bus cycles at most."""
    return timeout_cycles + 4 * script.count("\n") + 1024


def counters_from_reads(words: Sequence[int]) -> dict[str, int]:
    """The counters from a script's reads (:func:`job_script`'s order)."""
    if len(words) < 2 * len(COUNTERS):
        raise ValueError(f"the host read {len(words)} words, not the {2 * len(COUNTERS)} of "
                         f"the counters")
    return {name: words[2 * i] | words[2 * i + 1] << DATA_BITS
            for i, name in enumerate(COUNTERS)}


def template_context(imem_depth: int) -> dict:
    """What ``sim_top.sv.j2`` needs to size and decode the host."""
    lines, reads = capacity(imem_depth)
    return {"bus_addr_bits": bus_addr_bits(imem_depth), "host_lines": lines,
            "host_reads": reads, "host_ops": {c.name: int(c) for c in Cmd}}
