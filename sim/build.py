"""Build a variant's Verilator simulation once, find it again without rebuilding, and heal
a build that is broken.

A build lives in ``<root>/<config.key()>-<digest>/``. For :func:`build_variant` the digest
hashes the gateware sources, the simulation templates and the Verilator arguments, so that
any RTL change rebuilds; for :func:`build_folder` (a variant folder's own ``hwgen_accel.v``) it
hashes the Verilog's sha256 instead, and a default build whose recorded Verilog has the same
sha256 is reused. Every build folder carries ``build.json``: the variant key and config, the
digest, the sha256 of the Verilog it built, the tool versions, and the simulator binary's size
and sha256. A build whose marker is missing, unreadable or does not match, or whose binary is
not the one built, is rebuilt once with a one-line notice on stderr (:func:`rebuilt` does the
same for a simulator that fails to start); a failing rebuild is a :class:`BuildError`.

A build is made in a temporary folder beside its final one (``<name>.tmp-*``) and renamed into
place, so an interrupted build never leaves a half folder that a later call would use or trip
over; the next build removes such leftovers. Verilator and make run in a process group of
their own that is killed, with every compiler it started, when the build is interrupted
(Ctrl-C, SIGTERM) or fails. An ``fcntl`` lock keeps two processes (pytest-xdist workers,
calibration workers) from building the same folder at once. A cache hit invokes neither
Amaranth nor Verilator.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hwgen.atomic import replacing
from hwgen.config import VariantConfig
from hwgen.gateware import folder as variant_folder
from hwgen.platform import PlatformConfig
from sim import toolchain
from sim.build_names import (
    CXX_VERILATOR_ARGS,
    MAKE_ARGS,
    TIMESCALE,
    VERILATOR_ARGS,
    VerilogSource,
    build_digest,
    folder_digest,
    folder_name,
    gateware_files,
    harness_for,
    source_digest,
)
from sim.marker import BUILD_FORMAT, MARKER, marker_problem, write_marker
from sim.memory import board_memory
from sim.top import (
    CLOCK_PERIOD_NS,
    DRIVER_CPP,
    HALF_PERIOD_NS,
    TEMPLATES,
    TOP,
    BuildError,
    check_interface,
    expected_ports,
    public_handles,
    render_top,
    render_vlt,
)

__all__ = [
    "BUILD_FORMAT", "CLOCK_PERIOD_NS", "HALF_PERIOD_NS", "MAKE_ARGS", "MARKER", "TIMESCALE",
    "TOP", "VERILATOR_ARGS", "BuildError", "BuildInfo", "VerilogSource", "build_digest",
    "build_folder", "build_variant", "folder_name", "check_interface", "default_root",
    "expected_ports",
    "folder_digest", "gateware_files", "public_handles", "rebuilt", "render_top",
    "render_vlt",
    "source_digest", "verified",
]

#: The ideal memory: what a build has unless given a platform.
IDEAL = PlatformConfig()


@dataclass(frozen=True)
class BuildInfo:
    """A finished simulation build of one variant.

    Attributes
    ----------
    config : VariantConfig
        The variant.
    directory : Path
        The build folder; the simulator is ``directory / "obj" / TOP``.
    digest : str
        Hash of what decides the build (see :func:`source_digest`, :func:`folder_digest`).
    cached : bool
        True if this call found the build already done.
    build_seconds : float
        How long the build took when it was made.
    load_seconds : float
        How long this call took (the cost of a cache hit when ``cached``).
    verilator_version : str
        The Verilator that built it, e.g. ``"5.048"``.
    verilog_sha256 : str
        The sha256 of the Verilog it was built from.
    executable_sha256 : str
        The sha256 of the simulator binary when it was built.
    platform : PlatformConfig
        The memory system behind the accelerator (the ideal memory by default).
    harness : {"cxx", "cocotb"}
        What runs the simulator: the C++ driver (:mod:`sim.cxx_driver`) or cocotb
        (:mod:`sim.tb.harness`).
    memory : dict
        What the testbench needs of that memory (its bank layout on a DRAM).
    source : callable, optional
        Gives the Verilog again, for :func:`rebuilt`; None for a build made elsewhere.
    """

    config: VariantConfig
    directory: Path
    digest: str
    cached: bool
    build_seconds: float
    load_seconds: float
    verilator_version: str
    verilog_sha256: str = ""
    executable_sha256: str = ""
    platform: PlatformConfig = field(default_factory=PlatformConfig)
    #: What the testbench needs of the memory (recorded in the marker when built).
    memory: dict = field(default_factory=lambda: {"kind": "ideal"})
    source: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    #: What runs the simulator (:data:`sim.top.HARNESSES`): the C++ driver or cocotb.
    harness: str = "cocotb"

    @property
    def obj_dir(self) -> Path:
        """Verilator's output folder: cocotb's ``build_dir``."""
        return self.directory / "obj"

    @property
    def executable(self) -> Path:
        """The simulator binary."""
        return self.obj_dir / TOP


def default_root() -> Path:
    """The cache root: ``$HWGEN_BUILD_DIR`` if set, else ``build/sim`` in the working directory
    (never inside the installed package)."""
    env = os.environ.get("HWGEN_BUILD_DIR")
    return Path(env).resolve() if env else Path.cwd() / "build" / "sim"


def _accelerator_verilog(config: VariantConfig) -> str:
    # Imported late: a cached build must not pay for importing the gateware.
    try:
        from hwgen.gateware.emit import accelerator_verilog
    except ImportError as exc:
        raise BuildError(
            f"the accelerator gateware is not available ({exc}): hwgen.gateware.emit."
            f"accelerator_verilog is needed to build a simulation"
        ) from exc
    return accelerator_verilog(config)


# -- the marker ----------------------------------------------------------------------------


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on the file ``path`` (created if missing) within:
    one process at a time builds a given folder (also :mod:`sim.dram.build`)."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def _info(config, directory, digest, marker, cached, began, source, platform,
          harness) -> BuildInfo:
    return BuildInfo(
        harness=harness,
        platform=platform,
        memory=marker["memory"],
        config=config,
        directory=directory,
        digest=digest,
        cached=cached,
        build_seconds=marker["build_seconds"],
        load_seconds=time.perf_counter() - began,
        verilator_version=marker["verilator"],
        verilog_sha256=marker["verilog_sha256"],
        executable_sha256=marker["executable"]["sha256"],
        source=source,
    )


# -- making a build ------------------------------------------------------------------------


def _make(config: VariantConfig, work: Path, digest: str, source: Callable[[], str],
          keep_log: Path, platform: PlatformConfig, harness: str) -> dict:
    """Build into the empty folder ``work``; return its marker (written last)."""
    began = time.perf_counter()
    tool = toolchain.check_toolchain()
    memory = board_memory(config, platform)  # refuses a variant the platform cannot hold
    text = source()
    check_interface(text, config)
    verilog = text.encode()
    (work / "hwgen_accel.v").write_bytes(verilog)
    for name, body in memory.files.items():
        (work / name).write_text(body)
    (work / f"{TOP}.sv").write_text(
        render_top(config, dram=memory.template_context(), harness=harness))
    (work / f"{TOP}.vlt").write_text(render_vlt(config, dram=platform.is_dram,
                                                harness=harness))
    log = work / "build.log"
    # The control file first: file-scoped lint controls apply to files read after it.
    sources = [work / f"{TOP}.vlt", work / "hwgen_accel.v",
               *(work / name for name in memory.files), work / f"{TOP}.sv"]
    from sim import runners  # cocotb's runner: not imported for a build found made

    try:
        if harness == "cxx":
            builder = runners.CxxDriverBuilder(tool, TEMPLATES / DRIVER_CPP, MAKE_ARGS)
        else:
            builder = runners.VerilatorBuilder(tool, MAKE_ARGS)
        builder.build(
            sources=sources, hdl_toplevel=TOP,
            build_args=list(CXX_VERILATOR_ARGS if harness == "cxx" else VERILATOR_ARGS),
            build_dir=work / "obj", timescale=TIMESCALE, log_file=log)
    except RuntimeError as exc:
        failure = f"failed ({exc})"
    else:
        failure = None if (work / "obj" / TOP).is_file() else f"made no simulator obj/{TOP}"
    if failure is not None:
        tail = ""
        if log.exists():
            shutil.copyfile(log, keep_log)  # the build folder goes; its log stays
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise BuildError(f"Verilator build of variant {config.key()} {failure}; the full "
                         f"log is {keep_log}:\n{tail}")
    return write_marker(work, config, digest, verilog, tool, time.perf_counter() - began,
                        memory.testbench_header())


def _build(config: VariantConfig, directory: Path, digest: str,
           source: Callable[[], str], platform: PlatformConfig, harness: str) -> dict:
    """Build in a temporary folder and swap it in over ``directory`` (:mod:`hwgen.atomic`;
    a killed build's temporary folder is removed by the next)."""
    root = directory.parent
    with replacing(directory) as work, toolchain.terminate_interrupts():
        marker = _make(config, work, digest, source, root / f"{directory.name}.failed.log",
                       platform, harness)
    with contextlib.suppress(FileNotFoundError):
        (root / f"{directory.name}.failed.log").unlink()
    return marker


def _ensure(config: VariantConfig, directory: Path, digest: str, source: Callable[[], str],
            *, verilog_sha: str | None = None, failed: tuple[str, str] | None = None,
            missing: str | None = None,
            platform: PlatformConfig = IDEAL, harness: str = "cocotb") -> BuildInfo:
    """The build in ``directory``: found whole, or (re)built under the lock.

    ``failed`` is ``(binary sha256, why)`` of a build whose simulator would not start: it is
    rebuilt unless another process already did. ``missing`` is the notice to give when the
    folder is gone (for a build that existed).
    """
    began = time.perf_counter()
    if any(c.isspace() for c in str(directory.resolve())):
        # Verilator hands -Mdir to make unquoted: a space splits the path in two.
        raise BuildError(
            f"the build folder {str(directory)!r} has a space in its path, which Verilator's "
            f"make cannot handle; set HWGEN_BUILD_DIR to a path without spaces"
        )
    if failed is None:
        marker, _ = marker_problem(directory, config, digest, verilog_sha)
        if marker is not None:
            return _info(config, directory, digest, marker, True, began, source, platform,
                         harness)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with locked(directory.parent / f"{directory.name}.lock"):
        # Another process may have built (or rebuilt) it meanwhile.
        marker, why = marker_problem(directory, config, digest, verilog_sha)
        if marker is not None:
            if failed is None or marker["executable"]["sha256"] != failed[0]:
                return _info(config, directory, digest, marker, True, began, source, platform,
                         harness)
            why = failed[1]
        why = why or missing
        if why is not None:
            print(f"hwgen: rebuilding the simulation of variant {config.key()} in {directory}: "
                  f"{why}", file=sys.stderr, flush=True)
        marker = _build(config, directory, digest, source, platform, harness)
    return _info(config, directory, digest, marker, False, began, source, platform,
                         harness)


def _generated(verilog: VerilogSource, config: VariantConfig) -> str:
    try:
        return verilog(config)
    except Exception as exc:
        raise BuildError(f"generating the Verilog of variant {config.key()} failed: {exc}") from exc


# -- the API -------------------------------------------------------------------------------


def build_variant(
    config: VariantConfig,
    *,
    verilog: VerilogSource | None = None,
    sources: Iterable[Path] | None = None,
    root: Path | None = None,
    platform: PlatformConfig | None = None,
    harness: str | None = None,
) -> BuildInfo:
    """Build the simulation of ``config``, or find the build already made (healing it).

    Parameters
    ----------
    config : VariantConfig
        The variant to simulate.
    verilog : callable, optional
        ``config -> Verilog text`` of module ``hwgen_accel``;
        :func:`hwgen.gateware.emit.accelerator_verilog` by default. Tests pass a small design here.
    sources : iterable of Path, optional
        Files whose content decides the Verilog (see :func:`source_digest`).
    root : Path, optional
        The cache root; :func:`default_root` by default.
    platform : PlatformConfig, optional
        The memory behind the accelerator; the ideal memory by default. A DRAM platform adds
        LiteDRAM's controller and model (:mod:`sim.memory`) to the build.
    harness : {"cxx", "cocotb"}, optional
        What will run it (:data:`sim.top.HARNESSES`): by default the C++ driver on the ideal
        memory (no VPI; the jobs of :mod:`sim.run` run fastest there) and cocotb on a DRAM.

    Returns
    -------
    BuildInfo
        With ``cached`` True when no build was needed.

    Raises
    ------
    sim.toolchain.ToolchainError
        If Verilator, g++, make or perl is missing or too old.
    BuildError
        If generating the Verilog or building it failed.
    """
    platform = PlatformConfig() if platform is None else platform
    harness = harness_for(harness, platform)
    digest = build_digest(source_digest(verilog, sources), platform, harness)
    root = default_root() if root is None else Path(root)
    source = functools.partial(_generated, verilog or _accelerator_verilog, config)
    return _ensure(config, root / folder_name(config, platform, digest, harness), digest, source,
                   platform=platform, harness=harness)


def _folder_verilog(variant: variant_folder.VariantFolder) -> str:
    return variant.verilog_text()


def build_folder(path: str | os.PathLike, *, root: Path | None = None,
                 platform: PlatformConfig | None = None,
                 harness: str | None = None) -> BuildInfo:
    """Build the simulation of a variant folder's own ``hwgen_accel.v``, after checking it
    against its descriptor (:func:`hwgen.gateware.folder.open_variant`).

    The default build of the same variant (:func:`build_variant`) is used when its recorded
    Verilog sha256 is the folder's; when there is none yet and this hwgen's gateware makes
    exactly the folder's Verilog, the default build is made from the folder. Otherwise the
    folder's Verilog gets a build of its own, keyed by its sha256 (:func:`folder_digest`).
    ``harness`` is as for :func:`build_variant`.

    Raises
    ------
    ValueError
        If the folder is not a valid variant folder or its Verilog is not the recorded file.
    sim.toolchain.ToolchainError, BuildError
        As :func:`build_variant`.
    """
    variant = variant_folder.open_variant(path)
    config, sha = variant.config, variant.verilog_sha256
    platform = variant.platform if platform is None else platform
    harness = harness_for(harness, platform)
    root = default_root() if root is None else Path(root)
    source = functools.partial(_folder_verilog, variant)
    digest = build_digest(source_digest(), platform, harness)
    default = root / folder_name(config, platform, digest, harness)
    marker, _ = marker_problem(default, config, digest)
    if marker is not None and marker["verilog_sha256"] == sha:
        return _ensure(config, default, digest, source, verilog_sha=sha, platform=platform,
                       harness=harness)
    if marker is None:
        made = hashlib.sha256(_accelerator_verilog(config).encode()).hexdigest()
        if made == sha:  # verified, not assumed: the default build will hold these bytes
            return _ensure(config, default, digest, source, verilog_sha=sha,
                           platform=platform, harness=harness)
    digest = build_digest(folder_digest(sha), platform, harness)
    return _ensure(config, root / folder_name(config, platform, digest, harness), digest, source,
                   verilog_sha=sha, platform=platform, harness=harness)


def verified(build: BuildInfo) -> BuildInfo:
    """``build``, checked again against its marker and binary; rebuilt once (with a notice)
    if its folder was damaged or removed since.

    Raises
    ------
    BuildError
        If it needs a rebuild and has no ``source`` to rebuild from, or the rebuild failed.
    """
    if build.source is None:
        marker, why = marker_problem(build.directory, build.config, build.digest,
                                      build.verilog_sha256 or None)
        if marker is None:
            raise BuildError(f"the simulation build {build.directory} cannot be used "
                             f"({why or 'it is gone'}), and this BuildInfo cannot remake it")
        return build
    return _ensure(build.config, build.directory, build.digest, build.source,
                   verilog_sha=build.verilog_sha256 or None, missing="its folder was removed",
                   platform=build.platform, harness=build.harness)


def rebuilt(build: BuildInfo, why: str) -> BuildInfo:
    """Rebuild ``build`` (once, with a notice naming ``why``): its simulator failed to start.

    If another process has rebuilt it meanwhile, that build is returned instead.

    Raises
    ------
    BuildError
        If ``build`` has no ``source`` to rebuild from, or the rebuild failed.
    """
    if build.source is None:
        raise BuildError(f"the simulator of {build.directory} failed to start ({why}), and "
                         f"this BuildInfo cannot remake it")
    return _ensure(build.config, build.directory, build.digest, build.source,
                   verilog_sha=build.verilog_sha256 or None,
                   failed=(build.executable_sha256, why), platform=build.platform,
                   harness=build.harness)
