"""``hwgen generate``: a variant's Verilog, descriptor and ISA reference."""

from __future__ import annotations

import argparse
from pathlib import Path

from hwgen.cli.common import config_from_args


def run(args: argparse.Namespace) -> int:
    from hwgen.gateware.emit import generate

    config = config_from_args(args)
    descriptor = generate(config, Path(args.output))
    print(f"variant {descriptor['key']}: {config.rows}x{config.cols}, epilogue "
          f"{','.join(config.epilogue) or 'none'} -> {args.output} "
          f"(Verilog in {descriptor['generate_seconds']:.2f} s)")
    return 0
