"""The ``hwgen`` command line: the one place where arguments become calls.

User errors (a bad config, a missing descriptor, a shape that cannot fit, a missing
toolchain) print one ``hwgen: error: ...`` line that names the problem and the fix, and exit
with status 2; a result that does not match the reference exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hwgen.config import EPILOGUE_STAGES, VariantConfig


def _stage_list(text: str) -> tuple[str, ...]:
    if text.strip().lower() in ("", "none"):
        return ()
    stages = tuple(s.strip() for s in text.split(",") if s.strip())
    for stage in stages:
        if stage not in EPILOGUE_STAGES:
            raise argparse.ArgumentTypeError(
                f"unknown epilogue stage {stage!r}; the known stages are "
                f"{', '.join(EPILOGUE_STAGES)}")
    return stages


def _config_from_args(args: argparse.Namespace) -> VariantConfig:
    if args.config:
        try:
            data = json.loads(Path(args.config).read_text())
        except FileNotFoundError:
            raise ValueError(f"no config file at {args.config}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {args.config} is not valid JSON: {exc}") from None
        if isinstance(data, dict) and data.get("format") == "hwgen-variant":
            data = data.get("config")
        return VariantConfig.from_dict(data)
    fields = {}
    for name in ("rows", "cols", "port_bytes", "port_latency", "spad_a_depth", "spad_b_depth",
                 "spad_e_depth", "imem_depth", "mem_addr_bits"):
        value = getattr(args, name)
        if value is not None:
            fields[name] = value
    if args.epilogue is not None:
        fields["epilogue"] = args.epilogue
    return VariantConfig(**fields)


def cmd_doctor(args: argparse.Namespace) -> int:
    from sim.toolchain import doctor

    lines, ok = doctor()
    for line in lines:
        print(line)
    return 0 if ok else 2


def cmd_generate(args: argparse.Namespace) -> int:
    from hwgen.emit import generate

    config = _config_from_args(args)
    descriptor = generate(config, Path(args.output))
    print(f"variant {descriptor['key']}: {config.rows}x{config.cols}, epilogue "
          f"{','.join(config.epilogue) or 'none'} -> {args.output} "
          f"(Verilog in {descriptor['generate_seconds']:.2f} s)")
    return 0


def _read_variant(path: str) -> VariantConfig:
    directory = Path(path)
    descriptor = directory / "variant.json" if directory.is_dir() else directory
    config, _ = VariantConfig.read_descriptor(descriptor)
    return config


def cmd_gemm(args: argparse.Namespace) -> int:
    from fusion.layout import GemmDims
    from fusion.tiling import default_tiling
    from sim.gemm_check import run_gemm

    config = _read_variant(args.variant)
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


def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.partition("=")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(
            f"--input-shape takes NAME=D0,D1,... with non-negative integer dimensions "
            f"(e.g. x=1,3,32,32), not {text!r}")
    return name, shape


def cmd_inspect(args: argparse.Namespace) -> int:
    from fusion.graph_report import inspect_model, load_model, render

    shapes = dict(args.input_shape or ())
    if len(shapes) != len(args.input_shape or ()):
        raise ValueError("--input-shape names an input more than once; give each input once")
    report = inspect_model(load_model(args.model, shapes), legalize=not args.no_legalize)
    print(json.dumps(report) if args.json else render(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hwgen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("doctor", help="check Python, Amaranth, cocotb and Verilator")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("generate", help="generate a variant: Verilog, descriptor, ISA doc")
    p.add_argument("--config", help="a JSON file of VariantConfig fields (or a descriptor)")
    p.add_argument("--rows", type=int)
    p.add_argument("--cols", type=int)
    p.add_argument("--epilogue", type=_stage_list,
                   help=f"comma-separated stages in order, from {','.join(EPILOGUE_STAGES)}")
    p.add_argument("--port-bytes", dest="port_bytes", type=int)
    p.add_argument("--port-latency", dest="port_latency", type=int)
    p.add_argument("--spad-a-depth", dest="spad_a_depth", type=int)
    p.add_argument("--spad-b-depth", dest="spad_b_depth", type=int)
    p.add_argument("--spad-e-depth", dest="spad_e_depth", type=int)
    p.add_argument("--imem-depth", dest="imem_depth", type=int)
    p.add_argument("--mem-addr-bits", dest="mem_addr_bits", type=int)
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("gemm", help="run one GEMM kernel on Verilator, checked bit for bit")
    p.add_argument("--variant", required=True, help="a folder written by 'hwgen generate'")
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--epilogue", type=_stage_list,
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
    p.set_defaults(func=cmd_gemm)

    p = sub.add_parser("inspect", help="print a model's graph after the passes: ops, shapes, "
                                       "quantization per tensor")
    p.add_argument("model", help="an ONNX model (.onnx) or an hwgen JSON graph (.json)")
    p.add_argument("--input-shape", dest="input_shape", type=_input_shape, action="append",
                   metavar="NAME=D0,D1,...",
                   help="static shape of an ONNX input with dynamic dimensions (repeatable)")
    p.add_argument("--no-legalize", dest="no_legalize", action="store_true",
                   help="stop after Q/DQ folding (leave convolutions as qconv2d)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_inspect)
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


if __name__ == "__main__":
    sys.exit(main())
