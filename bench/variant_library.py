"""A variant library's synthesis figures (issue 14, item 1): three variants on the ideal
platform, each synthesized with yosys for ECP5 and placed with nextpnr.

``python -m bench.variant_library [--jobs J] [--pnr-timeout S] [--no-pnr] [-o DIR]``:
builds (:func:`synth.library.build_library`, what ``hwgen variants build`` runs)

- ``8x8:bias,requant,relu,clamp,residual+window``: the whole chain and the window unit
  (depthwise convolutions and pools: DS-CNN's layers), port 8 bytes (= rows, as the unit
  needs);
- ``4x4:bias,requant,relu,clamp,residual+window``: the same, on a small array;
- ``8x8:bias,requant,relu,clamp,residual+port16``: no window unit, a 16-byte port (GEMV-bound
  layers such as the autoencoder's fully connected ones read twice the bytes a cycle).

and records for each its resources (LUT, FF, DSP, BRAM and the raw cells), the smallest ECP5
part, Fmax (or why there is none), the reconfiguration cost, and the seconds yosys and
nextpnr took. A second run reads the synthesis cache (``cached`` true, the seconds those of
the run that measured them). Writes ``build/bench_variant_library.json``.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.output import write_results
from hwgen.platform import PlatformConfig
from sim.build import default_root
from sim.toolchain import terminate_interrupts
from synth.cache import SynthesisCache
from synth.flow import DEFAULT_PNR_TIMEOUT
from synth.library import build_library, read_specs, summary_row

SPECS = ("8x8:bias,requant,relu,clamp,residual+window",
         "4x4:bias,requant,relu,clamp,residual+window",
         "8x8:bias,requant,relu,clamp,residual+port16")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.variant_library",
                                description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="build/variant_library",
                   help="the library folder (default build/variant_library)")
    p.add_argument("--jobs", type=int, default=1,
                   help="synthesis jobs at once (default 1: nextpnr is heavy)")
    p.add_argument("--pnr-timeout", type=float, default=DEFAULT_PNR_TIMEOUT)
    p.add_argument("--no-pnr", dest="pnr", action="store_false")
    args = p.parse_args(argv)
    executor = None
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        executor = ProcessPoolExecutor(max_workers=args.jobs)
    began = time.perf_counter()
    try:
        with terminate_interrupts():  # a SIGTERM kills the tools too
            library = build_library(args.output, read_specs(SPECS), PlatformConfig(),
                                    memory_files=lambda config: {},
                                    cache=SynthesisCache(default_root() / "synthesis"),
                                    pnr=args.pnr, pnr_timeout=args.pnr_timeout,
                                    executor=executor, progress=sys.stderr.isatty(),
                                    notice=lambda line: print(line, file=sys.stderr))
    finally:
        if executor is not None:
            executor.shutdown()
    variants = []
    for d in library["built"]:
        synthesis = d["synthesis"]
        row = {**summary_row(d), "cells": synthesis["cells"],
               "distributed_ram": (synthesis["resources"] or {}).get("DISTRIBUTED_RAM"),
               "part_reason": synthesis["part_reason"], "pnr": synthesis["pnr"],
               "seconds": synthesis["seconds"], "tools": synthesis["tools"],
               "cached": d["cached"], "capabilities": d["capabilities"],
               "reconfiguration": d["reconfiguration"]}
        variants.append(row)
        fmax = (f"{row['fmax_mhz']:.1f} MHz" if row["fmax_mhz"] is not None
                else f"none ({row['fmax_reason']})")
        nextpnr = synthesis["seconds"]["nextpnr"]
        figures = (f"no figures ({row['synthesis_error']})" if row["synthesis_error"] else
                   f"{row['LUT']} LUT, {row['FF']} FF, {row['DSP']} DSP, {row['BRAM']} BRAM; "
                   f"{row['part'] or 'no ECP5 part'}; Fmax {fmax}")
        print(f"{row['name']}: {figures}; yosys "
              f"{synthesis['seconds']['yosys']} s, nextpnr "
              f"{'-' if nextpnr is None else f'{nextpnr} s'}"
              f"{' (cached)' if d['cached'] else ''}")
    write_results("bench_variant_library.json",
                  {"specs": list(SPECS), "platform": library["platform"],
                   "library": args.output, "wall_seconds": round(time.perf_counter() - began, 1),
                   "variants": variants})
    return 0


if __name__ == "__main__":
    sys.exit(main())
