"""``hwgen generate``: a variant's Verilog, descriptor and ISA reference."""

from __future__ import annotations

import argparse
from pathlib import Path

from hwgen.cli.common import (
    add_platform_arguments,
    config_from_args,
    platform_files,
    platform_from_args,
    stage_list,
)
from hwgen.config import EPILOGUE_STAGES

HELP = "generate a variant: Verilog, descriptor, ISA doc"


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--window-unit", dest="window_unit", action="store_true", default=None,
                   help="add the window unit: depthwise convolutions and pools in hardware "
                        "(needs --port-bytes == --rows == --cols)")
    add_platform_arguments(p)
    p.add_argument("-o", "--output", required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    from hwgen.gateware.emit import generate

    config = config_from_args(args)
    platform = platform_from_args(args)
    memory_files = platform_files(config, platform)  # refuses a misfit
    descriptor = generate(config, Path(args.output), platform, memory_files)
    memory = "" if not platform.is_dram else (
        f", on {platform.describe()} (platform {platform.key()})")
    print(f"variant {descriptor['key']}: {config.rows}x{config.cols}, epilogue "
          f"{','.join(config.epilogue) or 'none'}{memory} -> {args.output} "
          f"(Verilog in {descriptor['generate_seconds']:.2f} s)")
    return 0
