"""``hwgen gemm``: one GEMM kernel on Verilator, checked bit for bit."""

from __future__ import annotations

import argparse
import json

from hwgen.gateware.folder import read_variant


def run(args: argparse.Namespace) -> int:
    from fusion.kernels.layout import GemmDims
    from fusion.kernels.tiling import default_tiling
    from sim.gemm_check import run_gemm

    config = read_variant(args.variant)
    stages = config.epilogue if args.epilogue is None else args.epilogue
    # Choices given on the command line are kept; the tiler fits the rest around them.
    tiling = default_tiling(GemmDims(config, args.m, args.k, args.n), tuple(stages),
                            tm=args.tm, tn=args.tn, kt=args.kt, order=args.loop_order,
                            double_buffer=False if args.no_double_buffer else None)
    report = run_gemm(config, args.m, args.k, args.n, stages=stages, fused=not args.unfused,
                      seed=args.seed, tiling=tiling)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(report.summary())
    return 0 if report.ok else 1
