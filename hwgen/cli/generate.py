"""``hwgen generate``: a variant's Verilog, descriptor and ISA reference."""

from __future__ import annotations

import argparse
from pathlib import Path

from hwgen.cli.common import (
    add_platform_arguments,
    add_variant_arguments,
    config_from_args,
    platform_files,
    platform_from_args,
)

HELP = "generate a variant: Verilog, descriptor, ISA doc"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_variant_arguments(p)
    add_platform_arguments(p)
    p.add_argument("--fit", metavar="PART",
                   help="synthesize the variant (yosys, then nextpnr on the LFE5U-85F for "
                        "its Fmax) and refuse it unless it fits PART (LFE5U-25F, -45F or "
                        "-85F); the figures go into variant.json's 'synthesis'")
    p.add_argument("--no-pnr", dest="pnr", action="store_false",
                   help="with --fit: no place and route (resources and part only)")
    p.add_argument("--pnr-timeout", dest="pnr_timeout", type=float, default=600.0,
                   metavar="SECONDS", help="with --fit: nextpnr's time limit (default 600)")
    p.add_argument("-o", "--output", required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    from hwgen.gateware.emit import generate

    config = config_from_args(args)
    platform = platform_from_args(args)
    memory_files = platform_files(config, platform)  # refuses a misfit
    describe = None
    if args.fit is not None:
        from hwgen import ecp5

        part = ecp5.part(args.fit)  # an unknown part before any work

        def describe(verilog: str) -> dict:
            return {"synthesis": fit_figures(verilog, part, platform.clock_hz, args.pnr,
                                             args.pnr_timeout)}

    descriptor = generate(config, Path(args.output), platform, memory_files, describe)
    memory = "" if not platform.is_dram else (
        f", on {platform.describe()} (platform {platform.key()})")
    print(f"variant {descriptor['key']}: {config.rows}x{config.cols}, epilogue "
          f"{','.join(config.epilogue) or 'none'}{memory} -> {args.output} "
          f"(Verilog in {descriptor['generate_seconds']:.2f} s)")
    if args.fit is not None:
        print(fit_line(descriptor["synthesis"]))
    return 0


def fit_figures(verilog: str, part, clock_hz: int, pnr: bool, pnr_timeout: float) -> dict:
    """Synthesize ``verilog`` (through the synthesis cache) and refuse it unless it fits
    ``part``: the descriptor's ``synthesis`` record, with ``fit`` (the part asked for).

    Raises
    ------
    ValueError
        If yosys fails, or the design does not fit ``part`` (naming what it lacks).
    """
    from hwgen import ecp5
    from hwgen.gateware.emit import TOP_NAME
    from hwgen.gateware.folder import sha256_of
    from sim.build import default_root
    from synth.cache import SynthesisCache
    from synth.flow import SynthesisJob, synthesize

    job = SynthesisJob(name="variant", verilog=verilog,
                       sha256=sha256_of(verilog.encode()), top=TOP_NAME,
                       clock_hz=clock_hz, pnr=pnr, pnr_timeout=pnr_timeout)
    result, = synthesize([job], cache=SynthesisCache(default_root() / "synthesis"))
    if result["status"] != "ok":
        raise ValueError(f"the variant cannot be synthesized ({result['error']}); nothing "
                         f"was written")
    short = ecp5.shortfall(result["cells"], part)
    if short is not None:
        raise ValueError(f"the variant does not fit the {part.name} ({short}); choose a "
                         f"smaller variant (rows, cols, stages, --window-unit) or a larger "
                         f"--fit part; nothing was written")
    return {**{k: v for k, v in result.items() if k != "cached"}, "fit": part.name}


def fit_line(synthesis: dict) -> str:
    """One line of ``--fit``'s figures: resources, the part, the routed Fmax and its path."""
    r = synthesis["resources"]
    path = synthesis["pnr"].get("critical_path")
    fmax = (f"Fmax {synthesis['fmax_mhz']:.1f} MHz on the LFE5U-85F" if synthesis["fmax_mhz"]
            is not None else f"no Fmax ({synthesis['fmax_reason']})")
    where = f", critical path {path['from']} -> {path['to']}" if path else ""
    return (f"fits the {synthesis['fit']}: {r['LUT']} LUT, {r['FF']} FF, {r['DSP']} DSP, "
            f"{r['BRAM']} EBR (smallest part {synthesis['part']}); {fmax}{where}")
