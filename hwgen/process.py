"""Running a tool to its end, and nothing of it after: the simulator's build (Verilator's make
and its compilers), yosys and nextpnr all run through :func:`run_command`.

Not gateware: :mod:`hwgen.gateware.sources` leaves this module out of the build digest.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence


def run_command(cmd: Sequence[str], *, cwd: str | os.PathLike, env: Mapping[str, str],
                stdout=None, timeout: float | None = None) -> int:
    """Run ``cmd`` to its end in a process group of its own, and return its exit status.

    Verilator's make starts a g++ per source file. ``subprocess.run`` (what cocotb's runner
    uses) kills only its direct child when interrupted, so a Ctrl-C or an exception used to
    leave compilers writing into a build folder that was being deleted. Here any exception
    while waiting (``KeyboardInterrupt`` included) kills the whole group before it propagates,
    and so does the normal end, for stragglers the command left behind.

    Parameters
    ----------
    cmd : sequence of str
        The program and its arguments.
    cwd, env
        Its working folder and complete environment.
    stdout : file, optional
        Where its output and errors go (both); inherited when None.
    timeout : float, optional
        Seconds to wait; past them the group is killed and ``subprocess.TimeoutExpired``
        raised.
    """
    stderr = None if stdout is None else subprocess.STDOUT
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=dict(env), stdout=stdout, stderr=stderr,
                            start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    finally:
        kill_group(proc.pid)
        proc.wait()


def kill_group(pgid: int) -> None:
    """Kill every process of group ``pgid`` (started by :func:`run_command`), if any is left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
