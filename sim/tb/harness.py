"""The cocotb testbench: run a file of jobs on ``hwgen_tb_top``, one simulator launch for all.

For each job: hold reset, zero what the previous job wrote, fill the read regions with the
poison byte, write the memory segments and the program through VPI, pulse ``start``, then
``await`` the rising edge of ``done`` under a watchdog and read the counters and the read
regions once. Python is never in the per-cycle loop: the clock is Verilog, and the only
wake-ups are a handful of clock edges around reset and start, then ``done`` or the timer.

The run folder is named by the environment variable :data:`sim.tb.jobfile.ENV_VAR`. The
test itself always passes: what happened (done, timeout, or an exception with its
traceback) is written to the results file for :mod:`sim.run` to judge.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer

from sim.tb import jobfile

POISON = jobfile.POISON


class _Handles:
    """The simulator handles, looked up once per launch."""

    def __init__(self, dut: Any, header: dict[str, Any]):
        try:
            self.clk = dut.clk
            self.rst = dut.rst
            self.start = dut.start
            self.done = dut.done
            self.ext_mem = dut.ext_mem
            self.imem = dut.accel.seq.imem
            self.counters = {n: getattr(dut, f"perf__{n}") for n in header["counters"]}
        except AttributeError as exc:
            # Only what rtl_templates/sim_top.vlt.j2 makes public is visible through VPI.
            raise RuntimeError(
                f"a testbench handle is missing ({exc}); the build's .vlt file makes public "
                f"hwgen_tb_top's rst, start, done, clk, perf__* and ext_mem, and "
                f"accel.seq.imem"
            ) from exc


def _words(data: np.ndarray, port_bytes: int) -> list[int]:
    """Bytes -> little-endian words."""
    raw = data.tobytes()
    return [int.from_bytes(raw[i:i + port_bytes], "little") for i in range(0, len(raw), port_bytes)]


def _load(h: _Handles, job: jobfile.JobSpec, port_bytes: int, previous_program: int) -> None:
    """Write memory and program; the design is in reset, so this takes no simulated time."""
    mem = h.ext_mem
    for addr, words in job.clear:
        for a in range(addr, addr + words):
            mem[a].value = 0
    poison = int.from_bytes(bytes([POISON]) * port_bytes, "little")
    for addr, size in job.reads.values():
        for a in range(addr, addr + size // port_bytes):
            mem[a].value = poison
    for addr, data in job.writes:
        for a, word in enumerate(_words(data, port_bytes), start=addr):
            mem[a].value = word
    program = [int(w) for w in job.program]
    # Zero the tail of the previous program so a stale word can never be fetched.
    for i, word in enumerate(program + [0] * max(0, previous_program - len(program))):
        h.imem[i].value = word


def _read(h: _Handles, job: jobfile.JobSpec, port_bytes: int) -> dict[str, np.ndarray]:
    outputs = {}
    for name, (addr, size) in job.reads.items():
        raw = b"".join(
            h.ext_mem[a].value.to_unsigned().to_bytes(port_bytes, "little")
            for a in range(addr, addr + size // port_bytes)
        )
        outputs[name] = np.frombuffer(raw, dtype=np.uint8).copy()
    return outputs


async def _run_job(
    h: _Handles, job: jobfile.JobSpec, header: dict[str, Any], previous_program: int
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    port_bytes = header["port_bytes"]
    h.start.value = 0
    h.rst.value = 1
    # Two edges in reset: the sync reset reaches the design and the memory model's pipe.
    await RisingEdge(h.clk)
    await RisingEdge(h.clk)
    began = time.perf_counter()
    _load(h, job, port_bytes, previous_program)
    load_seconds = time.perf_counter() - began
    # Drive on falling edges so the design samples stable values on the rising ones.
    await FallingEdge(h.clk)
    h.rst.value = 0
    await FallingEdge(h.clk)
    h.start.value = 1
    await FallingEdge(h.clk)
    h.start.value = 0
    began = time.perf_counter()
    status = "done"
    if not h.done.value:
        done = RisingEdge(h.done)
        fired = await First(done, Timer(job.timeout_cycles * header["clock_period_ns"], "ns"))
        if fired is not done:
            status = "timeout"
    wall = time.perf_counter() - began
    counters = {name: int(handle.value.to_unsigned()) for name, handle in h.counters.items()}
    result = {
        "name": job.name,
        "status": status,
        "counters": counters,
        "wall_seconds": wall,
        "load_seconds": load_seconds,
        "timeout_cycles": job.timeout_cycles,
    }
    return result, _read(h, job, port_bytes)


@cocotb.test()
async def run_jobs(dut: Any) -> None:
    """Run every job of the job file and write the results file."""
    folder = Path(os.environ[jobfile.ENV_VAR])
    results: list[dict[str, Any]] = []
    outputs: list[dict[str, np.ndarray]] = []
    error = None
    try:
        header, jobs = jobfile.read_jobs(folder)
        h = _Handles(dut, header)
        previous_program = 0
        for job in jobs:
            result, job_outputs = await _run_job(h, job, header, previous_program)
            results.append(result)
            outputs.append(job_outputs)
            previous_program = len(job.program)
    except Exception:  # reported to sim.run, which raises it in the caller's process
        error = traceback.format_exc()
    jobfile.write_results(folder, results, outputs, error)
