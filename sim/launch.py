"""Launch a build's simulator on a run folder of jobs: its C++ driver (:mod:`sim.cxx_driver`)
or cocotb (:mod:`sim.tb.harness`), as the build says (:attr:`sim.build.BuildInfo.harness`).

A simulator that dies without writing results is rebuilt once (:func:`sim.build.rebuilt`,
with a one-line notice) and launched again; a second failure is a :class:`SimError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim import build as sim_build
from sim import cxx_driver
from sim.tb import jobfile

__all__ = ["SimError", "launch"]


class SimError(RuntimeError):
    """The simulator or the testbench failed; the message names the log."""


def _log_tail(log: Path, lines: int = 25) -> str:
    if not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


class _NoResults(SimError):
    """The simulator ended without writing results: it did not start, or it crashed."""

    def __init__(self, why: str, log: Path):
        self.why = why
        super().__init__(f"the simulator {why}; the log is {log}:\n{_log_tail(log)}")


def _cocotb(build: sim_build.BuildInfo, folder: Path, header: dict[str, Any],
            specs: list[jobfile.JobSpec]) -> tuple[list[dict[str, Any]], str | None]:
    from sim import runners  # cocotb: imported only for a cocotb build

    jobfile.write_jobs(folder, header, specs)
    log = folder / "sim.log"
    try:
        runners.SimRunner().test(
            test_module="sim.tb.harness",
            hdl_toplevel=sim_build.TOP,
            hdl_toplevel_lang="verilog",
            build_dir=build.obj_dir,
            test_dir=folder,
            plusargs=[f"+hwgen_load={folder / jobfile.LOAD_HEX}",
                      f"+hwgen_dump={folder / jobfile.DUMP_HEX}",
                      f"+hwgen_host={folder / jobfile.HOST_HEX}"],
            extra_env={
                jobfile.ENV_VAR: str(folder),
                # cocotb installs pytest's assertion rewriter for every module imported in the
                # simulator; numpy alone then takes 0.3 s to import. The harness has no asserts.
                "COCOTB_REWRITE_ASSERTION_FILES": "",
            },
            log_file=log,
        )
    except (SystemExit, RuntimeError, OSError) as exc:  # the runner exits on failure
        if not (folder / jobfile.RESULTS_JSON).exists():
            raise _NoResults(f"failed without writing results ({exc!r})", log) from None
        raise SimError(
            f"the simulator failed ({exc!r}); the log is {log}:\n{_log_tail(log)}"
        ) from None
    if not (folder / jobfile.RESULTS_JSON).exists():
        raise _NoResults("ended without writing results", log)
    return jobfile.read_results(folder)


def _cxx(build: sim_build.BuildInfo, folder: Path, header: dict[str, Any],
         specs: list[jobfile.JobSpec]) -> tuple[list[dict[str, Any]], str | None]:
    cxx_driver.write_inputs(folder, header, specs)
    log = folder / "sim.log"
    try:
        status = cxx_driver.run(build.executable, folder, log)
    except OSError as exc:
        raise _NoResults(f"failed without writing results ({exc})", log) from None
    if status == 2:  # it could not read what this module wrote: no rebuild mends that
        raise SimError(f"the C++ driver refused its inputs; the log is {log}:\n"
                       f"{_log_tail(log)}")
    if status not in (0, cxx_driver.HUNG):
        if not (folder / cxx_driver.RESULTS_TXT).exists():
            raise _NoResults(f"failed without writing results (exit status {status})", log)
        raise SimError(f"the simulator exited with status {status}; the log is {log}:\n"
                       f"{_log_tail(log)}")
    try:
        return cxx_driver.read_results(folder, header, specs)
    except (cxx_driver.DriverError, OSError, ValueError) as exc:
        raise SimError(f"{exc} (run folder {folder}); the log is {log}:\n"
                       f"{_log_tail(log)}") from None


def _once(build: sim_build.BuildInfo, folder: Path, header: dict[str, Any],
          specs: list[jobfile.JobSpec]) -> tuple[list[dict[str, Any]], str | None]:
    run = _cxx if build.harness == "cxx" else _cocotb
    return run(build, folder, header, specs)


def launch(build: sim_build.BuildInfo, folder: Path, header: dict[str, Any],
           specs: list[jobfile.JobSpec]) -> tuple[list[dict[str, Any]], str | None]:
    """Run ``specs`` on ``build`` in ``folder``; return the results as
    :func:`sim.tb.jobfile.read_results` does (per job run a dict; the error that ended the
    launch early, or None).

    Raises
    ------
    SimError
        If the simulator failed, or died without results again after a rebuild.
    sim.build.BuildError
        If the rebuild failed.
    """
    try:
        return _once(build, folder, header, specs)
    except _NoResults as exc:
        build = sim_build.rebuilt(build, f"its simulator {exc.why}")
        try:
            return _once(build, folder, header, specs)
        except _NoResults as again:
            raise SimError(f"the simulator of {build.directory} still fails after a rebuild: "
                           f"{again}") from None
