"""``hwgen gemm``: one GEMM kernel on Verilator, checked bit for bit."""

from __future__ import annotations

import argparse
import json

from hwgen.cli.common import fraction, positive_int, seed, stage_list
from hwgen.gateware.folder import read_variant

HELP = "run one GEMM kernel on Verilator, checked bit for bit"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", required=True, help="a folder written by 'hwgen generate'")
    p.add_argument("--m", type=positive_int, required=True)
    p.add_argument("--k", type=positive_int, required=True)
    p.add_argument("--n", type=positive_int, required=True)
    p.add_argument("--epilogue", type=stage_list,
                   help="stages to apply (default: the variant's whole chain; 'none' for none)")
    p.add_argument("--unfused", action="store_true",
                   help="run the epilogue as separate memory-to-memory passes")
    p.add_argument("--seed", type=seed, default=0, help="seed of the random operands")
    p.add_argument("--tm", type=positive_int, help="array tiles per super tile along M")
    p.add_argument("--tn", type=positive_int, help="array tiles per super tile along N")
    p.add_argument("--kt", type=positive_int, help="K per MATMUL (K chunking)")
    p.add_argument("--loop-order", dest="loop_order", choices=("mn", "nm"))
    p.add_argument("--no-double-buffer", dest="no_double_buffer", action="store_true")
    p.add_argument("--stream", type=positive_int,
                   help="stream B in STREAM chunks a column block through a ring of as many "
                        "scratchpad slots (at least 2; M of one row block: a GEMV); it fixes "
                        "the tiling, so no --tm, --tn, --kt, --loop-order or "
                        "--no-double-buffer")
    p.add_argument("--kgroup", type=positive_int,
                   help="a grouped GEMM (a grouped or depthwise conv): column block j of the "
                        "array's columns reads only rows [j*KGROUP, (j+1)*KGROUP) of K; B is "
                        "drawn zero outside those blocks")
    p.add_argument("--kmajor-out", dest="kmajor_out", action="store_true",
                   help="store the output tiles transposed (K-major: the layout the next "
                        "GEMM's A operand is read in; int8 output, square arrays)")
    p.add_argument("--prune", type=fraction,
                   help="draw B with this share (0 to 1) of its weight blocks zero (K rows "
                        "by the array's columns) and run the block-sparse program that skips "
                        "them (docs/sparsity.md); fused only, no residual")
    p.add_argument("--zero-tiles", dest="zero_tiles", type=fraction,
                   help="draw A with a zero point and this share (0 to 1) of its tiles (a row "
                        "block by K rows) all that zero point, and run the zero-skipping "
                        "program that jumps over them at run time, storing the output's tile "
                        "flags too when requantized (docs/sparsity.md); needs the bias stage, "
                        "fused, no residual")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from fusion.kernels.layout import GemmDims
    from fusion.kernels.tiling import Tiling, default_tiling, resolve
    from hwgen.reference import check_stages
    from sim.build import build_folder
    from sim.gemm_check import (
        GemmCase,
        grouped_problem,
        pruned_problem,
        run_gemms,
        zero_tile_problem,
    )

    config = read_variant(args.variant)  # the Verilog checked against its descriptor
    stages = config.epilogue if args.epilogue is None else args.epilogue
    check_stages(stages, config.epilogue)  # a refusal quotes the variant's own chain
    kgroup = args.kgroup or 0
    dims = GemmDims(config, args.m, args.k, args.n, kgroup=kgroup)
    if args.prune is not None and (args.stream or kgroup):
        raise ValueError("--prune runs the block-sparse program: drop --stream and --kgroup")
    if args.zero_tiles is not None and (args.stream or kgroup or args.prune is not None):
        raise ValueError("--zero-tiles runs the zero-skipping program: drop --stream, "
                         "--kgroup and --prune")
    if args.stream:
        given = [f"--{n.replace('_', '-')}" for n in ("tm", "tn", "kt", "loop_order")
                 if getattr(args, n) is not None] + (
            ["--no-double-buffer"] if args.no_double_buffer else [])
        if given:
            raise ValueError(f"--stream fixes the tiling; drop {', '.join(given)}")
        per_channel = False  # hwgen gemm's requantize is per tensor
        tiling = resolve(dims, tuple(stages) if not args.unfused else (),
                         Tiling(stream=args.stream), per_channel=per_channel)
    else:
        # Choices given on the command line are kept; the tiler fits the rest around them.
        tiling = default_tiling(dims, tuple(stages), tm=args.tm, tn=args.tn, kt=args.kt,
                                order=args.loop_order,
                                double_buffer=False if args.no_double_buffer else None)
    problem = None if not kgroup else grouped_problem(config, args.m, args.k, args.n, kgroup,
                                                      tuple(stages), args.seed)
    if args.prune is not None:
        problem = pruned_problem(config, args.m, args.k, args.n, args.prune, tuple(stages),
                                 args.seed)
    if args.zero_tiles is not None:
        problem = zero_tile_problem(config, args.m, args.k, args.n, args.zero_tiles,
                                    tuple(stages), args.seed)
    case = GemmCase(M=args.m, K=args.k, N=args.n, stages=tuple(stages),
                    fused=not args.unfused, tiling=tiling, seed=args.seed, problem=problem,
                    kgroup=kgroup, kmajor_out=args.kmajor_out, sparse=args.prune is not None,
                    skip=args.zero_tiles is not None)
    case.kernel(config)  # any refusal before a simulator build of minutes
    # The simulator builds and runs the folder's own hwgen_accel.v, the file a user ships.
    (report,) = run_gemms(config, [case], build=build_folder(args.variant))
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(report.summary())
    return 0 if report.ok else 1
