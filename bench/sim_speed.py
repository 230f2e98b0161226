"""How fast the cocotb simulation path runs, next to plain ``verilator --binary`` (the limit).

:func:`measure` takes a variant, a program and a memory image from the caller (one long
job), and reports as JSON:

- the first build time (into an empty cache) and the cached build time;
- simulated cycles per wall second through :func:`sim.run.run_program` (the ``cycles``
  counter over the job's wall time, program load over the bus included);
- the same for the same accelerator Verilog built with ``verilator --binary`` and a Verilog
  top that loads memory and host script with ``$readmemh`` and ``$finish``-es on done (the whole
  process is timed, so use a job of a second or more);
- the ratio of the two.

Command line::

    python -m bench.sim_speed --workload MODULE:FUNCTION [--verilog MODULE:FUNCTION]

``--workload`` names a function returning ``(config, program, memory)``; ``--verilog`` a
``config -> Verilog`` function replacing :func:`hwgen.gateware.emit.accelerator_verilog`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwgen.config import VariantConfig
from sim import build as sim_build
from sim import run as sim_run
from sim import toolchain
from sim.tb import host_script


def _hex_words(words: Sequence[tuple[int, int]], digits: int) -> str:
    """A $readmemh file: each run of consecutive addresses starts with an @address line."""
    lines, expected = [], None
    for addr, word in sorted(words):
        if addr != expected:
            lines.append(f"@{addr:x}")
        lines.append(f"{word:0{digits}x}")
        expected = addr + 1
    return "\n".join(lines) + "\n"


def _memory_words(config: VariantConfig, memory: sim_run.MemoryImage) -> list[tuple[int, int]]:
    """The words the testbench would write: poison over read regions, then the segments."""
    pb = config.port_bytes
    words = {}
    poison = int.from_bytes(bytes([sim_run.POISON]) * pb, "little")
    for addr, size in memory.reads.values():
        words.update((a, poison) for a in range(addr, addr + size // pb))
    for addr, data in memory.writes:
        for i in range(0, len(data), pb):
            words[addr + i // pb] = int.from_bytes(data[i:i + pb], "little")
    return sorted(words.items())


def _binary_run(
    config: VariantConfig, verilog_file: Path, program: Sequence[int],
    memory: sim_run.MemoryImage, folder: Path, timeout_cycles: int,
    repeats: tuple[int, int] = (1, 4),
) -> dict[str, Any]:
    tool = toolchain.check_toolchain()
    env = toolchain.tool_env(tool)
    top = folder / "bench_top.sv"
    top.write_text(sim_build.render_top(config, standalone=True))
    began = time.perf_counter()
    cmd = [
        # The same arguments as the cocotb build, so only the harness differs.
        str(tool.executable), "--binary", "-j", "0", *sim_build.VERILATOR_ARGS,
        *(arg for make_arg in sim_build.MAKE_ARGS for arg in ("-MAKEFLAGS", make_arg)),
        "-Wno-lint", "-Wno-style", "--timescale", "/".join(sim_build.TIMESCALE),
        "--top-module", sim_build.TOP, "-Mdir", str(folder / "obj"), "-o", "bench",
        str(verilog_file), str(top),
    ]
    with open(folder / "build.log", "w") as log:
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode:
        raise RuntimeError(f"verilator --binary failed; see {folder / 'build.log'}")
    build_seconds = time.perf_counter() - began

    mem_hex, host_hex = folder / "mem.hex", folder / "host.hex"
    mem_hex.write_text(_hex_words(_memory_words(config, memory), 2 * config.port_bytes))
    host_hex.write_text(host_script.job_script(program, [], config.imem_depth,
                                                timeout_cycles)[0])
    runs = {}
    for n in repeats:
        began = time.perf_counter()
        proc = subprocess.run(
            [str(folder / "obj" / "bench"), f"+mem={mem_hex}", f"+host={host_hex}",
             f"+repeat={n}"],
            capture_output=True, text=True, cwd=folder,
        )
        wall = time.perf_counter() - began
        match = re.search(r"HWGEN_(DONE|TIMEOUT) cycles=(\d+)", proc.stdout)
        if proc.returncode or match is None or match[1] != "DONE":
            raise RuntimeError(
                f"the verilator --binary run did not finish (exit {proc.returncode}):\n"
                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        runs[n] = (int(match[2]), wall)
    (n1, (c1, w1)), (n2, (c2, w2)) = sorted(runs.items())
    # The marginal rate between the two run counts: process start-up and $readmemh cancel.
    return {
        "build_seconds": round(build_seconds, 3),
        "cycles": c1 // n1,
        "runs": {str(n): {"cycles": c, "wall_seconds": round(w, 4)} for n, (c, w) in runs.items()},
        "cycles_per_second": round((c2 - c1) / (w2 - w1)),
    }


def measure(
    config: VariantConfig,
    program: Sequence[int],
    memory: sim_run.MemoryImage,
    *,
    verilog: sim_build.VerilogSource | None = None,
    timeout_cycles: int | None = None,
) -> dict[str, Any]:
    """Measure build times and simulation speed of one long job; return the report.

    Parameters
    ----------
    config : VariantConfig
        The variant.
    program : sequence of int
        The microcode; it should run for a second or more of wall time.
    memory : MemoryImage
        Its memory image.
    verilog : callable, optional
        ``config -> Verilog`` of ``hwgen_accel``; the real accelerator by default.
    timeout_cycles : int, optional
        Cycle limit of both runs; 10**9 by default (a benchmark job is expected to finish).

    Returns
    -------
    dict
        JSON-ready: build times, cycles per second of both paths and their ratio.
    """
    timeout = timeout_cycles or 10**9
    scratch = Path(tempfile.mkdtemp(prefix="hwgen-bench-"))
    # Kept on failure, for its logs; the cache root in it starts empty, so the first build
    # is a real one.
    first = sim_build.build_variant(config, verilog=verilog, root=scratch / "cache")
    cached = sim_build.build_variant(config, verilog=verilog, root=scratch / "cache")
    if not cached.cached:
        raise RuntimeError(f"the second build_variant call rebuilt {cached.directory}")
    began = time.perf_counter()
    result = sim_run.run_program(
        config, program, memory, name="sim_speed", timeout_cycles=timeout, build=first
    )
    launch = time.perf_counter() - began
    binary_dir = scratch / "binary"
    binary_dir.mkdir()
    binary = _binary_run(
        config, first.directory / "hwgen_accel.v", program, memory, binary_dir, timeout
    )
    shutil.rmtree(scratch, ignore_errors=True)
    cocotb_rate = result.cycles / result.wall_seconds
    return {
        "variant": config.key(),
        "verilator": first.verilator_version,
        "first_build_seconds": round(first.build_seconds, 3),
        "cached_build_seconds": round(cached.load_seconds, 4),
        "cocotb": {
            "cycles": result.cycles,
            "wall_seconds": round(result.wall_seconds, 4),
            "launch_seconds": round(launch, 3),
            "cycles_per_second": round(cocotb_rate),
        },
        "verilator_binary": binary,
        "same_cycles": binary["cycles"] == result.cycles,
        "binary_over_cocotb": round(binary["cycles_per_second"] / cocotb_rate, 2),
    }


def _load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"expected MODULE:FUNCTION, not {spec!r}")
    return getattr(importlib.import_module(module), name)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; prints the report as one JSON object."""
    parser = argparse.ArgumentParser(prog="python -m bench.sim_speed", description=__doc__)
    parser.add_argument("--workload", required=True,
                        help="MODULE:FUNCTION returning (config, program, memory)")
    parser.add_argument("--verilog", help="MODULE:FUNCTION config -> Verilog of hwgen_accel")
    args = parser.parse_args(argv)
    config, program, memory = _load(args.workload)()
    verilog = _load(args.verilog) if args.verilog else None
    print(json.dumps(measure(config, program, memory, verilog=verilog), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
