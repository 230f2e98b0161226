"""The ``hwgen`` command line: the one place where arguments become calls.

User errors (a bad config, a missing descriptor, a shape that cannot fit, a missing
toolchain) print one ``hwgen: error: ...`` line that names the problem and the fix, and exit
with status 2; a result that does not match the reference exits with status 1.
"""

from __future__ import annotations

import argparse
import sys

from hwgen.cli import compile, doctor, gemm, generate, inspect, run
from hwgen.cli.common import input_shape, stage_list
from hwgen.config import EPILOGUE_STAGES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hwgen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("doctor", help="check Python, Amaranth, cocotb and Verilator")
    p.set_defaults(func=doctor.run)

    p = sub.add_parser("generate", help="generate a variant: Verilog, descriptor, ISA doc")
    p.add_argument("--config", help="a JSON file of VariantConfig fields (or a descriptor)")
    p.add_argument("--rows", type=int)
    p.add_argument("--cols", type=int)
    p.add_argument("--epilogue", type=stage_list,
                   help=f"comma-separated stages in order, from {','.join(EPILOGUE_STAGES)}")
    p.add_argument("--port-bytes", dest="port_bytes", type=int)
    p.add_argument("--port-latency", dest="port_latency", type=int)
    p.add_argument("--spad-a-depth", dest="spad_a_depth", type=int)
    p.add_argument("--spad-b-depth", dest="spad_b_depth", type=int)
    p.add_argument("--spad-e-depth", dest="spad_e_depth", type=int)
    p.add_argument("--imem-depth", dest="imem_depth", type=int)
    p.add_argument("--mem-addr-bits", dest="mem_addr_bits", type=int)
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.set_defaults(func=generate.run)

    p = sub.add_parser("gemm", help="run one GEMM kernel on Verilator, checked bit for bit")
    p.add_argument("--variant", required=True, help="a folder written by 'hwgen generate'")
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--epilogue", type=stage_list,
                   help="stages to apply (default: the variant's whole chain; 'none' for none)")
    p.add_argument("--unfused", action="store_true",
                   help="run the epilogue as separate memory-to-memory passes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tm", type=int, help="array tiles per super tile along M")
    p.add_argument("--tn", type=int, help="array tiles per super tile along N")
    p.add_argument("--kt", type=int, help="K per MATMUL (K chunking)")
    p.add_argument("--loop-order", dest="loop_order", choices=("mn", "nm"))
    p.add_argument("--no-double-buffer", dest="no_double_buffer", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=gemm.run)

    p = sub.add_parser("inspect", help="print a model's graph after the passes: ops, shapes, "
                                       "quantization per tensor")
    p.add_argument("model", help="an ONNX model (.onnx) or an hwgen JSON graph (.json)")
    p.add_argument("--input-shape", dest="input_shape", type=input_shape, action="append",
                   metavar="NAME=D0,D1,...",
                   help="static shape of an ONNX input with dynamic dimensions (repeatable)")
    p.add_argument("--no-legalize", dest="no_legalize", action="store_true",
                   help="stop after Q/DQ folding (leave convolutions as qconv2d)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=inspect.run)

    for name, text in (("compile", "compile a model for a variant: kernels, microcode, "
                                   "memory plan"),
                       ("run", "compile a model and run every kernel on Verilator, each "
                               "shadow-checked against the reference")):
        p = sub.add_parser(name, help=text)
        p.add_argument("model", help="an ONNX model (.onnx) or an hwgen JSON graph (.json)")
        p.add_argument("--variant", required=True, help="a folder written by 'hwgen generate'")
        p.add_argument("--input-shape", dest="input_shape", type=input_shape, action="append",
                       metavar="NAME=D0,D1,...",
                       help="static shape of an ONNX input with dynamic dimensions")
        p.add_argument("--no-fusion", dest="no_fusion", action="store_true",
                       help="every op its own kernel, through memory")
        p.add_argument("--min-gain", dest="min_gain", type=float, default=0.02,
                       help="fraction of predicted cycles fusion must save (default 0.02)")
        p.add_argument("--cache", help="kernel cache folder (default $HWGEN_KERNEL_CACHE or "
                                       "build/kernel_cache)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "compile":
            p.add_argument("-o", "--output", required=True, help="plan folder to write")
            p.add_argument("--explain", action="store_true",
                           help="show every candidate, its predicted cycles, and why it lost")
            p.set_defaults(func=compile.run)
        else:
            p.add_argument("--input", action="append", metavar="[NAME=]FILE.npy",
                           help="an input's value (default: random, from --seed)")
            p.add_argument("--output", action="append", metavar="[NAME=]FILE.npy",
                           help="write an output (in the model's output dtype)")
            p.add_argument("--seed", type=int, default=0)
            p.set_defaults(func=run.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        # `hwgen inspect ... | head`: the reader left; that is not an error of ours.
        sys.stderr.close()
        return 0
    except (ValueError, RuntimeError, OSError) as exc:
        # User-facing errors carry their own fix; a bug elsewhere still shows a traceback.
        print(f"hwgen: error: {exc}", file=sys.stderr)
        return 2
