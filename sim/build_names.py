"""What names a simulation build: its Verilator arguments, the digest of what decides it, and
its folder's name (:mod:`sim.build` makes and finds the builds)."""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from hwgen.config import VariantConfig
from hwgen.gateware import sources as hwgen_sources
from hwgen.platform import PlatformConfig
from sim.marker import BUILD_FORMAT
from sim.memory import memory_digest
from sim.tb import host_script
from sim.top import HALF_PERIOD_NS, HARNESSES, SIM_TEMPLATES, TEMPLATES

VerilogSource = Callable[[VariantConfig], str]

#: Arguments added to cocotb's Verilator command. The generated Verilog trips width
#: warnings (-Wno-fatal); the clock is a Verilog delay loop (--timing).
VERILATOR_ARGS = ("-Wno-fatal", "--timing")
#: Added to the make command. verilated.mk compiles the per-cycle ("fast") model code and
#: the runtime (the --timing scheduler, VPI callbacks) with -Os; -O3 simulates about 1.5x
#: faster. Not the one-off "slow" code (constructors, initialisation): -O3 there only costs
#: build time, minutes of it for a design with many public signals.
MAKE_ARGS = ("OPT_FAST=-O3", "OPT_GLOBAL=-O3")
#: The Verilator arguments of a build the C++ driver runs: its clock is toggled from C++,
#: and its memory starts at zero without a randomizing call per word (the default reset made
#: one for each of an 8x8 variant's 16 M memory words: perf put that near 3% of a 0.7 s
#: launch, 20 ms).
CXX_VERILATOR_ARGS = ("-Wno-fatal", "--no-timing", "--x-initial", "0")
TIMESCALE = ("1ns", "1ps")


def gateware_files() -> list[Path]:
    """The sources that make the accelerator's Verilog (:mod:`hwgen.gateware.sources`)."""
    return hwgen_sources.gateware_files()


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
    # the top's templates, and the host's script format they are rendered with
    files += [TEMPLATES / name for name in SIM_TEMPLATES] + [Path(host_script.__file__)]
    for path in files:
        h.update(f"{path.name}\n".encode())
        h.update(Path(path).read_bytes())
    h.update(json.dumps([VERILATOR_ARGS, MAKE_ARGS, TIMESCALE, HALF_PERIOD_NS]).encode())
    return h.hexdigest()[:16]


def folder_digest(verilog_sha256: str) -> str:
    """The digest of a build of a given Verilog file (16 hex digits): its sha256, the
    simulation templates and the build arguments."""
    h = hashlib.sha256(f"format {BUILD_FORMAT}\nverilog file {verilog_sha256}\n".encode())
    for name in SIM_TEMPLATES:
        h.update(f"{name}\n".encode())
        h.update((TEMPLATES / name).read_bytes())
    h.update(json.dumps([VERILATOR_ARGS, MAKE_ARGS, TIMESCALE, HALF_PERIOD_NS]).encode())
    return h.hexdigest()[:16]


def build_digest(digest: str, platform: PlatformConfig | None = None,
                 harness: str = "cocotb") -> str:
    """A build digest extended by the platform's memory (unchanged for the ideal memory) and
    by the harness (unchanged for cocotb)."""
    extra = memory_digest(platform or PlatformConfig())
    if extra:
        digest = hashlib.sha256(f"{digest} {extra}".encode()).hexdigest()[:16]
    if harness == "cxx":
        args = json.dumps(CXX_VERILATOR_ARGS)
        digest = hashlib.sha256(f"{digest} cxx {args}".encode()).hexdigest()[:16]
    return digest


def folder_name(config: VariantConfig, platform: PlatformConfig, digest: str,
          harness: str = "cocotb") -> str:
    """A build folder's name: the variant's key, the platform's unless ideal, "cxx" for a
    build the C++ driver runs, the digest."""
    parts = [config.key()]
    if platform.is_dram:
        parts.append(platform.key())
    if harness == "cxx":
        parts.append("cxx")
    return "-".join([*parts, digest])


def harness_for(harness: str | None, platform: PlatformConfig) -> str:
    """The harness asked for, or the default: the C++ driver on the ideal memory, cocotb on
    a DRAM (whose LiteDRAM model the driver does not load)."""
    if harness is None:
        return "cocotb" if platform.is_dram else "cxx"
    if harness not in HARNESSES:
        raise ValueError(f"harness must be one of {', '.join(HARNESSES)}, not {harness!r}")
    if harness == "cxx" and platform.is_dram:
        raise ValueError(f"the C++ driver runs on the ideal memory only, not on "
                         f"{platform.key()}: use harness='cocotb'")
    return harness
