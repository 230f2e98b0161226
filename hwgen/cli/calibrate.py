"""``hwgen calibrate``: measure kernels of every kind on variant folders into a profile
database (:mod:`sim.sweep`), on a local process pool or a Dask cluster, resumably."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hwgen.cli.common import count, executor_from_args, positive_int, seed
from hwgen.files import check_regular

HELP = "measure a sweep of kernels on Verilator into a profile database"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", action="append", required=True, metavar="DIR",
                   help="a variant folder (its platform with it); give several to sweep each")
    p.add_argument("--samples", type=count, default=100,
                   help="GEMMs per variant (default 100); the bundled example models' kernels "
                        "are added unless --no-models")
    p.add_argument("--networks", type=count, default=None, metavar="N",
                   help="random networks (sim/synthetic.py) whose kernels to add per variant, "
                        "fused and unfused: passes, pools and convolutions of many shapes "
                        "(default: one per 8 samples; none with --no-models)")
    p.add_argument("--candidates-of", dest="candidates_of", action="append", default=[],
                   metavar="MODEL",
                   help="also every candidate the engine prices for each GEMM of this ONNX "
                        "model (tilings, loop orders, streamed B; fused and unfused), grouped "
                        "as the model's workload: what selection regret is measured on")
    p.add_argument("--network-candidates", dest="network_candidates", type=count, default=0,
                   metavar="N",
                   help="also every candidate of the first N random networks' GEMMs (as "
                        "--candidates-of measures a model's), grouped as each network's "
                        "workload: training data shaped like a model's candidates (default 0)")
    p.add_argument("--jobs", type=positive_int, default=1,
                   help="local worker processes (default 1)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="a Dask scheduler (e.g. tcp://host:8786) to run the sweep on instead "
                        "of local processes")
    p.add_argument("--seed", type=seed, default=0, help="seed of the sweep (default 0)")
    p.add_argument("--db", required=True, help="the profile database (SQLite; created if new)")
    p.add_argument("--no-models", dest="models", action="store_false",
                   help="no whole-model kernels: GEMMs only (and --networks if given)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")


def _networks(args: argparse.Namespace) -> int:
    if args.networks is None:
        return args.samples // 8 if args.models else 0
    return args.networks


def run(args: argparse.Namespace) -> int:
    from fusion.cost.profiles import ProfileDB
    from hwgen.gateware.folder import open_variant
    from sim.sweep import SOURCE, plan_tasks, run_sweep

    for folder in args.variant:
        open_variant(folder)  # every folder checked before any work
    for model in args.candidates_of:
        check_regular(model, "--candidates-of")
        if not Path(model).is_file():
            raise ValueError(f"--candidates-of {model}: no such file; give an ONNX model")
    with ProfileDB(args.db) as db:
        tasks, skipped = plan_tasks(args.variant, args.samples, args.seed, db.run_keys(),
                                    ProfileDB.run_key, models=args.models,
                                    networks=_networks(args),
                                    candidates_of=args.candidates_of,
                                    network_candidates=args.network_candidates)

        def sink(rows) -> int:
            return db.add(rows, source=SOURCE)  # each row's seed is its extra["seed"]

        executor, close = executor_from_args(args) if tasks else (None, lambda: None)
        try:
            result = run_sweep(tasks, sink, executor=executor,
                               progress=not args.quiet and sys.stderr.isatty())
        finally:
            close()
    result.skipped = skipped
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(f"calibrate: {result.runs} runs in {result.tasks} launches, {result.added} new in "
              f"{args.db}, {skipped} already there; {result.seconds:.1f} s "
              f"({result.runs_per_minute:.0f} runs/min)")
        for line in result.failed:
            print(f"  failed: {line}", file=sys.stderr)
        if result.mismatched:
            print(f"  {result.mismatched} run(s) differed from the reference (recorded, "
                  f"never learned from)", file=sys.stderr)
    # a run that failed or differed is a result that is wrong: status 1
    return 1 if result.failed or result.mismatched else 0
