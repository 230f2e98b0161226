"""The cocotb testbench: run a file of jobs on ``hwgen_tb_top``, one simulator launch for all.

For each job: hold reset; write one ``$readmemh`` file that zeroes what the previous job wrote,
fills the read regions with the poison byte and holds the memory segments, and pulse the top's
``load_mem`` (a VPI write per word cost more than the simulation for a model's kernels; it
stands for the host's DMA); write the job's host script (:mod:`sim.tb.host_script`: the
program over the bus, start, a wait for the interrupt, the counters read back) and pulse
``load_host``; release reset and raise ``host_go``, then ``await`` the rising edge of
``host_done`` under a watchdog, and read the script's bus reads (``dump_host``) and the read
regions (``dump_mem``) through ``$writememh``. Python is never in the per-cycle loop: the
clock and the host are Verilog, and the only wake-ups are a handful of clock edges around
reset and start, then ``host_done`` or the timer. Only the handles of
:data:`sim.tb.host_script.TB_HANDLES` are visible: nothing reaches into the accelerator.

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

from sim.tb import dram_image, hexfiles, host_script, jobfile


class _Handles:
    """The simulator handles, looked up once per launch."""

    def __init__(self, dut: Any, header: dict[str, Any]):
        self.dram = header.get("memory", {}).get("kind") == "dram"
        self.layout = header.get("memory")
        self.imem_depth = header["imem_depth"]
        self.imem: list[int] = []  # what the host wrote into the instruction memory
        names = {**host_script.TB_HANDLES,
                 **host_script.MEMORY_HANDLES["dram" if self.dram else "ideal"]}
        try:
            for name in names:
                setattr(self, name, getattr(dut, name))
        except AttributeError as exc:
            # Only what rtl_templates/sim_top.vlt.j2 makes public is visible through VPI.
            raise RuntimeError(
                f"a testbench handle is missing ({exc}); the build's .vlt file makes public "
                f"hwgen_tb_top's {', '.join(sorted(names))}"
            ) from exc


async def _pulse(signal: Any) -> None:
    """A rising edge on ``signal`` (its always block runs), then back to 0."""
    signal.value = 1
    await Timer(1, "ps")
    signal.value = 0
    await Timer(1, "ps")


async def _load(h: _Handles, job: jobfile.JobSpec, port_bytes: int, folder: Path) -> str:
    """Write memory and host script; the design is in reset, so this takes no cycle.
    Returns the script."""
    script, h.imem = host_script.job_script(job.program, h.imem, h.imem_depth,
                                            job.timeout_cycles)
    (folder / jobfile.HOST_HEX).write_text(script)
    await _pulse(h.load_host)
    if h.dram:
        await _load_dram(h, job, port_bytes, folder)
        return script
    text = hexfiles.load_text(job, port_bytes)
    if text:
        (folder / jobfile.LOAD_HEX).write_text(text)
        await _pulse(h.load_mem)
    return script


def _dumped(folder: Path) -> list[str]:
    """The words of the last ``$writememh`` dump, one hex string each."""
    return hexfiles.dumped_words((folder / jobfile.DUMP_HEX).read_text())


async def _host_reads(h: _Handles, folder: Path) -> dict[str, int]:
    """The counters, from the words the host script read over the bus."""
    await _pulse(h.dump_host)
    return host_script.counters_from_reads([int(word, 16) for word in _dumped(folder)])


async def _load_dram(h: _Handles, job: jobfile.JobSpec, port_bytes: int,
                     folder: Path) -> None:
    """The same segments as :func:`_load`, scattered into one file per bank."""
    segments = hexfiles.segments(job, port_bytes)
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
            lines = _dumped(folder)
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
        h.dump_lo.value, h.dump_hi.value = addr, addr + size // port_bytes - 1
        await _pulse(h.dump_mem)
        outputs[name] = hexfiles.region_bytes((folder / jobfile.DUMP_HEX).read_text(),
                                              size // port_bytes, port_bytes,
                                              f"region {name!r}")
    return outputs


async def _run_job(
    h: _Handles, job: jobfile.JobSpec, header: dict[str, Any], folder: Path
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    port_bytes = header["port_bytes"]
    h.host_go.value = 0
    h.rst.value = 1
    # Two edges in reset: the sync reset reaches the design and the memory model's pipe.
    await RisingEdge(h.clk)
    await RisingEdge(h.clk)
    began = time.perf_counter()
    script = await _load(h, job, port_bytes, folder)
    load_seconds = time.perf_counter() - began
    # Drive on falling edges so the design samples stable values on the rising ones.
    await FallingEdge(h.clk)
    h.rst.value = 0
    await FallingEdge(h.clk)
    h.host_go.value = 1
    began = time.perf_counter()
    finished = RisingEdge(h.host_done)
    # The host's own watchdog ends the wait for the interrupt after the job's limit; this
    # timer only catches a host that hangs on the bus.
    limit = host_script.hung_after(job.timeout_cycles, script)
    fired = await First(finished, Timer(limit * header["clock_period_ns"], "ns"))
    if fired is not finished:
        raise RuntimeError(f"the host did not finish its script within {limit} cycles: the "
                           f"accelerator's bus stopped answering")
    status = "timeout" if h.host_timed_out.value else "done"
    wall = time.perf_counter() - began
    counters = await _host_reads(h, folder)
    if status == "done" and not counters["cycles"]:
        raise RuntimeError("the host saw the interrupt but the cycles counter reads 0")
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
        for job in jobs:
            result, job_outputs = await _run_job(h, job, header, folder)
            results.append(result)
            outputs.append(job_outputs)
    except Exception:  # reported to sim.run, which raises it in the caller's process
        error = traceback.format_exc()
    jobfile.write_results(folder, results, outputs, error)
