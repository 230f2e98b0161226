"""``hwgen inspect``: a model's graph after the passes."""

from __future__ import annotations

import argparse
import json


def run(args: argparse.Namespace) -> int:
    from fusion.frontend.load import load_model
    from fusion.passes.report import inspect_model, render

    shapes = dict(args.input_shape or ())
    if len(shapes) != len(args.input_shape or ()):
        raise ValueError("--input-shape names an input more than once; give each input once")
    report = inspect_model(load_model(args.model, shapes), legalize=not args.no_legalize)
    print(json.dumps(report) if args.json else render(report))
    return 0
