"""``hwgen report``: a run's JSON as one self-contained HTML page of plots."""

from __future__ import annotations

import argparse

HELP = ("write one self-contained HTML page of plots (fused vs unfused, predicted vs measured, "
        "roofline, reconfiguration timeline, resources) from a run's --json output")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_json", metavar="RUN.json",
                   help="what 'hwgen run --variants DIR --workload FILE --json' (or 'hwgen run "
                        "MODEL --json') printed")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html",
                   help="the page to write (replaced whole if it exists); it needs no network "
                        "to open")


def run(args: argparse.Namespace) -> int:
    # plotly loads only for this command: the others never pay its import
    from fusion.runtime.report.page import SECTIONS, write_report

    written = write_report(args.run_json, args.output)
    titles = {s.id: s.title.lower() for s in SECTIONS}
    line = (f"wrote {written.path} ({written.size / 1e6:.1f} MB): {len(written.drawn)} of "
            f"{len(SECTIONS)} plots drawn")
    if written.missing:
        line += f"; not in the run's JSON: {', '.join(titles[s] for s in written.missing)}"
    print(line)
    return 0
