"""``hwgen inspect``: a model's graph after the passes."""

from __future__ import annotations

import argparse
import json

from hwgen.cli.common import add_input_arguments, load_args

HELP = "print a model's graph after the passes: ops, shapes, quantization per tensor"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="an ONNX model (.onnx) or an hwgen JSON graph (.json)")
    add_input_arguments(p)
    p.add_argument("--no-legalize", dest="no_legalize", action="store_true",
                   help="stop after Q/DQ folding (leave convolutions as qconv2d)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from fusion.passes.report import inspect_model, render

    graph, _ = load_args(args)
    report = inspect_model(graph, legalize=not args.no_legalize)
    print(json.dumps(report) if args.json else render(report))
    return 0
