"""``hwgen profile``: what a profile database holds (:mod:`fusion.cost.profiles`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = ("summarize a profile database: runs per variant, platform and kind; model errors; "
        "data profiles per model and variant")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("db", metavar="DB", help="a profile database (SQLite file)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--export", metavar="FILE.jsonl",
                   help="also write every run as JSONL (one calibration row per line)")


def _table(title: str, header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    """A titled table, each column as wide as its widest cell (numbers right-aligned)."""
    if not rows:
        return [f"{title}: none"]
    cells = [header, *[tuple(str(c) for c in r) for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(isinstance(r[i], int | float) for r in rows) for i in range(len(header))]
    lines = [f"{title}:"]
    for r in cells:
        lines.append("  " + "  ".join(c.rjust(w) if num else c.ljust(w)
                                      for c, w, num in zip(r, widths, numeric, strict=True))
                     .rstrip())
    return lines


def render(summary: dict[str, Any]) -> str:
    """The summary of :meth:`fusion.cost.profiles.ProfileDB.summary` as readable tables."""
    lines = [f"{summary['path']}: {summary['runs']} runs, {summary['ok']} ok "
             f"(schema version {summary['schema_version']})"]
    lines += _table("by variant", ("variant", "array", "runs", "ok"),
                    [(v["variant_key"], v["array"], v["runs"], v["ok"])
                     for v in summary["by_variant"]])
    lines += _table("by platform", ("platform", "memory", "runs", "ok"),
                    [(p["platform_key"], p["platform"], p["runs"], p["ok"])
                     for p in summary["by_platform"]])
    lines += _table("by kind", ("kind", "runs", "ok"),
                    [(k["kind"], k["runs"], k["ok"]) for k in summary["by_kind"]])
    lines += _table("by source", ("source", "runs", "ok"),
                    [(s["source"], s["runs"], s["ok"]) for s in summary["by_source"]])
    lines += _table("latest model errors", ("model", "variant", "platform", "kernels",
                                            "MAPE %", "when"),
                    [(e["model"], e["variant_key"], e["platform_key"], e["n"],
                      round(e["mape"], 3), e["created"]) for e in summary["model_errors"]])
    lines += _table("data profiles (mean share of zeros / of all-zero tiles)",
                    ("model", "variant", "runs", "tensors", "activations", "weights"),
                    [(d["model"], d["variant_key"], d["runs"], d["tensors"],
                      _shares(d, "activation"), _shares(d, "weight"))
                     for d in summary.get("data_profiles", [])])
    return "\n".join(lines)


def _shares(entry: dict[str, Any], role: str) -> str:
    """``zeros / zero tiles`` of one role of a data-profile summary, in percent."""
    z, t = entry[f"{role}_zero_share"], entry[f"{role}_zero_tiles"]
    return "-" if z is None else f"{z:.1%} / {t:.1%}"


def run(args: argparse.Namespace) -> int:
    from fusion.cost.profiles import ProfileDB

    with ProfileDB(args.db, create=False) as db:
        summary = db.summary()
        if args.export:
            n = db.export_jsonl(args.export)
            # on stderr, so that --json leaves one object on stdout
            print(f"hwgen: exported {n} runs to {args.export}", file=sys.stderr)
    print(json.dumps(summary) if args.json else render(summary))
    return 0
