"""``hwgen variants``: a library of variants with synthesis figures (``build``), and its table
(``list``). ``docs/variants.md`` has the spec grammar and every descriptor field."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hwgen.cli.common import (
    add_platform_arguments,
    executor_from_args,
    kernel_table,
    platform_files,
    platform_from_args,
    positive_int,
)
from hwgen.specs import GRAMMAR

HELP = "build a library of variants with ECP5 synthesis figures and FuseSoC cores, or list one"

SPEC_HELP = (
    f"a variant: {GRAMMAR}. Stages in the order bias,requant,relu,clamp,residual (none for "
    f"none; without ':' the default bias,requant,relu); +window adds the window unit (port = "
    f"rows = cols), +portN sets port_bytes, +addrN mem_addr_bits, +shareN shares the "
    f"epilogue's lanes (cols/N lanes, N cycles a row), +banksN gives each PE N accumulator "
    f"banks")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 1e6:  # also false for nan and inf (the figure goes into JSON)
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds (below 1e6), "
                                         f"not {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="variants_command", required=True, metavar="{build,list}")
    b = sub.add_parser("build", help="generate variants into a library folder, synthesize "
                                     "them for ECP5 and write their FuseSoC cores",
                       description="Generate each SPEC's variant into DIR/<name>/ (what 'hwgen "
                                   "generate' writes, plus capabilities, synthesis figures, "
                                   "reconfiguration cost and a FuseSoC core), and list them in "
                                   "DIR/library.json. Synthesis results are cached by the "
                                   "Verilog's sha256.")
    b.add_argument("specs", nargs="*", metavar="SPEC", help=SPEC_HELP)
    b.add_argument("--spec", dest="spec_file", metavar="FILE",
                   help="a JSON file holding a list of SPEC strings (added to those given)")
    b.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="the library folder: new, empty, or a library of the same platform "
                        "(its variants of the same names are replaced, the others kept)")
    add_platform_arguments(b)
    b.add_argument("--jobs", type=positive_int, default=1,
                   help="local worker processes for synthesis (default 1)")
    b.add_argument("--scheduler", metavar="ADDRESS",
                   help="a Dask scheduler (e.g. tcp://host:8786) to synthesize on instead of "
                        "local processes")
    b.add_argument("--no-pnr", dest="pnr", action="store_false",
                   help="no place and route: resources and part only, no Fmax")
    b.add_argument("--pnr-timeout", dest="pnr_timeout", type=_seconds, default=600.0,
                   metavar="SECONDS",
                   help="nextpnr's time limit per variant (default 600); past it Fmax is "
                        "recorded as null with the reason")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    li = sub.add_parser("list", help="print a library's variants as a table",
                        description="Print a variant library's variants: shape, epilogue, "
                                    "window unit, resources, part, Fmax, reconfiguration cost "
                                    "and the Verilog's sha256.")
    li.add_argument("library", metavar="DIR", help="a folder written by 'hwgen variants build'")
    li.add_argument("--json", action="store_true", help="print the rows as JSON")


def run(args: argparse.Namespace) -> int:
    return {"build": _build, "list": _list}[args.variants_command](args)


def _build(args: argparse.Namespace) -> int:
    from sim.build import default_root
    from sim.toolchain import terminate_interrupts
    from synth.cache import SynthesisCache
    from synth.library import build_library, read_specs, summary_row

    specs = read_specs(args.specs, args.spec_file)
    platform = platform_from_args(args)
    # one job at a time runs here: no pool to start, and Ctrl-C reaches the tool directly
    local = args.jobs == 1 and not args.scheduler
    executor, close = (None, lambda: None) if local else executor_from_args(args)
    try:
        # SIGTERM unwinds like Ctrl-C, so that yosys and nextpnr (process groups of their
        # own) are killed with hwgen rather than left running
        with terminate_interrupts():
            library = build_library(
                args.output, specs, platform,
                memory_files=lambda config: platform_files(config, platform),
                cache=SynthesisCache(default_root() / "synthesis"), pnr=args.pnr,
                pnr_timeout=args.pnr_timeout, executor=executor,
                progress=not args.quiet and sys.stderr.isatty(),
                notice=lambda line: print(line, file=sys.stderr))
    finally:
        close()
    rows = [summary_row(d) for d in library["built"]]
    failed = [r for r in rows if r["synthesis_error"] is not None]
    for r in failed:
        print(f"hwgen: warning: variant {r['name']} has no synthesis figures: "
              f"{r['synthesis_error']}", file=sys.stderr)
    if args.json:
        print(json.dumps({"library": args.output, "platform": library["platform"],
                          "built": rows}))
        return 1 if failed else 0
    for d, row in zip(library["built"], rows, strict=True):
        figures = ("no synthesis figures" if row["synthesis_error"] is not None else
                   f"{row['LUT']} LUT, {row['FF']} FF, {row['DSP']} DSP, {row['BRAM']} BRAM -> "
                   f"{row['part'] or 'no ECP5 part'}, Fmax {_fmax(row)}")
        print(f"variant {row['name']}: {figures}{' (cached)' if d['cached'] else ''}")
    print(f"library {args.output}: {len(library['variants'])} variant(s), {len(rows)} built")
    # the library is written, but a variant without figures is a result that is missing
    return 1 if failed else 0


def _fmax(row: dict) -> str:
    return f"{row['fmax_mhz']:.1f} MHz" if row["fmax_mhz"] is not None else \
        f"none ({row['fmax_reason']})"


def _list(args: argparse.Namespace) -> int:
    from hwgen.gateware.folder import open_variant
    from synth.library import read_library, summary_row

    library = read_library(args.library)
    rows = []
    for entry in library["variants"]:
        variant = open_variant(Path(args.library) / entry["folder"])  # checks the Verilog
        descriptor = variant.descriptor
        if not all(k in descriptor for k in ("name", "synthesis", "reconfiguration")):
            raise ValueError(f"{variant.directory} has no synthesis figures: it was not built "
                             f"by 'hwgen variants build'; rebuild it with 'hwgen variants build "
                             f"-o {args.library} {entry.get('spec', 'SPEC')}'")
        rows.append(summary_row(descriptor))
    if args.json:
        print(json.dumps({"library": args.library, "platform": library["platform"],
                          "variants": rows}))
        return 0
    table = [("name", "array", "epilogue", "window", "LUT", "FF", "DSP", "BRAM", "part",
              "Fmax MHz", "reconfig cycles", "ms", "verilog")]
    for r in rows:
        table.append((r["name"], r["array"], r["epilogue"], "yes" if r["window"] else "no",
                      *("-" if r[k] is None else str(r[k]) for k in ("LUT", "FF", "DSP", "BRAM")),
                      r["part"] or "-",
                      "-" if r["fmax_mhz"] is None else f"{r['fmax_mhz']:.1f}",
                      "-" if r["reconfig_cycles"] is None else f"{r['reconfig_cycles']:,}",
                      "-" if r["reconfig_seconds"] is None else
                      f"{r['reconfig_seconds'] * 1e3:.1f}",
                      r["verilog_sha256"][:12]))
    print("\n".join(kernel_table(table)))
    return 0
