"""Run microcode programs on a variant's Verilator simulation and read back their results.

::

    memory = MemoryImage(writes=((0, a_bytes), (512, b_bytes)), reads={"c": (1024, 256)})
    result = run_program(config, program, memory)
    result.outputs["c"], result.counters["cycles"]

Memory is addressed in words of ``config.port_bytes`` bytes, little-endian within a word.
Before a job, every read region is filled with the poison byte 0xA5 (:data:`POISON`), then the
writes are applied (so a region may be both written and read, as in-place operations do).
:func:`run_programs` runs many jobs in one simulator launch, resetting the design between
them and zeroing the words the previous job wrote; words the hardware writes outside a job's
read regions are not known, so they stay for the later jobs of that launch. A job with
``keep_memory`` starts from the memory exactly as the job before left it (nothing zeroed):
that is how the kernels of one model run back to back, each reading what the ones before it
stored where it lies.

The simulator runs in a process group of its own, killed with its children on Ctrl-C. A
build found damaged (:func:`sim.build.verified`), or whose simulator dies without writing
results, is rebuilt once with a one-line notice; a second failure is a :class:`SimError`.

Each call works in its own folder under ``<build root>/runs/`` (safe for parallel callers).
It is deleted afterwards, unless the simulator failed (its log is there) or the environment
variable ``HWGEN_KEEP_RUNS`` is set.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hwgen.config import VariantConfig
from hwgen.perf import COUNTERS
from sim import build as sim_build
from sim.launch import SimError, launch

if TYPE_CHECKING:
    from sim.board import Board
from sim.tb import jobfile
from sim.tb.jobfile import POISON

__all__ = [
    "POISON", "Job", "MemoryImage", "RunResult", "SimError", "SimTimeout",
    "default_timeout_cycles", "run_program", "run_programs",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class SimTimeout(SimError):
    """A program did not raise ``done`` within its cycle limit.

    Attributes
    ----------
    name : str
        The program's name.
    cycles : int
        The ``cycles`` counter, read over the bus when the host's watchdog fired.
    limit : int
        The limit, in cycles.
    results : list of RunResult or None
        Every job of the launch, when raised by :func:`run_programs`.
    """

    def __init__(self, name: str, cycles: int, limit: int):
        self.name, self.cycles, self.limit = name, cycles, limit
        self.results: list[RunResult] | None = None
        super().__init__(
            f"program {name!r} did not finish: done was still low after {cycles} cycles "
            f"(limit {limit}); raise timeout_cycles if it needs longer"
        )


@dataclass(frozen=True)
class MemoryImage:
    """What to write to external memory before start, and what to read back after done.

    Parameters
    ----------
    writes : tuple of (int, bytes)
        ``(word address, data)``; each length is a multiple of ``config.port_bytes``.
        Segments may not overlap.
    reads : dict of str to (int, int)
        ``name -> (word address, number of bytes)``; the bytes are a multiple of
        ``config.port_bytes``.
    """

    writes: tuple[tuple[int, bytes], ...] = ()
    reads: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Accept lists, bytearrays and uint8 arrays; keep immutable copies.
        writes = []
        for item in self.writes:
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise ValueError(f"a memory write is (word address, bytes), not {item!r}")
            addr, data = item
            if isinstance(data, np.ndarray):
                if data.dtype != np.uint8:
                    raise ValueError(
                        f"memory write at word {addr} is a {data.dtype} array; pass bytes or "
                        f"a uint8 array (view it with .view(np.uint8) first)"
                    )
                data = data.tobytes()
            elif isinstance(data, bytearray | memoryview):
                data = bytes(data)
            elif not isinstance(data, bytes):
                raise ValueError(
                    f"memory write at word {addr} holds {type(data).__name__}, not bytes"
                )
            writes.append((addr, data))
        object.__setattr__(self, "writes", tuple(writes))
        object.__setattr__(self, "reads", dict(self.reads))

    def check(self, config: VariantConfig) -> None:
        """Raise ValueError naming the first address, length or name that does not fit."""
        pb, words = config.port_bytes, config.mem_words
        spans = []
        for addr, data in self.writes:
            _check_region(f"memory write at word {addr}", addr, len(data), pb, words)
            spans.append((addr, addr + len(data) // pb))
        spans.sort()
        for (a0, a1), (b0, _) in zip(spans, spans[1:], strict=False):
            if b0 < a1:
                raise ValueError(
                    f"memory writes overlap: the segment at word {a0} runs to word {a1 - 1}, "
                    f"past the start of the segment at word {b0}"
                )
        for name, region in self.reads.items():
            if not isinstance(name, str) or not _NAME_RE.match(name):
                raise ValueError(
                    f"read region name {name!r} must be letters, digits, '_', '.' or '-'"
                )
            if not (isinstance(region, tuple | list) and len(region) == 2):
                raise ValueError(
                    f"read region {name!r} is (word address, bytes), not {region!r}"
                )
            _check_region(f"read region {name!r}", region[0], region[1], pb, words)


def _check_region(what: str, addr: int, size: int, port_bytes: int, mem_words: int) -> None:
    for value in (addr, size):
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise ValueError(f"{what}: addresses and sizes are integers, not {value!r}")
    if size <= 0 or size % port_bytes:
        raise ValueError(
            f"{what}: {size} bytes is not a positive multiple of the {port_bytes}-byte "
            f"memory word; pad it to {max(1, -(-size // port_bytes)) * port_bytes} bytes"
        )
    end = addr + size // port_bytes
    if addr < 0 or end > mem_words:
        raise ValueError(
            f"{what}: words {addr}..{end - 1} fall outside the memory's "
            f"{mem_words} words (0..{mem_words - 1})"
        )


@dataclass(frozen=True)
class Job:
    """One program run: the program, its memory image, a name for messages, a cycle limit,
    and whether it keeps the memory the job before left (``keep_memory``: nothing zeroed, so
    it may read what earlier jobs stored; its writes and poisoned reads still apply)."""

    program: Sequence[int]
    memory: MemoryImage
    name: str = "program"
    timeout_cycles: int | None = None
    keep_memory: bool = False


@dataclass(frozen=True)
class RunResult:
    """What one job produced.

    Attributes
    ----------
    outputs : dict of str to numpy.ndarray
        Each read region's bytes (uint8).
    counters : dict of str to int
        Every counter of :data:`hwgen.perf.COUNTERS`, read once after done.
    wall_seconds : float
        Wall time of the simulation from start to done (no build, no memory loading).
    """

    outputs: dict[str, np.ndarray]
    counters: dict[str, int]
    wall_seconds: float

    @property
    def cycles(self) -> int:
        """Cycles from start to done (``counters["cycles"]``)."""
        return self.counters["cycles"]


def default_timeout_cycles(
    program: Sequence[int], memory: MemoryImage, config: VariantConfig
) -> int:
    """A generous cycle limit: 1 M cycles, plus 1,000 per instruction and 256 per memory word.

    Loops make the work of a short program large, so the allowance grows with the data it
    touches: even an O(n^1.5) GEMM over that data stays well inside it.
    """
    words = sum(len(d) for _, d in memory.writes) + sum(n for _, n in memory.reads.values())
    return 1_000_000 + 1_000 * len(program) + 256 * (words // config.port_bytes)


def _check_job(config: VariantConfig, job: Job) -> None:
    if not isinstance(job.name, str) or not job.name:
        raise ValueError(f"a job name is a non-empty string, not {job.name!r}")
    prog = list(job.program)
    if not prog:
        raise ValueError(f"program {job.name!r} is empty; end it with HALT")
    if len(prog) > config.imem_depth:
        raise ValueError(
            f"program {job.name!r} has {len(prog)} words but the instruction memory holds "
            f"{config.imem_depth}; shorten it or generate a variant with a larger imem_depth"
        )
    for i, word in enumerate(prog):
        if not isinstance(word, int | np.integer) or isinstance(word, bool) or not (
            0 <= word < 1 << 64
        ):
            raise ValueError(
                f"program {job.name!r} word {i} is {word!r}, not a 64-bit unsigned integer"
            )
    if not isinstance(job.memory, MemoryImage):
        raise ValueError(f"program {job.name!r}: memory must be a MemoryImage")
    job.memory.check(config)
    limit = job.timeout_cycles
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0
    ):
        raise ValueError(
            f"program {job.name!r}: timeout_cycles must be a positive integer, "
            f"not {job.timeout_cycles!r}"
        )


def _uncovered(ranges: Sequence[tuple[int, int]], cover: Sequence[tuple[int, int]]
               ) -> list[tuple[int, int]]:
    """The parts of word ranges ``(addr, words)`` that no range of ``cover`` overlaps."""
    out = []
    cover = sorted((a, a + n) for a, n in cover if n > 0)
    for addr, words in ranges:
        start, end = addr, addr + words
        for lo, hi in cover:
            if hi <= start or lo >= end:
                continue
            if lo > start:
                out.append((start, lo - start))
            start = max(start, hi)
            if start >= end:
                break
        if start < end:
            out.append((start, end - start))
    return out


def _specs(config: VariantConfig, jobs: Sequence[Job],
           previous: Sequence[tuple[int, int]] = ()) -> list[jobfile.JobSpec]:
    """The jobs as a host runs them; ``previous``: word ranges earlier jobs left in memory."""
    specs, previous = [], list(previous)
    for job in jobs:
        mem = job.memory
        timeout = job.timeout_cycles or default_timeout_cycles(job.program, mem, config)
        touched = touched_words(config, job)
        specs.append(jobfile.JobSpec(
            name=job.name,
            program=np.array([int(w) for w in job.program], dtype=np.uint64),
            writes=[(a, np.frombuffer(d, dtype=np.uint8)) for a, d in mem.writes],
            reads=dict(mem.reads),
            timeout_cycles=timeout,
            # what the job before wrote or read back, but not what this job writes or poisons
            # anyway (the jobs of one kernel, on the model's values and its directed sets,
            # use the same regions: zeroing them first wrote every word twice)
            clear=[] if job.keep_memory else _uncovered(previous, touched),
        ))
        # a job that keeps memory leaves the words of the jobs before it for the next one too
        previous = previous + touched if job.keep_memory else touched
    return specs


def touched_words(config: VariantConfig, job: Job) -> list[tuple[int, int]]:
    """The word ranges ``(addr, words)`` a job writes or reads back."""
    pb = config.port_bytes
    return [(a, len(d) // pb) for a, d in job.memory.writes] + [
        (a, n // pb) for a, n in job.memory.reads.values()]


def _run_folder(build: sim_build.BuildInfo, name: str) -> Path:
    runs = build.directory.parent / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40]
    return Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=runs))


def _usable(build: sim_build.BuildInfo) -> sim_build.BuildInfo:
    if build.source is None and not build.executable.is_file():
        raise SimError(
            f"no simulator at {build.executable}: the build folder was removed or is "
            f"incomplete, and this build was not made by sim.build, so it cannot be remade")
    return sim_build.verified(build)


def run_programs(
    config: VariantConfig,
    jobs: Sequence[Job],
    *,
    build: sim_build.BuildInfo | Board | None = None,
) -> list[RunResult]:
    """Run several programs in one simulator launch, resetting the design between them.

    Parameters
    ----------
    config : VariantConfig
        The variant; it is built first if needed (:func:`sim.build.build_variant`).
    jobs : sequence of Job
        The programs, run in order.
    build : BuildInfo or sim.board.Board or hwgen.board.runtime.BoardRunner, optional
        A build to use instead of the variant's default one (tests pass a small design; the
        CLI passes :func:`sim.build.build_folder` of a variant folder), or a board whose
        build for this launch is asked for (:meth:`sim.board.Board.launch`), or an FPGA
        board's session, which runs the jobs over its host link
        (:meth:`hwgen.board.runtime.BoardRunner.run_jobs`). It is checked against
        its marker first (:func:`sim.build.verified`), and a simulator that dies without
        writing results is rebuilt once (:func:`sim.build.rebuilt`), each with a one-line
        notice on stderr.

    Returns
    -------
    list of RunResult
        One per job, in order.

    Raises
    ------
    ValueError
        If a program or memory image does not fit the variant (nothing is run).
    SimTimeout
        For the first job that did not finish; every job still ran, and the exception's
        ``results`` holds them all (a timed-out job's outputs are what memory held then).
    SimError
        If the simulator or testbench failed (the simulator again after a rebuild); the run
        folder is kept for its log.
    sim.build.BuildError
        If a damaged build could not be rebuilt.
    """
    jobs = list(jobs)
    if not jobs:
        raise ValueError("run_programs needs at least one job")
    for job in jobs:
        _check_job(config, job)
    if build is not None and hasattr(build, "run_jobs"):  # an FPGA board's BoardRunner
        return build.run_jobs(config, jobs)
    if build is not None and hasattr(build, "launch"):  # a sim.board.Board
        if build.config != config:
            raise ValueError(f"the board runs variant {build.config.key()}, not "
                             f"{config.key()}")
        build = build.launch()
    if build is None:
        build = sim_build.build_variant(config)
    elif build.config != config:
        raise ValueError(
            f"the build is of variant {build.config.key()}, not of {config.key()}"
        )
    else:
        build = _usable(build)  # damaged or removed since it was made: rebuilt once
    folder = _run_folder(build, jobs[0].name)
    header = {
        "memory": build.memory,
        "port_bytes": config.port_bytes,
        "clock_period_ns": sim_build.CLOCK_PERIOD_NS,
        "counters": list(COUNTERS),
        "imem_depth": config.imem_depth,
    }
    raw, error = launch(build, folder, header, _specs(config, jobs))
    if error is not None:
        raise SimError(f"the testbench failed (run folder {folder}):\n{error}")
    results = [
        RunResult(outputs=r["outputs"], counters=r["counters"], wall_seconds=r["wall_seconds"])
        for r in raw
    ]
    # Kept only on SimError (above) or on request: a timeout's log holds nothing more.
    if not os.environ.get("HWGEN_KEEP_RUNS"):
        shutil.rmtree(folder, ignore_errors=True)
    for r in raw:
        if r["status"] == "timeout":
            exc = SimTimeout(r["name"], r["counters"]["cycles"], r["timeout_cycles"])
            exc.results = results
            raise exc
    return results


def run_program(
    config: VariantConfig,
    program: Sequence[int],
    memory: MemoryImage,
    *,
    name: str = "program",
    timeout_cycles: int | None = None,
    build: sim_build.BuildInfo | None = None,
) -> RunResult:
    """Run one program: load memory and program, start, wait for done, read back.

    Parameters
    ----------
    config : VariantConfig
        The variant to run on.
    program : sequence of int
        64-bit microcode words, written to the instruction memory from address 0.
    memory : MemoryImage
        What to write before start and which regions to read after done.
    name : str
        Names the program in error messages.
    timeout_cycles : int, optional
        Cycle limit; :func:`default_timeout_cycles` by default.
    build : BuildInfo, optional
        A build to use instead of the variant's default one.

    Returns
    -------
    RunResult

    Raises
    ------
    ValueError, SimTimeout, SimError
        As :func:`run_programs`.
    """
    job = Job(program=program, memory=memory, name=name, timeout_cycles=timeout_cycles)
    return run_programs(config, [job], build=build)[0]
