"""``hwgen inspect``: a model's graph after the passes."""

from __future__ import annotations

import argparse
import json

from hwgen.cli.common import input_shape

HELP = "print a model's graph after the passes: ops, shapes, quantization per tensor"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="an ONNX model (.onnx) or an hwgen JSON graph (.json)")
    p.add_argument("--input-shape", dest="input_shape", type=input_shape, action="append",
                   metavar="NAME=D0,D1,...",
                   help="static shape of an ONNX input with dynamic dimensions (repeatable)")
    p.add_argument("--no-legalize", dest="no_legalize", action="store_true",
                   help="stop after Q/DQ folding (leave convolutions as qconv2d)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from fusion.frontend.load import load_model
    from fusion.passes.report import inspect_model, render

    shapes = dict(args.input_shape or ())
    if len(shapes) != len(args.input_shape or ()):
        raise ValueError("--input-shape names an input more than once; give each input once")
    report = inspect_model(load_model(args.model, shapes), legalize=not args.no_legalize)
    print(json.dumps(report) if args.json else render(report))
    return 0
