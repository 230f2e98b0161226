"""The accelerator's pipeline timing, as the compiler's cost model counts it.

The gateware and :mod:`fusion.cost.machine` both read these. Where a constant is a parameter
of the hardware (the queue depth, the array's latency), the gateware is built from it; where
it counts registers that the gateware's structure fixes, the lines it counts are named here
and marked at those lines, and the single-phase micro-benchmarks on Verilator
(``tests/fusion/cost/test_machine.py``) pin it.
"""

from __future__ import annotations

from hwgen.config import VariantConfig

#: The clock the compiler assumes when it weighs host seconds against accelerator cycles
#: (:mod:`fusion.cost.host`): 100 MHz, a typical closing frequency of a small int8 array on a
#: mid-range FPGA. No variant records a measured Fmax yet; when the descriptor carries one
#: (synthesis), it should take this value's place.
DEFAULT_CLOCK_HZ = 100_000_000

#: Depth of the LOAD queue and of the compute-job queue (``hwgen.gateware.accelerator``): how
#: far the sequencer runs ahead of the load engine and of the array.
QUEUE_DEPTH = 4

#: Flags the tile-flag queue holds (``load dst=z`` fills it, BZT takes from it,
#: ``hwgen.gateware.sequencer``): a program loads no more flags than that ahead of its BZTs.
ZQ_DEPTH = 512

#: Cycles from a command entering a queue to its unit seeing it: ``amaranth.lib.fifo``'s
#: ``SyncFIFOBuffered`` shows a written entry on its read side two cycles later.
QUEUE_LATENCY = 2

#: Cycles from a LOAD, MATMUL or EPIPASS retiring to its unit starting on it: the queue, then
#: the unit's command register (``LoadEngine``'s ``cmd``, ``ComputeUnit``'s ``cur`` /
#: ``pass_job``).
ISSUE_LATENCY = QUEUE_LATENCY + 1

#: Registers between a tile's final k-slice and its first drained row, besides the array's
#: own :func:`array_latency`: the operand register in front of the array (``ComputeUnit``'s
#: ``s1_valid``) and the drain's start (``drain_active``).
TILE_GAP = 2

#: Commands whose words the load engine may have in flight at once (``LoadEngine``'s response
#: contexts): the next LOAD starts requesting once the one before has made its last request.
LOAD_CONTEXTS = 4

#: Cycles the load engine stays busy after its last word arrives: the gearbox's output
#: register (``Gearbox.o_valid``) and ``LoadEngine``'s ``finished`` register that clears
#: ``busy``.
LOAD_TAIL = 2


def array_latency(config: VariantConfig) -> int:
    """Cycles from presenting a tile's last operands until its whole result is in the array.

    Operands reach cell (i, j) ``i + j + 1`` cycles after they enter (the input register,
    which keeps the scratchpads' block RAM outputs off the multipliers, then the skew
    registers and the cell-to-cell registers of ``hwgen.gateware.array``), and the cell
    captures one cycle later.
    """
    return config.rows + config.cols


#: Registers between a window column's read and its output's row in the tile
#: (``hwgen.gateware.window``: stage 1 shifts the column into the window, stage 2 multiplies
#: the taps, stage 3 sums them).
WINDOW_STAGES = 3


def window_columns(*, mode: str, kh: int, kw: int, stride: int, hin: int, win: int,
                   pos: int, count: int, ow: int) -> int:
    """Cycles the window unit reads for one WINDOW tile (a column, or a sum's pixel, a
    cycle): an output's whole window (``kw`` columns) at the tile's start and at each new
    output row, ``min(stride, kw)`` new columns otherwise; a sum, its image's plane."""
    if mode == "sum":
        return count * hin * win
    ox = pos & 0xFFFF
    cycles = 0
    for r in range(count):
        cycles += kw if r == 0 or ox == 0 else min(stride, kw)
        ox = 0 if ox + 1 == ow else ox + 1
    return cycles
