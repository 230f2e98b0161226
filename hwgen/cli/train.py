"""``hwgen train``: fit the learned cost model and compare it on held-out workloads."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HELP = "fit the learned cost model to calibration rows; held-out metrics beside the baselines"

#: The models of the side-by-side table, in its order.
MODELS = ("learned", "analytical", "scalesim")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("db", help="calibration rows: a JSONL file (.jsonl) or a profile database")
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="folder the model is written to (rows.jsonl and model.json)")
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


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(report: dict[str, Any], output: Path) -> str:
    """The report as a table: one line per model."""
    lines = [f"trained on {report['n_train']} rows, tested on {report['n_test']} rows of "
             f"{len(report['test_workloads'])} held-out workload(s): "
             f"{', '.join(report['test_workloads'])} ({'; '.join(report['platforms'])})",
             f"{'model':<11} {'n':>5} {'MAPE %':>9} {'Spearman':>9} {'regret %':>9} "
             f"{'worst %':>8}"]
    for name in MODELS:
        s = report[name]
        lines.append(f"{name:<11} {s['n']:>5} {_cell(s['mape'], '.3f'):>9} "
                     f"{_cell(s['spearman'], '.4f'):>9} {_cell(s['regret_mean'], '.3f'):>9} "
                     f"{_cell(s['regret_max'], '.3f'):>8}")
    skipped = report["n_test"] - report["scalesim"]["n"]
    if skipped:
        lines.append(f"scalesim left out {skipped} kernel(s) without a GEMM shape")
    chosen = report["chosen"]
    lines.append(f"energy: learned MAPE {report['energy']['mape']:.3f}% against the counters' "
                 f"estimate")
    for platform, by in report["by_platform"].items():
        lines.append(f"  {platform} ({by['learned']['n']} kernels): MAPE learned "
                     f"{_cell(by['learned']['mape'], '.2f')}%, analytical "
                     f"{_cell(by['analytical']['mape'], '.2f')}%; regret learned "
                     f"{_cell(by['learned']['regret_mean'], '.2f')}% (worst "
                     f"{_cell(by['learned']['regret_max'], '.2f')}%), analytical "
                     f"{_cell(by['analytical']['regret_mean'], '.2f')}% (worst "
                     f"{_cell(by['analytical']['regret_max'], '.2f')}%); energy "
                     f"{_cell(by['energy_mape'], '.2f')}%")
    for memory in sorted(chosen["cycles"]):
        lines.append(f"chosen on {memory} by grouped cross-validation: cycles "
                     f"{_describe(chosen['cycles'][memory])}; energy "
                     f"{_describe(chosen['energy'][memory])}")
    lines.append(f"model written to {output}")
    return "\n".join(lines)


def _describe(spec: dict[str, Any]) -> str:
    from fusion.cost.learned import Spec

    return Spec.from_dict(spec).describe()


def run(args: argparse.Namespace) -> int:
    from fusion.cost.heldout import heldout_report

    rows = read_db(Path(args.db))
    workloads = None
    if args.test_workloads is not None:
        workloads = [w.strip() for w in args.test_workloads.split(",") if w.strip()]
    model, report = heldout_report(rows, workloads, seed=args.seed)
    # the model written is the one scored: the figures printed are the ones it earned (the
    # held-out workloads are not in its training rows)
    model.save(args.output)
    report["output"] = str(args.output)
    print(json.dumps(report) if args.json else render(report, args.output))
    return 0
