"""The files between :mod:`sim.run` and the testbench: JSON for structure, .npz for bytes.

Never pickle: the arrays are loaded with ``allow_pickle=False``. A run folder holds::

    jobs.json     header (port width, clock period, counter names) and one entry per job
    jobs.npz      each job's program (uint64) and memory segments (uint8)
    results.json  written by the testbench: per job its status, counters and wall time
    results.npz   the bytes read back, one uint8 array per job and read region

This module is imported inside the simulator as well, so it depends on numpy only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
#: Byte written over every read region before a job: a region the hardware never writes
#: reads back as 0xA5 bytes.
POISON = 0xA5
#: The environment variable naming the run folder for the testbench.
ENV_VAR = "HWGEN_SIM_RUN_DIR"
#: The files of the run folder through which the top's $readmemh and $writememh move a job's
#: memory and the host's script (passed to the simulator as +hwgen_load, +hwgen_dump and
#: +hwgen_host).
LOAD_HEX = "load.hex"
DUMP_HEX = "dump.hex"
HOST_HEX = "host.hex"
JOBS_JSON, JOBS_NPZ = "jobs.json", "jobs.npz"
RESULTS_JSON, RESULTS_NPZ = "results.json", "results.npz"


@dataclass
class JobSpec:
    """One job as the testbench sees it: addresses in words, lengths as the arrays say."""

    name: str
    program: np.ndarray  # uint64, one microcode word each
    writes: list[tuple[int, np.ndarray]]  # (word address, uint8 bytes)
    reads: dict[str, tuple[int, int]]  # name -> (word address, bytes)
    timeout_cycles: int
    #: Words a previous job of the same launch wrote, to zero first so jobs do not leak
    #: into each other: (word address, words).
    clear: list[tuple[int, int]] = field(default_factory=list)


def write_jobs(folder: Path, header: dict[str, Any], jobs: list[JobSpec]) -> None:
    """Write ``jobs.json`` and ``jobs.npz`` into ``folder``."""
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for i, job in enumerate(jobs):
        arrays[f"j{i}_program"] = np.asarray(job.program, dtype=np.uint64)
        writes = []
        for k, (addr, data) in enumerate(job.writes):
            arrays[f"j{i}_w{k}"] = np.asarray(data, dtype=np.uint8)
            writes.append([addr, f"j{i}_w{k}"])
        entries.append({
            "name": job.name,
            "program": f"j{i}_program",
            "writes": writes,
            "reads": {name: list(region) for name, region in job.reads.items()},
            "timeout_cycles": job.timeout_cycles,
            "clear": [list(region) for region in job.clear],
        })
    np.savez(Path(folder) / JOBS_NPZ, **arrays)
    (Path(folder) / JOBS_JSON).write_text(
        json.dumps({"format": FORMAT, **header, "jobs": entries}, indent=1)
    )


def read_jobs(folder: Path) -> tuple[dict[str, Any], list[JobSpec]]:
    """Read what :func:`write_jobs` wrote: the header and the jobs."""
    header = json.loads((Path(folder) / JOBS_JSON).read_text())
    if header.get("format") != FORMAT:
        raise ValueError(f"job file format {header.get('format')!r}, expected {FORMAT}")
    jobs = []
    with np.load(Path(folder) / JOBS_NPZ, allow_pickle=False) as arrays:
        for entry in header.pop("jobs"):
            jobs.append(JobSpec(
                name=entry["name"],
                program=arrays[entry["program"]],
                writes=[(addr, arrays[key]) for addr, key in entry["writes"]],
                reads={name: (addr, size) for name, (addr, size) in entry["reads"].items()},
                timeout_cycles=entry["timeout_cycles"],
                clear=[(addr, words) for addr, words in entry["clear"]],
            ))
    return header, jobs


def write_results(
    folder: Path, results: list[dict[str, Any]], outputs: list[dict[str, np.ndarray]],
    error: str | None,
) -> None:
    """Write the testbench's results: one dict and one ``{name: bytes}`` per job run."""
    arrays = {}
    for i, job_outputs in enumerate(outputs):
        for k, (name, data) in enumerate(job_outputs.items()):
            arrays[f"j{i}_r{k}"] = data
            results[i].setdefault("outputs", {})[name] = f"j{i}_r{k}"
    np.savez(Path(folder) / RESULTS_NPZ, **arrays)
    # Written last: its presence means the testbench finished writing.
    (Path(folder) / RESULTS_JSON).write_text(
        json.dumps({"format": FORMAT, "jobs": results, "error": error}, indent=1)
    )


def read_results(folder: Path) -> tuple[list[dict[str, Any]], str | None]:
    """Read the results: per job a dict whose ``outputs`` maps names to uint8 arrays."""
    data = json.loads((Path(folder) / RESULTS_JSON).read_text())
    jobs = data["jobs"]
    with np.load(Path(folder) / RESULTS_NPZ, allow_pickle=False) as arrays:
        for job in jobs:
            job["outputs"] = {name: arrays[key] for name, key in job.get("outputs", {}).items()}
    return jobs, data["error"]
