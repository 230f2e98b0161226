"""Counter invariants: what the hardware counters must read after a program, from the program.

The shadow check compares a kernel's *outputs* with the reference; a fault that leaves the
outputs right but the counters wrong (a byte counter counting beats, an instruction counter
that misses a retire), or that makes the hardware skip or repeat work whose effect happens to
cancel, would pass it. So after every kernel the counters are checked against figures derived
independently from the program words alone:

- :func:`count_program` runs the program on an ISA-level interpreter: the 16 registers, ``li``,
  ``addi`` and the ``bnzd`` loops, exactly as :mod:`hwgen.isa` defines them (not through the
  templates' contexts, which the analytical cost model walks, nor through the static load
  count of :func:`fusion.kernels.codegen.load_bytes`). It counts the instructions retired,
  the bytes each LOAD reads (``count * len`` words), the k-slices each MATMUL issues, the rows
  that go through the epilogue and the bytes the store unit writes (a tile-ending MATMUL and a
  WINDOW store ``rows`` rows, an EPIPASS ``rows`` rows, of ``cols`` lanes of 4 or 1 bytes);
- :func:`check_counters` compares them with the counters (``hwgen.perf.COUNTERS``, documented
  in ``docs/hardware.md``): ``instret``, ``bytes_read``, ``bytes_written`` and ``array_busy``
  equal the program's figures; ``cycles`` is at least the ideal (one instruction, one k-slice,
  one epilogue row and one memory word a channel per cycle); a slice entering the array and a
  cycle stalled exclude each other, so ``array_busy`` plus either stall is at most ``cycles``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hwgen.config import VariantConfig
from hwgen.isa import NUM_REGS, OPCODES, REG_BITS, SLOTS, Dst, Dt, Op, window_words

_MASK = (1 << REG_BITS) - 1
#: The fields the interpreter reads, per opcode, in this order.
_FIELDS = {Op.LI: ("rd", "imm"), Op.ADDI: ("rd", "rs", "imm"), Op.BNZD: ("rc", "target"),
           Op.LOAD: ("count", "len", "dst", "ext", "stride"),
           Op.LOADW: ("count", "shift", "step"),
           Op.MATMUL: ("k", "dt", "last", "zf"),
           Op.EPIPASS: ("rows", "dt"), Op.WINDOW: ("dt",), Op.BZT: ("target",)}


class MemoryWords:
    """The words a job's memory image holds, for the flag loads of a program that branches
    on data (``load dst=z``, BZT): ``(word address, bytes)`` writes, read word by word (a
    word nothing wrote reads 0)."""

    def __init__(self, writes: Sequence[tuple[int, bytes]], port_bytes: int) -> None:
        # kept as given and sorted on the first read: a program that loads no flag (almost
        # every one) never reads, and the images hold the weights
        self._given, self._w = writes, port_bytes
        self._writes: list[tuple[int, bytes]] | None = None
        self._starts: list[int] = []

    def __call__(self, addr: int) -> int:
        if self._writes is None:
            self._writes = sorted(((int(a), d) for a, d in self._given), key=lambda w: w[0])
            self._starts = [a for a, _ in self._writes]
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return 0
        start, data = self._writes[i]
        at = (addr - start) * self._w
        return int.from_bytes(data[at:at + self._w], "little") if at < len(data) else 0


class UnfinishedProgram(ValueError):
    """A program the interpreter cannot finish: it runs past its last word, reaches an
    unknown opcode or exceeds its instruction budget."""


@dataclass(frozen=True)
class ProgramCounts:
    """What a program makes the hardware do, counted by :func:`count_program`.

    Attributes
    ----------
    instret : int
        Instructions retired, the final ``halt`` included.
    bytes_read : int
        Bytes the LOADs read from memory.
    bytes_written : int
        Bytes the store unit writes.
    k_slices : int
        k-slices the MATMULs issue into the array.
    epilogue_rows : int
        Rows that go through the epilogue (drained tile rows and pass rows).
    """

    instret: int
    bytes_read: int
    bytes_written: int
    k_slices: int
    epilogue_rows: int

    def ideal_cycles(self, config: VariantConfig) -> int:
        """A lower bound on ``cycles``: every unit at full rate, all of them overlapped."""
        w = config.port_bytes
        return max(self.instret, self.k_slices, self.epilogue_rows,
                   -(-self.bytes_read // w), -(-self.bytes_written // w))


def _fields(word: int, op: Op) -> tuple[int, ...]:
    values = []
    for name in _FIELDS.get(op, ()):
        f = next(f for f in OPCODES[op][0] if f.name == name)
        value = (word >> (SLOTS[f.slot][0] + f.lo)) & ((1 << f.width) - 1)
        if f.kind == "sint" and value >> (f.width - 1):
            value -= 1 << f.width
        values.append(value)
    return tuple(values)


def count_program(config: VariantConfig, words: Sequence[int], *,
                  max_instructions: int,
                  memory: Callable[[int], int] | None = None) -> ProgramCounts:
    """Interpret ``words`` at the ISA level and count what the counters must show.

    Parameters
    ----------
    config : VariantConfig
        The variant (array shape, port width).
    words : sequence of int
        The 64-bit program words, from instruction 0.
    max_instructions : int
        Stop with :class:`UnfinishedProgram` after retiring this many without a ``halt``.
    memory : callable, optional
        The word at a word address (:class:`MemoryWords`): what a program's flag loads read,
        which its BZTs branch on. A program with BZTs needs it.

    Returns
    -------
    ProgramCounts

    Raises
    ------
    UnfinishedProgram
        The program runs past its last word, reaches an unknown opcode, or retires more than
        ``max_instructions`` instructions.
    """
    op_lo, op_width = SLOTS["op"]
    decoded = []
    for word in words:
        code = (int(word) >> op_lo) & ((1 << op_width) - 1)
        op = Op(code) if code in Op._value2member_map_ else None
        decoded.append((op, _fields(int(word), op) if op is not None else ()))
    regs = [0] * NUM_REGS
    row_bytes = {int(Dt.I32): 4 * config.cols, int(Dt.I8): config.cols}
    pc = instret = loaded = stored = slices = rows = 0
    flags: list[bool] = []  # the tile-flag queue
    while True:
        if pc >= len(decoded):
            raise UnfinishedProgram(f"the program runs past its last word ({len(decoded)}) "
                                   f"without a halt")
        op, f = decoded[pc]
        if op is None:
            raise UnfinishedProgram(f"instruction {pc} has an unknown opcode")
        if instret >= max_instructions:
            raise UnfinishedProgram(f"the program retires more than {max_instructions:,} "
                                   f"instructions")
        instret += 1
        pc += 1
        if op is Op.HALT:
            break
        if op is Op.LI:
            regs[f[0]] = f[1] & _MASK
        elif op is Op.ADDI:
            regs[f[0]] = (regs[f[1]] + f[2]) & _MASK
        elif op is Op.BNZD:
            regs[f[0]] = (regs[f[0]] - 1) & _MASK
            if regs[f[0]]:
                pc = f[1]
        elif op is Op.LOAD:
            count, length, dst, ext, stride = f
            loaded += count * length * config.port_bytes
            if dst == Dst.Z:
                if memory is None:
                    raise UnfinishedProgram("the program loads tile flags, which its branches "
                                           "follow: interpret it with the memory it reads")
                flags += [memory((regs[ext] + i * regs[stride] + j) & _MASK) != 0
                          for i in range(count) for j in range(length)]
        elif op is Op.BZT:
            if not flags:
                raise UnfinishedProgram(f"instruction {pc - 1} (bzt) waits for a tile flag "
                                       f"that no flag load brings: it would wait forever")
            if flags.pop(0):
                pc = f[0]
        elif op is Op.LOADW:
            loaded += f[0] * window_words(config.rows, f[1], f[2]) * config.port_bytes
        elif op is Op.MATMUL:
            slices += f[0]
            if f[0] and f[2]:  # a tile-ending MATMUL drains its tile through the epilogue
                rows += config.rows
                stored += config.rows * row_bytes[f[1]]
                stored += config.port_bytes * f[3]  # and its zero flag, one word
        elif op is Op.EPIPASS:
            rows += f[0]
            stored += f[0] * row_bytes[f[1]]
        elif op is Op.WINDOW:  # the window unit's tile drains like an array tile
            rows += config.rows
            stored += config.rows * row_bytes[f[0]]
    return ProgramCounts(instret=instret, bytes_read=loaded, bytes_written=stored,
                         k_slices=slices, epilogue_rows=rows)


@dataclass(frozen=True)
class Violation:
    """One counter that does not read what the program implies."""

    counter: str
    relation: str  # "==", ">=" or "<="
    expected: int
    measured: int
    why: str

    def __str__(self) -> str:
        return (f"counter {self.counter} reads {self.measured:,}, but the program implies "
                f"{self.relation} {self.expected:,} ({self.why})")


def timing_floor(config: VariantConfig, words: Sequence[int], predicted: float) -> int:
    """The fewest cycles correct hardware can take, by the analytical timing model.

    The model (:mod:`fusion.cost.analytical`) walks the templates and is exact unit by unit;
    measured on Verilator it is never below a run and at most a few cycles above one (it
    cannot see when chained passes skip a setup ``li``: up to three cycles a pass). The floor
    leaves 1% and four cycles per EPIPASS instruction (and four) of margin. A run faster than
    that skipped a wait or some work even if its outputs came out right: a WAIT that does
    not wait for the compute unit wins a race its programs happen to lose harmlessly.
    """
    op_lo, op_width = SLOTS["op"]
    passes = sum((int(w) >> op_lo) & ((1 << op_width) - 1) == Op.EPIPASS for w in words)
    return int(predicted) - int(predicted) // 100 - 4 * (1 + passes)


def check_counters(config: VariantConfig, words: Sequence[int], counters: Mapping[str, int],
                   *, ideal_cycles: int = 0, floor_cycles: int = 0,
                   memory: Callable[[int], int] | None = None) -> list[Violation]:
    """The counter invariants of one run of ``words`` (see the module docstring).

    Parameters
    ----------
    config : VariantConfig
    words : sequence of int
        The program that ran.
    counters : mapping of str to int
        The counters read after ``done`` (every name of :data:`hwgen.perf.COUNTERS`).
    ideal_cycles : int
        A further lower bound on ``cycles`` the caller knows (a GEMM's ``M*N*K / (rows*cols)``).
    floor_cycles : int
        The timing model's floor (:func:`timing_floor`); 0 for none.
    memory : callable, optional
        The run's memory words (:class:`MemoryWords`), for a program that branches on them.

    Returns
    -------
    list of Violation
        Empty when every invariant holds.
    """
    (found,) = check_runs(config, words, [counters], ideal_cycles=ideal_cycles,
                          floor_cycles=floor_cycles,
                          memories=None if memory is None else [memory])
    return found


def check_runs(config: VariantConfig, words: Sequence[int],
               runs: Sequence[Mapping[str, int]], *, ideal_cycles: int = 0,
               floor_cycles: int = 0,
               memories: Sequence[Callable[[int], int]] | None = None
               ) -> list[list[Violation]]:
    """:func:`check_counters` for several runs of one program (a kernel on its own values
    and on directed input sets), interpreting the program once; a program that branches on
    data (BZT) once per run, on the words of its memory (``memories``, one per run:
    :class:`MemoryWords`).

    Returns
    -------
    list of list of Violation
        One list per run, in order.
    """
    op_lo, op_width = SLOTS["op"]
    if memories is not None and any((int(w) >> op_lo) & ((1 << op_width) - 1) == Op.BZT
                                    for w in words):
        return [_check_runs(config, words, [r], ideal_cycles=ideal_cycles,
                            floor_cycles=floor_cycles, memory=m)[0]
                for r, m in zip(runs, memories, strict=True)]
    return _check_runs(config, words, runs, ideal_cycles=ideal_cycles,
                       floor_cycles=floor_cycles, memory=None)


def _check_runs(config: VariantConfig, words: Sequence[int],
                runs: Sequence[Mapping[str, int]], *, ideal_cycles: int,
                floor_cycles: int, memory: Callable[[int], int] | None
                ) -> list[list[Violation]]:
    cycles = [int(c["cycles"]) for c in runs]
    try:
        # instret <= cycles, so interpreting past the longest run's cycles cannot help: such
        # a program cannot have finished in any of them.
        counts: ProgramCounts | None = count_program(config, words,
                                                     max_instructions=max(cycles),
                                                     memory=memory)
        why = ""
    except UnfinishedProgram as exc:
        counts, why = None, str(exc)
    out = []
    for counters, n in zip(runs, cycles, strict=True):
        if counts is None or counts.instret > n:
            why_n = why or f"the program retires more than {n:,} instructions"
            out.append([Violation("cycles", ">=", n + 1, n,
                                  f"the program cannot have finished in that time: {why_n}")])
        else:
            out.append(_compare(config, counts, counters, ideal_cycles, floor_cycles))
    return out


def _compare(config: VariantConfig, counts: ProgramCounts, counters: Mapping[str, int],
             ideal_cycles: int, floor_cycles: int) -> list[Violation]:
    cycles = int(counters["cycles"])
    found = []
    for name, want, why in (
            ("instret", counts.instret, "instructions the program retires"),
            ("bytes_read", counts.bytes_read, "bytes its LOADs read"),
            ("bytes_written", counts.bytes_written, "bytes its stores write"),
            ("array_busy", counts.k_slices, "k-slices its MATMULs issue")):
        if int(counters[name]) != want:
            found.append(Violation(name, "==", want, int(counters[name]), why))
    ideal = max(ideal_cycles, counts.ideal_cycles(config))
    if cycles < ideal:
        found.append(Violation("cycles", ">=", ideal, cycles, "the ideal: every unit at full "
                               "rate, all overlapped"))
    if cycles < floor_cycles:
        found.append(Violation("cycles", ">=", floor_cycles, cycles, "the analytical timing "
                               "model's floor for correct hardware: a wait or some work was "
                               "skipped"))
    for stall in ("stall_memory", "stall_epilogue"):
        busy = int(counters["array_busy"]) + int(counters[stall])
        if busy > cycles:
            found.append(Violation(f"array_busy + {stall}", "<=", cycles, busy,
                                   "a cycle issues a slice or stalls, not both"))
    return found
