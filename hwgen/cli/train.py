"""``hwgen train``: fit the learned cost model and compare it on held-out workloads."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HELP = "fit the learned cost model to calibration rows; held-out metrics beside the baselines"

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("db", help="calibration rows: a JSONL file (.jsonl) or a profile database")
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="folder the model is written to (rows.jsonl, heads.skops and "
                        "model.json): new, empty, or a model folder (replaced whole)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the split and of the regressors (default 0)")
    p.add_argument("--test-workloads", dest="test_workloads", default=None,
                   help="comma-separated workloads to hold out (default: a quarter of them, "
                        "drawn with the seed)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def read_db(path: Path) -> list[Any]:
    """The rows of a calibration JSONL file or a profile database.

    Raises
    ------
    ValueError
        A missing or empty file, or a database without the profile module.
    """
    from fusion.cost.data import read_rows
    from hwgen.files import check_regular

    check_regular(path, "calibration rows")
    if not path.is_file():
        raise ValueError(f"{path} does not exist; give a calibration JSONL file (sim.calibrate "
                         f"writes one) or a profile database")
    if path.suffix == ".jsonl":
        rows = read_rows(path)
    else:
        try:
            from fusion.cost.profiles import ProfileDB
        except ImportError as exc:
            raise ValueError(f"{path} is not a .jsonl file and this hwgen cannot read profile "
                             f"databases ({exc}); export the rows to JSONL") from None
        rows = list(ProfileDB(path).rows())
    if not rows:
        raise ValueError(f"{path} holds no calibration rows; record some first")
    return rows


def run(args: argparse.Namespace) -> int:
    from fusion.cost.heldout import heldout_report, render
    from fusion.cost.learned_store import check_output_folder, save

    rows = read_db(Path(args.db))
    # before the fit, not after it; what the folder holds then is what may be replaced
    checked = check_output_folder(args.output)
    workloads = None
    if args.test_workloads is not None:
        workloads = [w.strip() for w in args.test_workloads.split(",") if w.strip()]
    model, report = heldout_report(rows, workloads, seed=args.seed)
    # the model written is the one scored: the figures printed are the ones it earned (the
    # held-out workloads are not in its training rows)
    save(model, args.output, checked=checked)
    report["output"] = str(args.output)
    print(json.dumps(report) if args.json else render(report, args.output))
    return 0
