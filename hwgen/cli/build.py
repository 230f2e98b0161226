"""``hwgen build --board``: a variant on an FPGA board, to a bitstream (docs/boards.md)."""

from __future__ import annotations

import argparse
import json
import sys

from hwgen.cli.common import add_variant_arguments, config_from_args, positive_int

HELP = ("build a variant for an FPGA board: the accelerator, the board's DRAM, a PLL and a "
        "UART host bridge, to a bitstream (yosys, nextpnr-ecp5, ecppack)")


def _mhz(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a frequency in MHz, got {text!r}") \
            from None
    if not 1 <= value <= 400:
        raise argparse.ArgumentTypeError(f"expected 1 to 400 MHz, got {text}")
    return round(value * 1e6)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from hwgen.board.boards import BOARDS, ROUTERS

    p.add_argument("--board", required=True, choices=sorted(BOARDS),
                   help="the board (docs/boards.md)")
    p.add_argument("--variant", metavar="DIR",
                   help="a variant folder ('hwgen generate') instead of the variant options")
    p.add_argument("--spec", metavar="SPEC",
                   help="a variant spec as 'hwgen variants build' takes it (8x8:bias,requant,"
                        "relu,clamp,residual+share2) instead of the variant options")
    add_variant_arguments(p)
    p.add_argument("--clock-mhz", dest="clock_hz", type=_mhz, metavar="MHZ",
                   help="the system clock (accelerator, DRAM controller, UART); default the "
                        "board's (50 MHz on both)")
    p.add_argument("--baud", type=positive_int,
                   help="the UART bridge's bit rate; default the board's USB UART's highest "
                        "(3000000 on the ULX3S, 6000000 on the ECPIX-5)")
    p.add_argument("--allow-timing-fail", dest="allow_timing_fail", action="store_true",
                   help="keep a bitstream whose routed Fmax misses the clock (it may "
                        "misbehave on the board)")
    p.add_argument("--pnr-timeout", dest="pnr_timeout", type=float, default=3600.0,
                   metavar="SECONDS", help="nextpnr's time limit (default 3600)")
    p.add_argument("--seed", type=positive_int, default=1, help="nextpnr's placement seed")
    p.add_argument("--router", choices=ROUTERS, default=ROUTERS[0],
                   help="nextpnr's router (default %(default)s; router1 is slower and more "
                        "timing-driven)")
    p.add_argument("--no-wide-luts", dest="wide_luts", action="store_false",
                   help="yosys synth_ecp5 -nowidelut: no 5- to 7-input functions packed into "
                        "one slice, which can ease routing congestion")
    p.add_argument("--sim-only", dest="sim_only", action="store_true",
                   help="stop after the Verilog: a folder for the simulated board ('hwgen run "
                        "--board-port sim'), no bitstream")
    p.add_argument("--json", action="store_true", help="print board.json")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")


def run(args: argparse.Namespace) -> int:
    from hwgen.board import build
    from hwgen.board.boards import board
    from hwgen.board.design import BoardDesign

    b = board(args.board)
    options = [flag for flag, name in (("--config", "config"), ("--rows", "rows"),
                                       ("--cols", "cols"), ("--epilogue", "epilogue"),
                                       ("--port-bytes", "port_bytes"))
               if getattr(args, name, None) is not None]
    chosen = [flag for flag, given in (("--variant", args.variant is not None),
                                       ("--spec", args.spec is not None),
                                       ("the variant options", bool(options))) if given]
    if len(chosen) > 1:
        raise ValueError(f"give one of --variant DIR, --spec SPEC or the variant options, not "
                         f"{' and '.join(chosen)}")
    if args.variant is not None:
        from hwgen.gateware.folder import read_variant

        config = read_variant(args.variant)
    elif args.spec is not None:
        from hwgen.specs import parse_spec

        config = parse_spec(args.spec).config
    else:
        config = config_from_args(args)
    design = BoardDesign(config, b, args.clock_hz or b.clock_hz, args.baud or b.baud)
    say = (lambda line: None) if args.json else (
        lambda line: print(f"hwgen: {line}", file=sys.stderr, flush=True))
    try:
        desc = build.build(design, args.output, allow_timing_fail=args.allow_timing_fail,
                           pnr_timeout=args.pnr_timeout, seed=args.seed, router=args.router,
                           wide_luts=args.wide_luts,
                           sim_only=args.sim_only, say=say)
    except build.BuildFailed as exc:
        raise RuntimeError(str(exc)) from None
    if args.json:
        print(json.dumps(desc, sort_keys=True))
        return 0
    if desc["bitstream"] is None:
        print(f"{args.output}: {b.name} design {desc['digest'][:16]} (variant "
              f"{config.key()}), Verilog only (--sim-only): run it with 'hwgen run MODEL "
              f"--variant {args.output} --board-port sim'")
        return 0
    t, r, bit = desc["timing"], desc["resources"]["demand"], desc["bitstream"]
    if not t["meets_clock"]:
        print(f"hwgen: WARNING: the routed design reaches {t['fmax_mhz']:.2f} MHz, short of its "
              f"{t['target_mhz']:g} MHz clock; the bitstream was kept (--allow-timing-fail) and "
              f"may misbehave on the board", file=sys.stderr)
    print(f"{args.output}/{bit['file']}: {bit['bytes']:,} bytes, sha256 {bit['sha256'][:16]}")
    print(f"{b.name} ({desc['resources']['part']}): {r['luts']:,} LUT4, {r['ffs']:,} FF, "
          f"{r['dsps']} DSP, {r['brams']} EBR; Fmax {t['fmax_mhz']:.2f} MHz against "
          f"{t['target_mhz']:g} MHz ({'met' if t['meets_clock'] else 'MISSED'}); UART "
          f"{design.baud:,} baud; built in {desc['seconds']['total']:.0f} s")
    print(f"flash: openFPGALoader -b {b.loader_board} {args.output}/{bit['file']}")
    return 0
