"""The cocotb testbench: run a file of jobs on ``hwgen_tb_top``, one simulator launch for all.

For each job: hold reset; write one ``$readmemh`` file that zeroes what the previous job wrote,
fills the read regions with the poison byte and holds the memory segments, and pulse the top's
``load_mem`` (a VPI write per word cost more than the simulation for a model's kernels);
write the program through VPI; pulse ``start``, then ``await`` the rising edge of ``done``
under a watchdog and read the counters, and the read regions through ``$writememh``
(``dump_mem``). Python is never in the per-cycle loop: the clock is Verilog, and the only
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

from sim.tb import dram_image, jobfile

POISON = jobfile.POISON


class _Handles:
    """The simulator handles, looked up once per launch."""

    def __init__(self, dut: Any, header: dict[str, Any]):
        try:
            self.clk = dut.clk
            self.rst = dut.rst
            self.start = dut.start
            self.done = dut.done
            self.dram = header.get("memory", {}).get("kind") == "dram"
            self.layout = header.get("memory")
            if self.dram:
                self.dump_bank = dut.dump_bank
            else:
                self.ext_mem = dut.ext_mem
            self.load_mem, self.dump_mem = dut.load_mem, dut.dump_mem
            self.dump_lo, self.dump_hi = dut.dump_lo, dut.dump_hi
            self.imem = dut.accel.seq.imem
            self.counters = {n: getattr(dut, f"perf__{n}") for n in header["counters"]}
        except AttributeError as exc:
            # Only what rtl_templates/sim_top.vlt.j2 makes public is visible through VPI.
            raise RuntimeError(
                f"a testbench handle is missing ({exc}); the build's .vlt file makes public "
                f"hwgen_tb_top's rst, start, done, clk, perf__*, ext_mem (dump_bank on a "
                f"DRAM), load_mem, dump_mem, dump_lo, dump_hi and accel.seq.imem"
            ) from exc


def _hex_lines(data: np.ndarray, port_bytes: int) -> str:
    """Bytes -> ``$readmemh`` lines, one little-endian word a line (most significant first)."""
    rows = np.ascontiguousarray(np.frombuffer(data.tobytes(), np.uint8).reshape(
        -1, port_bytes)[:, ::-1])
    text = rows.tobytes().hex()
    width = 2 * port_bytes
    return "\n".join(text[i:i + width] for i in range(0, len(text), width))


async def _pulse(signal: Any) -> None:
    """A rising edge on ``signal`` (its always block runs), then back to 0."""
    signal.value = 1
    await Timer(1, "ps")
    signal.value = 0
    await Timer(1, "ps")


async def _load(h: _Handles, job: jobfile.JobSpec, port_bytes: int, previous_program: int,
                folder: Path) -> None:
    """Write memory and program; the design is in reset, so this takes no simulated cycle."""
    if h.dram:
        await _load_dram(h, job, port_bytes, folder)
        await _write_program(h, job, previous_program)
        return
    parts = []
    for addr, words in job.clear:
        parts.append(f"@{addr:x}\n" + _hex_lines(np.zeros(words * port_bytes, np.uint8),
                                                   port_bytes))
    for addr, size in job.reads.values():
        parts.append(f"@{addr:x}\n" + _hex_lines(np.full(size, POISON, np.uint8), port_bytes))
    for addr, data in job.writes:
        parts.append(f"@{addr:x}\n" + _hex_lines(data, port_bytes))
    if parts:
        (folder / jobfile.LOAD_HEX).write_text("\n".join(parts) + "\n")
        await _pulse(h.load_mem)
    await _write_program(h, job, previous_program)


async def _write_program(h: _Handles, job: jobfile.JobSpec, previous_program: int) -> None:
    program = [int(w) for w in job.program]
    # Zero the tail of the previous program so a stale word can never be fetched.
    for i, word in enumerate(program + [0] * max(0, previous_program - len(program))):
        h.imem[i].value = word


async def _load_dram(h: _Handles, job: jobfile.JobSpec, port_bytes: int,
                     folder: Path) -> None:
    """The same segments as :func:`_load`, scattered into one file per bank."""
    segments = [(addr, np.zeros(words * port_bytes, np.uint8)) for addr, words in job.clear]
    segments += [(addr, np.full(size, POISON, np.uint8)) for addr, size in job.reads.values()]
    segments += list(job.writes)
    if not segments:
        return
    for bank, text in enumerate(dram_image.bank_files(segments, port_bytes, h.layout)):
        (folder / f"{jobfile.LOAD_HEX}.b{bank}").write_text(text)
    await _pulse(h.load_mem)


async def _read_dram(h: _Handles, job: jobfile.JobSpec, port_bytes: int,
                     folder: Path) -> dict[str, np.ndarray]:
    outputs = {}
    cb = h.layout["controller_bytes"]
    for name, (addr, size) in job.reads.items():
        words = size // port_bytes
        dumps = {}
        for bank, (lo, hi) in dram_image.bank_ranges(addr, words, h.layout).items():
            h.dump_bank.value = bank
            h.dump_lo.value, h.dump_hi.value = lo, hi
            await _pulse(h.dump_mem)
            lines = [line for line in (folder / jobfile.DUMP_HEX).read_text().split()
                     if not line.startswith(("//", "@"))]
            if len(lines) != hi - lo + 1:
                raise RuntimeError(f"$writememh wrote {len(lines)} words of bank {bank} for "
                                   f"region {name!r}, not {hi - lo + 1}")
            raw = np.frombuffer(bytes.fromhex("".join(lines)), np.uint8).reshape(-1, cb)
            dumps[bank] = (lo, raw[:, ::-1])
        outputs[name] = dram_image.gather(addr, words, h.layout, dumps)
    return outputs


async def _read(h: _Handles, job: jobfile.JobSpec, port_bytes: int,
                folder: Path) -> dict[str, np.ndarray]:
    if h.dram:
        return await _read_dram(h, job, port_bytes, folder)
    outputs = {}
    for name, (addr, size) in job.reads.items():
        words = size // port_bytes
        h.dump_lo.value, h.dump_hi.value = addr, addr + words - 1
        await _pulse(h.dump_mem)
        lines = [line for line in (folder / jobfile.DUMP_HEX).read_text().split()
                 if not line.startswith(("//", "@"))]
        if len(lines) != words:
            raise RuntimeError(f"$writememh wrote {len(lines)} words of region {name!r}, not "
                               f"{words}")
        raw = bytes.fromhex("".join(lines))
        outputs[name] = np.ascontiguousarray(np.frombuffer(raw, np.uint8).reshape(
            words, port_bytes)[:, ::-1]).reshape(-1)
    return outputs


async def _run_job(
    h: _Handles, job: jobfile.JobSpec, header: dict[str, Any], previous_program: int,
    folder: Path
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    port_bytes = header["port_bytes"]
    h.start.value = 0
    h.rst.value = 1
    # Two edges in reset: the sync reset reaches the design and the memory model's pipe.
    await RisingEdge(h.clk)
    await RisingEdge(h.clk)
    began = time.perf_counter()
    await _load(h, job, port_bytes, previous_program, folder)
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
    return result, await _read(h, job, port_bytes, folder)


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
            result, job_outputs = await _run_job(h, job, header, previous_program, folder)
            results.append(result)
            outputs.append(job_outputs)
            previous_program = len(job.program)
    except Exception:  # reported to sim.run, which raises it in the caller's process
        error = traceback.format_exc()
    jobfile.write_results(folder, results, outputs, error)
