"""Run a file of jobs on a "cxx" build: its C++ driver (``rtl_templates/sim_driver.cpp``),
one process for all jobs, no VPI and no Python in the simulator.

The driver does what the cocotb testbench (:mod:`sim.tb.harness`) does: it clocks the top,
loads each job's memory image and host script through ``$readmemh`` files, waits for the
Verilog host to finish its script, and dumps the host's reads and the read regions through
``$writememh`` files. This module writes those inputs into the run folder before the launch
(the host scripts in job order, since each writes only the program words that differ from
the job before) and reads the outputs back after it, as :func:`sim.tb.jobfile.read_results`
returns them. cocotb costs a Python interpreter in the simulator, VPI callbacks and a second
of start-up per launch; the driver starts in milliseconds and runs the clock in C++.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hwgen.process import run_command
from sim.tb import hexfiles, host_script, jobfile

#: The job list the driver reads, and the results it writes, in the run folder.
JOBS_TXT, RESULTS_TXT = "jobs.txt", "results.txt"
#: The driver's exit status when the host was left waiting on the bus.
HUNG = 3


class DriverError(RuntimeError):
    """The driver failed or wrote results that do not read back; the message says which."""


def write_inputs(folder: Path, header: dict[str, Any], specs: list[jobfile.JobSpec]) -> None:
    """Write the job list, and each job's host script and memory file, into ``folder``."""
    port_bytes = header["port_bytes"]
    lines, imem = ["hwgen-jobs 1"], []
    for i, spec in enumerate(specs):
        script, imem = host_script.job_script(spec.program, imem, header["imem_depth"],
                                              spec.timeout_cycles)
        (folder / f"job{i}.host.hex").write_text(script)
        load = hexfiles.load_text(spec, port_bytes)
        if load:
            (folder / f"job{i}.load.hex").write_text(load)
        limit = host_script.hung_after(spec.timeout_cycles, script)
        lines.append(f"job {i} {int(bool(load))} {limit} {len(spec.reads)}")
        lines += [f"region {addr} {addr + size // port_bytes - 1}"
                  for addr, size in spec.reads.values()]
    (folder / JOBS_TXT).write_text("\n".join(lines) + "\n")


def command(executable: Path, folder: Path) -> list[str]:
    """The driver's command line (run in ``folder``)."""
    return [str(executable), f"+hwgen_load={folder / jobfile.LOAD_HEX}",
            f"+hwgen_dump={folder / jobfile.DUMP_HEX}",
            f"+hwgen_host={folder / jobfile.HOST_HEX}"]


def run(executable: Path, folder: Path, log: Path) -> int:
    """Launch the driver in ``folder``, its output going to ``log``; return its exit status
    (0, :data:`HUNG`, 2 for inputs it could not read, negative for a signal).

    Raises
    ------
    OSError
        If it cannot be started.
    """
    with open(log, "w") as out:
        # in a process group of its own, killed on Ctrl-C (hwgen.process)
        return run_command(command(executable, folder), cwd=folder, env=os.environ,
                           stdout=out)


def read_results(folder: Path, header: dict[str, Any], specs: list[jobfile.JobSpec]
                 ) -> tuple[list[dict[str, Any]], str | None]:
    """The driver's results as :func:`sim.tb.jobfile.read_results` returns the cocotb
    testbench's: per job run a dict (name, status, counters, wall and load seconds, timeout,
    outputs), and the error that ended the launch early, or None.

    Raises
    ------
    DriverError
        If the results file is missing, damaged or incomplete.
    """
    path = folder / RESULTS_TXT
    if not path.is_file():
        raise DriverError("the C++ driver wrote no results")
    port_bytes = header["port_bytes"]
    results: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields == ["end"]:
            if len(results) != len(specs):
                break
            return results, None
        if fields[:1] == ["hung"] and len(fields) == 3:
            return results, (f"the host did not finish its script within {fields[2]} cycles: "
                             f"the accelerator's bus stopped answering (job "
                             f"{specs[int(fields[1])].name!r})")
        if len(fields) != 5 or fields[0] != "job" or int(fields[1]) != len(results):
            break
        i, spec = len(results), specs[len(results)]
        reads = hexfiles.dumped_words((folder / f"job{i}.reads.hex").read_text())
        counters = host_script.counters_from_reads([int(word, 16) for word in reads])
        if fields[2] == "done" and not counters["cycles"]:
            return results, "the host saw the interrupt but the cycles counter reads 0"
        outputs = {
            name: hexfiles.region_bytes((folder / f"job{i}.r{k}.hex").read_text(),
                                        size // port_bytes, port_bytes, f"region {name!r}")
            for k, (name, (_, size)) in enumerate(spec.reads.items())
        }
        results.append({
            "name": spec.name, "status": fields[2], "counters": counters,
            "wall_seconds": float(fields[3]), "load_seconds": float(fields[4]),
            "timeout_cycles": spec.timeout_cycles, "outputs": outputs,
        })
    raise DriverError(f"the C++ driver's {RESULTS_TXT} is incomplete or damaged")
