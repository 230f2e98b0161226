"""Measure a DRAM platform's native port on Verilator: what the accelerator's DMA will see.

Each figure is a run of the driver ``bench.cpp`` on the platform's build
(:func:`sim.dram.build.build`), which offers a command every cycle and counts cycles:

- ``sequential``: reads of consecutive words (one row after another: the best case);
- ``row_conflict``: each read to a new row of the same bank (stride ``1 << row_lsb``): every
  read pays precharge + activate;
- ``bank_stride``: each read to the next bank (stride ``1 << bank_lsb``), a new row each
  time round the banks: on one native port the crossbar holds a bank switch until the
  previous bank's data is back, so this costs about a read latency each;
- ``write_check``: consecutive writes (data waiting in a FIFO filled at command acceptance),
  then the same words read back and compared (``read_back``): ``errors`` must be 0;
- ``read_after_write``: on the one port, write a word and read it back at once, then the
  next word (commands alternate): the read must see the write (``errors`` 0), and the cost
  is the controller's write-to-read turnaround;
- refresh, from the sequential run: refreshes seen, their interval, and the cycles the
  refresher held the controller (``refresh_active``), per refresh and as a fraction.

Run ``python -m sim.dram.characterize --memory ddr3 [--refresh hot] [--checker]`` for the
figures as JSON (``--checker`` adds LiteDRAM's DFI timing checker and lists what it reports).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hwgen.platform import PlatformConfig
from sim.dram.build import DramBuild, build
from sim.dram.generate import check_data_width


@dataclass(frozen=True)
class PatternRun:
    """One pattern's counts.

    Attributes
    ----------
    name : str
    stride : int
        Port words between consecutive accesses.
    accesses : int
        Commands issued (and completed).
    cycles : int
        From the first command offered to the last data returned (or write data taken).
    latency_mean, latency_max : float, int
        Read command accepted to its data (0 for writes).
    cmd_refused : int
        Cycles a command was offered and ``cmd.ready`` was low.
    refreshes, refresh_cycles : int
        Refreshes begun, and cycles the refresher held the controller, during the run.
    errors : int
        Reads whose data was not what had been written (checked runs only).
    reads_max : int
        The most reads outstanding at once (accepted, data not yet back): the read-data
        buffer (credits) a requester needs to keep this pattern's pace.
    wdata_max : int
        The most write data waiting at once (command accepted, data not yet taken): the
        depth the write-data FIFO needs.
    """

    name: str
    stride: int
    accesses: int
    cycles: int
    latency_mean: float
    latency_max: int
    cmd_refused: int
    refreshes: int
    refresh_cycles: int
    errors: int
    reads_max: int
    wdata_max: int

    @property
    def cycles_per_access(self) -> float:
        """Cycles per command: the port's throughput on this pattern, inverted."""
        return self.cycles / self.accesses


@dataclass(frozen=True)
class Figures:
    """The measured figures of one platform (see the module docstring)."""

    platform: PlatformConfig
    data_width: int
    build_seconds: float
    cached: bool
    sequential: PatternRun
    row_conflict: PatternRun
    bank_stride: PatternRun
    write_check: PatternRun
    read_back: PatternRun
    read_after_write: PatternRun
    sim_cycles_per_second: float
    startup_seconds: float
    checker: bool
    violations: tuple[str, ...]

    @property
    def refresh_interval(self) -> float:
        """Cycles between refreshes (sequential run)."""
        return self.sequential.cycles / max(1, self.sequential.refreshes)

    @property
    def refresh_hold_cycles(self) -> float:
        """Cycles the refresher held the controller, per refresh (sequential run)."""
        return self.sequential.refresh_cycles / max(1, self.sequential.refreshes)

    @property
    def refresh_fraction(self) -> float:
        """The fraction of cycles the refresher held the controller (sequential run)."""
        return self.sequential.refresh_cycles / self.sequential.cycles

    def to_dict(self) -> dict:
        """Plain JSON, with the derived figures."""
        runs = ("sequential", "row_conflict", "bank_stride", "write_check", "read_back",
                "read_after_write")
        out = {
            "platform": self.platform.to_dict(),
            "key": self.platform.key(),
            "data_width": self.data_width,
            "build_seconds": self.build_seconds,
            "cached": self.cached,
            "sim_cycles_per_second": round(self.sim_cycles_per_second),
            "startup_seconds": round(self.startup_seconds, 3),
            "checker": self.checker,
            "violations": list(self.violations),
            "refresh": {"interval_cycles": round(self.refresh_interval, 1),
                        "hold_cycles_per_refresh": round(self.refresh_hold_cycles, 2),
                        "fraction": round(self.refresh_fraction, 4)},
        }
        for name in runs:
            run = getattr(self, name)
            out[name] = {**asdict(run), "cycles_per_access": round(run.cycles_per_access, 4)}
        return out


def _run(b: DramBuild, args: list[str]) -> tuple[dict, float]:
    began = time.perf_counter()
    proc = subprocess.run([str(b.executable), *args], capture_output=True, text=True,
                          timeout=600)
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        raise RuntimeError(f"{b.executable} {' '.join(args)} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()}")
    *printed, last = proc.stdout.splitlines() or [""]
    counts = json.loads(last)
    # With the timing checker built in, every other line is a violation it printed.
    counts["violations"] = [line for line in printed if line.strip()]
    return counts, seconds


def _pattern(name: str, stride: int, counts: dict) -> PatternRun:
    reads = counts["latency_sum"] > 0
    return PatternRun(
        name=name, stride=stride, accesses=counts["commands"], cycles=counts["cycles"],
        latency_mean=counts["latency_sum"] / counts["commands"] if reads else 0.0,
        latency_max=counts["latency_max"], cmd_refused=counts["cmd_refused"],
        refreshes=counts["refreshes"], refresh_cycles=counts["refresh_cycles"],
        errors=counts["errors"], reads_max=counts["reads_max"],
        wdata_max=counts["wdata_max"])


def run_pattern(b: DramBuild, mode: str, count: int, stride: int, base: int = 0,
                read_base: int | None = None) -> tuple[dict, float]:
    """Run the driver once: ``mode`` ``"read"``, ``"write"`` (writes, then reads checked) or
    ``"rw"`` (``count`` write-then-read pairs, checked).

    Returns
    -------
    counts, seconds : dict, float
        The driver's JSON (``"read"``, ``"write"`` or ``"rw"``: :func:`_pattern`'s counts)
        and the wall time.
    """
    if mode not in ("read", "write", "rw"):
        raise ValueError(f"mode must be read, write or rw, not {mode!r}")
    args = [mode, str(count), str(stride), str(b.spec["address_width"]), str(base)]
    if read_base is not None:
        args.append(str(read_base))
    return _run(b, args)


def characterize(platform: PlatformConfig, *, reads: int = 100_000,
                 conflict_reads: int = 10_000, root: Path | None = None,
                 checker: bool = False, data_width: int | None = None) -> Figures:
    """Build (or find) the platform's simulator and measure its figures.

    Parameters
    ----------
    platform : PlatformConfig
        A DRAM platform.
    reads : int
        Reads of the sequential run (and writes of the write check): enough for a few hundred
        refreshes at the default.
    conflict_reads : int
        Reads of the row-conflict and bank-stride runs, and pairs of the read-after-write run.
    root : Path, optional
        The build cache root (:func:`sim.build.default_root` by default).
    checker : bool
        Build with LiteDRAM's DFI timing checker, and collect what it prints in
        ``violations`` (the simulation is slower; the figures are the same).
    data_width : int, optional
        The port's width in bits; the controller's by default (see
        :func:`sim.dram.generate.generate`: another width adds LiteDRAM's converter).
    """
    b = build(platform, root=root, checker=checker, data_width=data_width)
    layout = b.spec["address_layout"]
    row_stride, bank_stride = 1 << layout["row"][0], 1 << layout["bank"][0]
    idle, idle_seconds = run_pattern(b, "read", 1, 1)  # start-up: the DRAM array's allocation
    seq, seconds = run_pattern(b, "read", reads, 1)
    conflict, _ = run_pattern(b, "read", conflict_reads, row_stride)
    banks, _ = run_pattern(b, "read", conflict_reads, bank_stride)
    written, _ = run_pattern(b, "write", reads, 1)
    pairs, _ = run_pattern(b, "rw", conflict_reads, 1)
    return Figures(
        platform=platform, data_width=b.spec["data_width"], build_seconds=b.build_seconds,
        cached=b.cached,
        sequential=_pattern("sequential", 1, seq["read"]),
        row_conflict=_pattern("row_conflict", row_stride, conflict["read"]),
        bank_stride=_pattern("bank_stride", bank_stride, banks["read"]),
        write_check=_pattern("write_check", 1, written["write"]),
        read_back=_pattern("read_back", 1, written["read"]),
        read_after_write=_pattern("read_after_write", 1, pairs["rw"]),
        sim_cycles_per_second=((seq["total_cycles"] - idle["total_cycles"])
                               / max(seconds - idle_seconds, 1e-6)),
        startup_seconds=idle_seconds,
        checker=checker,
        violations=tuple(v for run in (idle, seq, conflict, banks, written, pairs)
                         for v in run["violations"]),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.dram.characterize``: print a platform's figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m sim.dram.characterize",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--memory", default="ddr3", help="sdr or ddr3 (default ddr3)")
    parser.add_argument("--module", default=None)
    parser.add_argument("--speedgrade", default=None)
    parser.add_argument("--clock-hz", type=int, default=100_000_000)
    parser.add_argument("--refresh", default="normal", help="normal or hot")
    parser.add_argument("--rate", default=None,
                        help="the PHY's clock ratio (default the memory's first: 1:1 for sdr, "
                             "1:4 for ddr3; 1:2 is the ECP5's DDR3 PHY)")
    parser.add_argument("--reads", type=int, default=100_000)
    parser.add_argument("--conflict-reads", type=int, default=10_000)
    parser.add_argument("--data-width", type=int, default=None,
                        help="port width in bits (default: the controller's)")
    parser.add_argument("--checker", action="store_true",
                        help="build with LiteDRAM's DFI timing checker; list its violations")
    args = parser.parse_args(argv)
    try:
        platform = PlatformConfig(memory=args.memory, module=args.module,
                                  speedgrade=args.speedgrade, clock_hz=args.clock_hz,
                                  refresh=args.refresh, rate=args.rate)
        if not platform.is_dram:
            raise ValueError("the ideal memory has nothing to characterize; "
                             "use --memory sdr or ddr3")
        check_data_width(args.data_width)
        if args.reads < 1 or args.conflict_reads < 1:
            raise ValueError("--reads and --conflict-reads must be at least 1")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    figures = characterize(platform, reads=args.reads, conflict_reads=args.conflict_reads,
                           checker=args.checker, data_width=args.data_width)
    print(json.dumps(figures.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
