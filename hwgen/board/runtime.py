"""The host runtime of a board: programs and tensors in, results and counters out, over the
UART bridge (:mod:`hwgen.board.link`).

:class:`BoardRunner` does on a board what :func:`sim.run.run_programs` does on Verilator, with
the same jobs and the same results, so the model runtime (:func:`fusion.runtime.run.run_compiled`)
and its shadow checks take either. A session:

1. **identity** (:meth:`BoardRunner.check_identity`), before anything is written: the
   system on chip's identity region must hold "HWGB" and the board folder's design digest,
   and the accelerator's ``ID``/``BUILD`` registers the variant's magic and key. A board
   running another bitstream is refused, naming both digests and the flash command;
2. **DRAM initialization**: LiteDRAM's own sequence for the part, played through its DFII
   registers with the host's clock for the waits, then the controller takes the memory;
3. **jobs**, each as the simulator's testbench runs one: the words the job before touched
   are zeroed, the read regions filled with the poison byte, the writes applied, the program
   written into the instruction memory (only the halves that changed), the done interrupt
   enabled and cleared, ``CTRL.START``; the host polls ``IRQ_PENDING`` and the ``cycles``
   counter (a job that runs past its cycle limit has timed out, as in simulation), then reads
   the counters and the read regions.

Memory on a board keeps its contents between sessions (the simulator starts from zeros):
the runner zeroes what earlier jobs of its own touched; what a job reads but never wrote is
the poison byte, as in simulation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hwgen.board import soc
from hwgen.board.build import DESCRIPTOR, FORMAT
from hwgen.board.link import LinkError, UartBone
from hwgen.config import VariantConfig
from hwgen.files import read_bytes
from hwgen.perf import COUNTERS
from hwgen.platform import PlatformConfig
from hwgen.regmap import MAGIC, counter_word, csr

#: DFII's control and command bits (LiteDRAM's ``dfii.py`` field order).
DFII_CONTROL = {"SEL": 1, "CKE": 2, "ODT": 4, "RESET_N": 8}
DFII_COMMAND = {"CS": 1, "WE": 2, "CAS": 4, "RAS": 8, "WRDATA": 16, "RDDATA": 32}
#: Seconds between polls of a running kernel.
POLL_SECONDS = 0.002


class BoardMismatch(ValueError):
    """The board runs another design than the folder's."""


@dataclass(frozen=True)
class BoardFolder:
    """A folder written by ``hwgen build --board`` (checked as it is read).

    Attributes
    ----------
    directory : Path
    descriptor : dict
        ``board.json``.
    config : VariantConfig
    platform : PlatformConfig
        The memory as the accelerator-only simulation models it.
    """

    directory: Path
    descriptor: dict[str, Any]
    config: VariantConfig
    platform: PlatformConfig

    @property
    def digest(self) -> str:
        return self.descriptor["digest"]

    @property
    def baud(self) -> int:
        return self.descriptor["baud"]

    @property
    def clock_hz(self) -> int:
        return self.descriptor["clock_hz"]

    @property
    def soc(self) -> dict[str, Any]:
        return self.descriptor["soc"]

    def region(self, name: str) -> int:
        return self.soc["regions"][name][0]


def is_board_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder with a ``board.json``."""
    return (Path(path) / DESCRIPTOR).is_file()


def open_board_folder(path: str | Path, *, check_bitstream: bool = True) -> BoardFolder:
    """Read and check a board folder.

    ``check_bitstream``: the bitstream file must be there and its SHA-256 the one recorded
    (a bitstream that differs from its descriptor is refused: flash neither).

    Raises
    ------
    ValueError
        For a missing or damaged ``board.json``, or a bitstream that does not match it, with
        the command that rebuilds the folder.
    """
    directory = Path(path)
    desc_path = directory / DESCRIPTOR
    rebuild = f"rebuild it with 'hwgen build --board ... -o {directory}'"
    try:
        descriptor = json.loads(read_bytes(desc_path, "board descriptor"))
        if descriptor.get("format") != FORMAT:
            raise ValueError(f"format {descriptor.get('format')!r}, not {FORMAT}")
        config = VariantConfig.from_dict(descriptor["variant"])
        platform = PlatformConfig.from_dict(descriptor["platform"])
        if config.key() != descriptor["variant_key"]:
            raise ValueError("its variant does not match its variant_key")
        for key in ("digest", "baud", "clock_hz", "soc", "bitstream"):
            descriptor[key]  # noqa: B018 - present, or KeyError below
    except FileNotFoundError:
        raise ValueError(f"{directory} is not a board folder (no {DESCRIPTOR}); {rebuild}") \
            from None
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise ValueError(f"{desc_path} is damaged ({exc}); {rebuild}") from None
    folder = BoardFolder(directory, descriptor, config, platform)
    if check_bitstream:
        check_bitstream_file(folder)
    return folder


def check_bitstream_file(folder: BoardFolder) -> None:
    """Refuse a folder whose bitstream file is missing or is not the one its descriptor
    records (SHA-256 and size)."""
    import hashlib

    bit = folder.descriptor["bitstream"]
    if bit is None:  # built --sim-only: only the simulated board runs it
        return
    path = folder.directory / bit["file"]
    try:
        data = read_bytes(path, "bitstream")
    except OSError as exc:
        raise ValueError(f"the board folder's bitstream {path} cannot be read ({exc}); "
                         f"rebuild the folder with 'hwgen build --board'") from None
    sha = hashlib.sha256(data).hexdigest()
    if sha != bit["sha256"] or len(data) != bit["bytes"]:
        raise BoardMismatch(
            f"the bitstream {path} ({len(data)} bytes, sha256 {sha[:16]}) is not the one "
            f"{DESCRIPTOR} records ({bit['bytes']} bytes, sha256 {bit['sha256'][:16]}); "
            f"rebuild the folder with 'hwgen build --board' rather than mixing files")


class BoardRunner:
    """A session with one board (a context manager).

    Parameters
    ----------
    folder : BoardFolder
        What the board must be running.
    port : str
        Its serial port or pyserial URL.
    timeout : float
        Seconds a reply may take (beyond the bytes queued before it).
    byte_seconds : float, optional
        What a byte takes on the wire (:class:`~hwgen.board.link.UartBone`).

    Attributes
    ----------
    link : UartBone
    seconds : dict of str to float
        Wall time of the session's jobs: ``load`` (memory and program in), ``run`` (start
        to done, polling) and ``read`` (results out).
    """

    def __init__(self, folder: BoardFolder, port: str, *, timeout: float = 5.0,
                 byte_seconds: float | None = None, simulated: bool = False):
        self.folder = folder
        self.simulated = simulated
        self.config = folder.config
        self.link = UartBone(port, folder.baud, timeout=timeout, byte_seconds=byte_seconds)
        self._imem: list[int] = []
        self._touched: list[tuple[int, int]] = []
        self.seconds = {"load": 0.0, "run": 0.0, "read": 0.0}
        #: What DDR3 read leveling chose, lane by lane (empty without it).
        self.leveling: list[dict] = []
        self._accel = folder.region("accel")
        self._dram = folder.region("dram")

    @property
    def platform(self) -> PlatformConfig:
        """The board's memory, as the accelerator-only simulation models it."""
        return self.folder.platform

    # -- session -------------------------------------------------------------------------
    def __enter__(self) -> BoardRunner:
        self.link.open()
        try:
            self.check_identity()
            self.init_dram()
        except BaseException:
            self.link.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.link.close()

    def _csr(self, name: str) -> int:
        regs = self.folder.soc["csr_registers"]
        if name not in regs:
            raise ValueError(f"the board's system on chip has no register {name}; rebuild "
                             f"the board folder")
        return regs[name][0]

    def check_identity(self) -> None:
        """Refuse a board that does not run the folder's design (before writing anything).

        Raises
        ------
        LinkError
            Nothing answered.
        BoardMismatch
            Something answered that is not this folder's design.
        """
        words = self.link.read(self.folder.region("ident"), soc.IDENT_WORDS)
        bit = self.folder.descriptor["bitstream"]
        flash = ("this folder has no bitstream (built --sim-only)" if bit is None else
                 f"flash it with 'openFPGALoader -b {self._loader()} "
                 f"{self.folder.directory / bit['file']}'")
        if int(words[0]) != soc.IDENT_MAGIC:
            raise BoardMismatch(f"the device on {self.link.port} is not an hwgen board (its "
                                f"identity word reads {int(words[0]):#010x}); {flash}")
        digest = "".join(f"{int(w):08x}" for w in words[1:])
        if digest != self.folder.digest:
            raise BoardMismatch(
                f"the board on {self.link.port} runs design {digest[:16]}, not this folder's "
                f"{self.folder.digest[:16]} ({self.folder.directory}); {flash}")
        ident, build = self.link.read(self._accel + 4 * csr("ID").word, 2)
        from hwgen.gateware.host import build_id

        if int(ident) != MAGIC or int(build) != build_id(self.config):
            raise BoardMismatch(f"the board's accelerator reads ID {int(ident):#x} BUILD "
                                f"{int(build):#x}, not variant {self.config.key()}; {flash}")

    def _loader(self) -> str:
        from hwgen.board.boards import BOARDS

        board = BOARDS.get(self.folder.descriptor["board"])
        return board.loader_board if board is not None else "BOARD"

    def init_dram(self) -> None:
        """Play LiteDRAM's initialization of the part through DFII, then hand the memory to
        the controller."""
        control = self._csr("sdram_dfii_control")
        for step in self.folder.soc["dram"]["init"]:
            names = step["cmd"].split("|")
            if all(n.startswith("DFII_CONTROL_") for n in names):
                value = sum(DFII_CONTROL[n.removeprefix("DFII_CONTROL_")] for n in names)
                self.link.write(control, [value])
            else:
                value = sum(DFII_COMMAND[n.removeprefix("DFII_COMMAND_")] for n in names)
                self.link.write(self._csr("sdram_dfii_pi0_address"), [step["a"]])
                self.link.write(self._csr("sdram_dfii_pi0_baddress"), [step["ba"]])
                self.link.write(self._csr("sdram_dfii_pi0_command"), [value])
                self.link.write(self._csr("sdram_dfii_pi0_command_issue"), [1])
            if step["delay_us"]:
                self.link.read(control, 1)  # the writes have arrived: now wait
                time.sleep(step["delay_us"] / 1e6)
        self.link.write(control, [DFII_CONTROL["SEL"]])
        if int(self.link.read(control, 1)[0]) & DFII_CONTROL["SEL"] == 0:
            raise LinkError(f"the board on {self.link.port} did not take the DRAM controller "
                            f"out of initialization")
        shape = self.folder.soc["dram"].get("read_leveling")
        if shape and not self.simulated:  # the simulation's PHY has no delays to level
            from hwgen.board.leveling import PATTERN_WORDS, LevelingFailed, ReadLeveler

            leveler = ReadLeveler(self.link.write, self.link.read, self._csr, self._dram,
                                  lanes=shape["modules"], bitslips=shape["bitslips"],
                                  delays=shape["delays"])
            try:
                self.leveling = [lane.to_dict() for lane in leveler.level()]
            except LevelingFailed as exc:
                raise LinkError(f"the board on {self.link.port}: {exc}") from None
            # The pattern's words are zeroed before the first job, as a job's are.
            self._touched = [(0, -(-PATTERN_WORDS * 4 // self.config.port_bytes))]

    # -- jobs ----------------------------------------------------------------------------
    def _mem(self, word: int) -> int:
        return self._dram + word * self.config.port_bytes

    def _fill(self, word: int, nbytes: int, byte: int) -> None:
        self.link.write(self._mem(word), np.full(nbytes // 4, byte * 0x01010101, np.uint32))

    def run_jobs(self, config: VariantConfig, jobs: Sequence) -> list:
        """Run ``jobs`` (:class:`sim.run.Job`) in order, as :func:`sim.run.run_programs` does.

        Raises
        ------
        sim.run.SimTimeout
            For the first job that did not finish within its cycle limit (every job ran; the
            exception's ``results`` holds them all).
        LinkError
            If the board stopped answering.
        """
        from sim.run import RunResult, SimTimeout, _specs, touched_words
        from sim.tb.jobfile import POISON

        if config != self.config:
            raise ValueError(f"the board runs variant {self.config.key()}, not {config.key()}")
        # the board's memory keeps what this session's earlier jobs left: zeroed as the
        # testbench zeroes what the job before wrote
        specs = _specs(config, jobs, previous=self._touched)
        pb = config.port_bytes
        results, timeouts = [], []
        for job, spec in zip(jobs, specs, strict=True):
            t0 = time.perf_counter()
            for addr, words in spec.clear:
                self._fill(addr, words * pb, 0)
            for addr, nbytes in spec.reads.values():
                self._fill(addr, nbytes, POISON)
            for addr, data in spec.writes:
                self.link.write_bytes(self._mem(addr), data.tobytes())
            self._write_program([int(w) for w in spec.program])
            self._check_idle()  # also waits for the bridge to take every byte sent
            t1 = time.perf_counter()
            status, counters = self._start_and_wait(spec.timeout_cycles)
            t2 = time.perf_counter()
            outputs = {name: np.frombuffer(self.link.read_bytes(self._mem(addr), nbytes),
                                           dtype=np.uint8).copy()
                       for name, (addr, nbytes) in spec.reads.items()}
            self.seconds["load"] += t1 - t0
            self.seconds["run"] += t2 - t1
            self.seconds["read"] += time.perf_counter() - t2
            wall = t2 - t1
            results.append(RunResult(outputs=outputs, counters=counters, wall_seconds=wall))
            if status == "timeout":
                timeouts.append((spec.name, counters["cycles"], spec.timeout_cycles))
            touched = touched_words(config, job)
            self._touched = self._touched + touched if job.keep_memory else touched
        if timeouts:
            name, cycles, limit = timeouts[0]
            exc = SimTimeout(name, cycles, limit)
            exc.results = results
            raise exc
        return results

    def _write_program(self, program: list[int]) -> None:
        """Write ``program`` into the instruction memory as the testbench's host does
        (:func:`sim.tb.host_script.imem_writes`), consecutive words as one burst."""
        from sim.tb.host_script import imem_writes

        writes, self._imem = imem_writes(program, self._imem, self.config.imem_depth)
        run_start, run = None, []
        for addr, value in writes:
            if run and addr != run_start + len(run):
                self.link.write(self._accel + 4 * run_start, run)
                run = []
            if not run:
                run_start = addr
            run.append(value)
        if run:
            self.link.write(self._accel + 4 * run_start, run)

    def _check_idle(self) -> None:
        """Refuse to start while a program runs (one a session that was cut short left
        running would ignore the start, and the results would be its)."""
        status = csr("STATUS")
        value = int(self.link.read(self._accel + 4 * status.word, 1)[0])
        if value >> status.field("RUNNING").lo & 1:
            raise LinkError(f"the board on {self.link.port} is still running a program (left "
                            f"by an interrupted session?); reset it (press PWR, or flash the "
                            f"bitstream again) and run again")

    def _start_and_wait(self, timeout_cycles: int) -> tuple[str, dict[str, int]]:
        """Start the program, wait for done (or ``timeout_cycles`` on its cycle counter), and
        read every counter: ``("done" | "timeout", counters)``."""
        done = 1 << csr("IRQ_ENABLE").field("DONE").lo
        reg = lambda n: self._accel + 4 * csr(n).word  # noqa: E731
        self.link.write(reg("IRQ_ENABLE"), [done])
        self.link.write(reg("IRQ_PENDING"), [done])
        self.link.write(reg("CTRL"), [1 << csr("CTRL").field("START").lo])
        cycles_addr = self._accel + 4 * counter_word("cycles")
        status = "done"
        while True:
            if int(self.link.read(reg("IRQ_PENDING"), 1)[0]) & done:
                break
            lo, hi = self.link.read(cycles_addr, 2)
            if int(lo) | int(hi) << 32 > timeout_cycles:
                status = "timeout"
                break
            time.sleep(POLL_SECONDS)
        raw = self.link.read(self._accel + 4 * counter_word(COUNTERS[0]), 2 * len(COUNTERS))
        counters = {n: int(raw[2 * i]) | int(raw[2 * i + 1]) << 32
                    for i, n in enumerate(COUNTERS)}
        return status, counters
