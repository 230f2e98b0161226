"""How fast the simulation runs: the C++ driver (the limit) next to cocotb, same gateware.

:func:`measure` takes a variant, a program and a memory image from the caller (one long
job), builds the variant for both harnesses (:data:`sim.top.HARNESSES`) in an empty cache,
runs the job on each through :func:`sim.run.run_program`, and reports as JSON:

- each build's time, and the time of a cached ``build_variant`` call;
- per harness, simulated cycles per wall second (the ``cycles`` counter over the time from
  ``host_go`` to ``host_done``: the program load over the bus and the run, no file I/O) and
  the whole launch's wall time (process start, memory in and out);
- cocotb's rate over the driver's. The driver is the limit the issue asks for: a C++
  ``main`` that toggles the clock of the same ``-O3`` build of the accelerator, with no VPI,
  no ``--timing`` and no Python; it is also what :mod:`sim.run` launches on the ideal memory.

Command line::

    python -m bench.sim_speed --workload MODULE:FUNCTION [--verilog MODULE:FUNCTION]

``--workload`` names a function returning ``(config, program, memory)``; ``--verilog`` a
``config -> Verilog`` function replacing :func:`hwgen.gateware.emit.accelerator_verilog`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hwgen.config import VariantConfig
from sim import build as sim_build
from sim import run as sim_run


def _harness_run(config: VariantConfig, program: Sequence[int], memory: sim_run.MemoryImage,
                 root: Path, harness: str, verilog: sim_build.VerilogSource | None,
                 timeout: int) -> dict[str, Any]:
    first = sim_build.build_variant(config, verilog=verilog, root=root, harness=harness)
    cached = sim_build.build_variant(config, verilog=verilog, root=root, harness=harness)
    if not cached.cached:
        raise RuntimeError(f"the second build_variant call rebuilt {cached.directory}")
    began = time.perf_counter()
    result = sim_run.run_program(config, program, memory, name="sim_speed",
                                 timeout_cycles=timeout, build=first)
    launch = time.perf_counter() - began
    return {
        "build_seconds": round(first.build_seconds, 3),
        "cached_build_seconds": round(cached.load_seconds, 4),
        "cycles": result.cycles,
        "wall_seconds": round(result.wall_seconds, 4),
        "launch_seconds": round(launch, 3),
        "cycles_per_second": round(result.cycles / result.wall_seconds),
        "outputs": result.outputs,
    }


def measure(
    config: VariantConfig,
    program: Sequence[int],
    memory: sim_run.MemoryImage,
    *,
    verilog: sim_build.VerilogSource | None = None,
    timeout_cycles: int | None = None,
) -> dict[str, Any]:
    """Measure build times and simulation speed of one long job on both harnesses.

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
        JSON-ready: per harness its build times, cycles per second and launch time; whether
        both gave the same cycles and outputs; cocotb's rate over the driver's.
    """
    timeout = timeout_cycles or 10**9
    # Kept on failure, for its logs; the cache root in it starts empty, so the first builds
    # are real ones.
    scratch = Path(tempfile.mkdtemp(prefix="hwgen-bench-"))
    runs = {harness: _harness_run(config, program, memory, scratch / "cache", harness,
                                  verilog, timeout)
            for harness in ("cxx", "cocotb")}
    shutil.rmtree(scratch, ignore_errors=True)
    cxx, cocotb = runs["cxx"].pop("outputs"), runs["cocotb"].pop("outputs")
    same_outputs = cxx.keys() == cocotb.keys() and all(
        np.array_equal(cxx[name], cocotb[name]) for name in cxx)
    return {
        "variant": config.key(),
        "cxx_driver": runs["cxx"],
        "cocotb": runs["cocotb"],
        "same_cycles": runs["cxx"]["cycles"] == runs["cocotb"]["cycles"],
        "same_outputs": same_outputs,
        "cocotb_over_driver": round(runs["cocotb"]["cycles_per_second"]
                                    / runs["cxx"]["cycles_per_second"], 3),
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
