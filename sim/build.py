"""Build one variant's Verilator simulation once, and find it again without rebuilding.

A build lives in ``<root>/<config.key()>-<digest>/``, where the digest hashes the gateware
sources, the simulation templates and the Verilator arguments, so that any RTL change
rebuilds. A folder holding a finished build (its ``build.json`` is written last) is returned
without invoking Amaranth or Verilator. An ``fcntl`` lock keeps two processes (pytest-xdist
workers, calibration workers) from building the same variant at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import jinja2
from cocotb_tools import runner as cocotb_runner

import rtl_templates
from hwgen.config import VariantConfig
from hwgen.gateware import sources as hwgen_sources
from hwgen.perf import COUNTER_BITS, COUNTERS
from sim import toolchain

#: The Verilog top of every simulation build; the harness's ``dut``.
TOP = "hwgen_tb_top"
#: Verilog half period of the clock, in ns (the timescale is 1ns/1ps).
HALF_PERIOD_NS = 5
CLOCK_PERIOD_NS = 2 * HALF_PERIOD_NS

#: Arguments added to cocotb's Verilator command. The generated Verilog trips width
#: warnings (-Wno-fatal); the clock is a Verilog delay loop (--timing).
VERILATOR_ARGS = ("-Wno-fatal", "--timing")
#: Added to the make command. verilated.mk compiles the per-cycle ("fast") model code and
#: the runtime (the --timing scheduler, VPI callbacks) with -Os; -O3 simulates about 1.5x
#: faster. Not the one-off "slow" code (constructors, initialisation): -O3 there only costs
#: build time, minutes of it for a design with many public signals.
MAKE_ARGS = ("OPT_FAST=-O3", "OPT_GLOBAL=-O3")
TIMESCALE = ("1ns", "1ps")

#: Bumped when the layout of a build folder changes, so old builds are not reused.
BUILD_FORMAT = 1

_TEMPLATES = Path(rtl_templates.__file__).parent  # package data, wherever it is installed
SIM_TEMPLATES = ("sim_top.sv.j2", "sim_top.vlt.j2")
#: The gateware is everything in hwgen/ but the command line (DESIGN.md, "Who may import").

MARKER = "build.json"

VerilogSource = Callable[[VariantConfig], str]


class BuildError(RuntimeError):
    """Amaranth or Verilator failed; the message names the log."""


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
        Hash of the gateware sources, templates and build arguments.
    cached : bool
        True if this call found the build already done.
    build_seconds : float
        How long the build took when it was made.
    load_seconds : float
        How long this call took (the cost of a cache hit when ``cached``).
    verilator_version : str
        The Verilator that built it, e.g. ``"5.048"``.
    """

    config: VariantConfig
    directory: Path
    digest: str
    cached: bool
    build_seconds: float
    load_seconds: float
    verilator_version: str

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


def gateware_files() -> list[Path]:
    """The sources that make the accelerator's Verilog (:mod:`hwgen.gateware.sources`)."""
    return hwgen_sources.gateware_files()


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


def source_digest(
    verilog: VerilogSource | None = None, sources: Iterable[Path] | None = None
) -> str:
    """The gateware digest of a build folder's name (16 hex digits).

    Parameters
    ----------
    verilog : callable, optional
        The Verilog source function; :func:`hwgen.gateware.emit.accelerator_verilog` by default.
    sources : iterable of Path, optional
        Files whose content decides the Verilog. By default the ``hwgen/`` gateware files,
        plus the file defining ``verilog`` when it is not the default.
    """
    h = hashlib.sha256(f"format {BUILD_FORMAT}\n".encode())
    if verilog is None:
        h.update(b"hwgen.gateware.emit.accelerator_verilog\n")
        files = gateware_files() if sources is None else list(sources)
    else:
        h.update(f"{verilog.__module__}.{verilog.__qualname__}\n".encode())
        if sources is None:
            files = [Path(inspect.getsourcefile(verilog)), *gateware_files()]
        else:
            files = list(sources)
    files += [_TEMPLATES / name for name in SIM_TEMPLATES]
    for path in files:
        h.update(f"{path.name}\n".encode())
        h.update(Path(path).read_bytes())
    h.update(json.dumps([VERILATOR_ARGS, MAKE_ARGS, TIMESCALE, HALF_PERIOD_NS]).encode())
    return h.hexdigest()[:16]


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_top(config: VariantConfig, *, standalone: bool = False) -> str:
    """The Verilog of ``hwgen_tb_top`` for ``config``.

    Parameters
    ----------
    standalone : bool
        False for the cocotb build; True for a ``verilator --binary`` top that loads memory
        and program with ``$readmemh`` and ends with ``$finish`` on done.
    """
    return _environment().get_template("sim_top.sv.j2").render(
        key=config.key(),
        standalone=standalone,
        addr_bits=config.mem_addr_bits,
        port_bits=config.port_bits,
        mem_words=config.mem_words,
        latency=config.port_latency,
        ptr_bits=max(1, (config.port_latency - 1).bit_length()),
        half_period_ns=HALF_PERIOD_NS,
        counters=COUNTERS,
        counter_bits=COUNTER_BITS,
    )


def render_vlt(config: VariantConfig) -> str:
    """The Verilator control file making public only what the testbench touches."""
    return _environment().get_template("sim_top.vlt.j2").render(key=config.key())


def expected_ports(config: VariantConfig) -> set[str]:
    """The Verilog ports of ``hwgen_accel`` the simulation top connects."""
    mem = [f"mem__{path}" for path in (
        "rd_addr__valid", "rd_addr__ready", "rd_addr__payload", "rd_data__valid",
        "rd_data__payload", "wr__valid", "wr__ready", "wr__payload")]
    return {"clk", "rst", "start", "done", *mem, *(f"perf__{n}" for n in COUNTERS)}


def check_interface(text: str, config: VariantConfig) -> None:
    """Refuse Verilog that the simulation top cannot drive, before a long Verilator build.

    Raises
    ------
    BuildError
        Naming the missing module, ports, or instruction memory.
    """
    header = re.search(r"^module\s+hwgen_accel\s*\(([^)]*)\)", text, re.MULTILINE)
    if header is None:
        raise BuildError("the Verilog has no module hwgen_accel: convert the accelerator with "
                         "amaranth.back.verilog.convert(accel, name='hwgen_accel')")
    ports = {p.strip() for p in header[1].split(",")}
    missing = sorted(expected_ports(config) - ports)
    if missing:
        raise BuildError(f"module hwgen_accel lacks the port(s) {', '.join(missing)} that the "
                         f"simulation top connects (see hwgen/gateware/ports.py)")
    seq = re.search(r"^module\s+\\hwgen_accel\.seq\s.*?^endmodule", text, re.MULTILINE | re.DOTALL)
    if seq is None or not re.search(r"^\s*reg\s+\[63:0\]\s+imem\s*\[", seq[0], re.MULTILINE):
        raise BuildError("the Verilog has no 64-bit memory imem in submodule seq: the testbench "
                         "writes the program into accel.seq.imem (Amaranth submodule 'seq', "
                         "memory submodule 'imem')")


class _Verilator(cocotb_runner.Verilator):
    """cocotb's Verilator runner without ``--public-flat-rw`` and with our toolchain.

    ``--public-flat-rw`` makes every signal public, which stops Verilator optimising them:
    an 8x8 array simulates 3-12x slower. The .vlt file makes public only what the
    testbench needs.
    """

    def __init__(self, tool: toolchain.Verilator):
        self._tool = tool
        super().__init__()

    def _simulator_in_path_build_only(self) -> None:
        self.executable = str(self._tool.executable)

    def _set_env_build(self) -> None:
        super()._set_env_build()
        self.env = toolchain.tool_env(self._tool, self.env)

    def _build_command(self) -> list[list[str]]:
        verilate, make = super()._build_command()
        return [[arg for arg in verilate if arg != "--public-flat-rw"], [*make, *MAKE_ARGS]]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def _read_marker(directory: Path) -> dict | None:
    try:
        return json.loads((directory / MARKER).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _info(config, directory, digest, marker, cached, began) -> BuildInfo:
    return BuildInfo(
        config=config,
        directory=directory,
        digest=digest,
        cached=cached,
        build_seconds=marker["build_seconds"],
        load_seconds=time.perf_counter() - began,
        verilator_version=marker["verilator"],
    )


def _build(config: VariantConfig, directory: Path, digest: str, verilog: VerilogSource) -> dict:
    began = time.perf_counter()
    tool = toolchain.check_toolchain()
    if directory.exists():  # an interrupted build: start again
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    try:
        text = verilog(config)
    except Exception as exc:
        raise BuildError(f"generating the Verilog of variant {config.key()} failed: {exc}") from exc
    check_interface(text, config)
    (directory / "hwgen_accel.v").write_text(text)
    (directory / f"{TOP}.sv").write_text(render_top(config))
    (directory / f"{TOP}.vlt").write_text(render_vlt(config))
    log = directory / "build.log"
    # The control file first: file-scoped lint controls apply to files read after it.
    sources = [directory / f"{TOP}.vlt", directory / "hwgen_accel.v", directory / f"{TOP}.sv"]
    runner = _Verilator(tool)
    try:
        runner.build(
            sources=sources,
            hdl_toplevel=TOP,
            build_args=list(VERILATOR_ARGS),
            build_dir=directory / "obj",
            timescale=TIMESCALE,
            log_file=log,
        )
    except RuntimeError as exc:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
        raise BuildError(
            f"Verilator build of variant {config.key()} failed ({exc}); "
            f"the full log is {log}:\n{tail}"
        ) from None
    marker = {
        "format": BUILD_FORMAT,
        "key": config.key(),
        "config": config.to_dict(),
        "digest": digest,
        "verilator": tool.version_text,
        "build_seconds": time.perf_counter() - began,
    }
    # Written last, atomically: its presence means the build is whole.
    tmp = directory / f"{MARKER}.tmp"
    tmp.write_text(json.dumps(marker, indent=2) + "\n")
    tmp.replace(directory / MARKER)
    return marker


def build_variant(
    config: VariantConfig,
    *,
    verilog: VerilogSource | None = None,
    sources: Iterable[Path] | None = None,
    root: Path | None = None,
) -> BuildInfo:
    """Build the simulation of ``config``, or find the build already made.

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
    began = time.perf_counter()
    digest = source_digest(verilog, sources)
    root = default_root() if root is None else Path(root)
    name = f"{config.key()}-{digest}"
    directory = root / name
    if any(c.isspace() for c in str(directory.resolve())):
        # Verilator hands -Mdir to make unquoted: a space splits the path in two.
        raise BuildError(
            f"the build folder {str(directory)!r} has a space in its path, which Verilator's "
            f"make cannot handle; set HWGEN_BUILD_DIR to a path without spaces"
        )
    marker = _read_marker(directory)
    if marker is not None:
        return _info(config, directory, digest, marker, True, began)
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{name}.lock"):
        marker = _read_marker(directory)  # another process may have built it meanwhile
        if marker is not None:
            return _info(config, directory, digest, marker, True, began)
        marker = _build(config, directory, digest, verilog or _accelerator_verilog)
    return _info(config, directory, digest, marker, False, began)
