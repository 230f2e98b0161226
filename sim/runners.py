"""Verilator builds and cocotb launches through cocotb's runner, with our toolchain.

Kept apart from :mod:`sim.toolchain` so that a command that finds its build made and runs it
on the C++ driver never imports cocotb (0.1 s, pytest with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cocotb_tools import runner as cocotb_runner

from hwgen.process import run_command
from sim.runtime_cache import RuntimeObjects
from sim.toolchain import Verilator, tool_env


class GroupedCommands:
    """Runs cocotb's commands with :func:`run_command`: each in a process group of its own,
    killed with all its children when the caller is interrupted or fails.

    cocotb's runner uses ``subprocess.run``, which kills only the direct child (make) and
    leaves the compilers it started running.
    """

    env: dict[str, str]

    def _execute_cmds(self, cmds, cwd, stdout=None) -> None:
        for cmd in cmds:
            status = run_command(cmd, cwd=cwd, env=self.env, stdout=stdout)
            if status != 0:
                raise RuntimeError(f"Command failed with return code: {status}")


class SimRunner(GroupedCommands, cocotb_runner.Verilator):
    """cocotb's Verilator runner, for running a built simulation (:mod:`sim.run`)."""


class VerilatorBuilder(GroupedCommands, cocotb_runner.Verilator):
    """cocotb's Verilator runner without ``--public-flat-rw``, with our toolchain and extra
    make arguments, for building (:mod:`sim.build`).

    ``--public-flat-rw`` makes every signal public, which stops Verilator optimising them:
    an 8x8 array simulates 3-12x slower. The build's .vlt file makes public only what the
    testbench needs.
    """

    def __init__(self, tool: Verilator, make_args: Sequence[str] = ()):
        self._tool = tool
        self._make_args = list(make_args)
        super().__init__()

    def _simulator_in_path_build_only(self) -> None:
        self.executable = str(self._tool.executable)

    def _set_env_build(self) -> None:
        super()._set_env_build()
        self.env = tool_env(self._tool, self.env)

    def _build_command(self) -> list[list[str]]:
        verilate, make = super()._build_command()
        return [[arg for arg in verilate if arg != "--public-flat-rw"],
                [*make, *self._make_args]]

    def _execute_cmds(self, cmds, cwd, stdout=None) -> None:
        """Verilate, then make with Verilator's runtime objects from
        :mod:`sim.runtime_cache` (and store those make compiled)."""
        verilate, make = cmds
        super()._execute_cmds([verilate], cwd, stdout)
        runtime = RuntimeObjects.of(make, self.env)
        restored = runtime.restore(Path(self.build_dir)) if runtime else set()
        super()._execute_cmds([make], cwd, stdout)
        if runtime:
            runtime.save(Path(self.build_dir), restored)


class CxxDriverBuilder(VerilatorBuilder):
    """:class:`VerilatorBuilder` for a build the C++ driver runs: the driver's ``main``
    (``driver_cpp``) in place of cocotb's, and no VPI library (the driver touches only the
    top's ports)."""

    def __init__(self, tool: Verilator, driver_cpp: Path, make_args: Sequence[str] = ()):
        self._driver_cpp = str(driver_cpp)
        super().__init__(tool, make_args)

    def _build_command(self) -> list[list[str]]:
        verilate, make = super()._build_command()
        kept, skip = [], False
        for arg in verilate:
            if skip:  # the value of -LDFLAGS: cocotb's VPI library
                skip = False
            elif arg == "-LDFLAGS":
                skip = True
            elif arg == "--vpi":
                continue
            elif arg.endswith("verilator.cpp"):  # cocotb's main
                kept.append(self._driver_cpp)
            else:
                kept.append(arg)
        return [kept, make]
