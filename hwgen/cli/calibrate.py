"""``hwgen calibrate``: measure kernels of every kind on variant folders into a profile
database (:mod:`sim.sweep`), on a local process pool or a Dask cluster, resumably."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hwgen.cli.common import (
    available_cores,
    count,
    executor_from_args,
    positive_int,
    seed,
)
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
    p.add_argument("--jobs", type=positive_int, default=None,
                   help="local worker processes, which plan the sweep (compile its models) "
                        "and run it (default: the cores available)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="a Dask scheduler (e.g. tcp://host:8786) to run the sweep on instead "
                        "of local processes")
    p.add_argument("--seed", type=seed, default=0, help="seed of the sweep (default 0)")
    p.add_argument("--db", required=True, help="the profile database (SQLite; created if new)")
    p.add_argument("--no-models", dest="models", action="store_false",
                   help="no whole-model kernels: GEMMs only (and --networks if given)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="plan the sweep (what it would run, what the database holds) and "
                        "stop before any simulation")
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
    args.jobs = args.jobs or available_cores()
    progress = not args.quiet and sys.stderr.isatty()
    with ProfileDB(args.db) as db:

        def sink(rows) -> int:
            return db.add(rows, source=SOURCE)  # each row's seed is its extra["seed"]

        executor, close = executor_from_args(args)
        try:
            began = time.perf_counter()
            tasks, skipped = plan_tasks(args.variant, args.samples, args.seed, db.run_keys(),
                                        ProfileDB.run_key, models=args.models,
                                        networks=_networks(args),
                                        candidates_of=args.candidates_of,
                                        network_candidates=args.network_candidates,
                                        executor=executor, progress=progress)
            planning = time.perf_counter() - began
            result = run_sweep([] if args.dry_run else tasks, sink, executor=executor,
                               progress=progress)
        finally:
            close()
    result.skipped, result.planning_seconds = skipped, planning
    if args.dry_run:
        runs = sum(t.runs for t in tasks)
        if args.json:
            print(json.dumps({"dry_run": True, "tasks": len(tasks), "runs": runs,
                              "skipped": skipped, "planning_seconds": round(planning, 2)}))
        else:
            print(f"calibrate --dry-run: {runs} runs in {len(tasks)} launches to do, {skipped} "
                  f"already in {args.db}; planned in {planning:.1f} s on {args.jobs} "
                  f"worker(s); nothing run")
        return 0
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(f"calibrate: {result.runs} runs in {result.tasks} launches, {result.added} new in "
              f"{args.db}, {skipped} already there; planned in {planning:.1f} s, ran in "
              f"{result.seconds:.1f} s ({result.runs_per_minute:.0f} runs/min)")
        for line in result.failed:
            print(f"  failed: {line}", file=sys.stderr)
        if result.mismatched:
            print(f"  {result.mismatched} run(s) differed from the reference (recorded, "
                  f"never learned from)", file=sys.stderr)
    # a run that failed or differed is a result that is wrong: status 1
    return 1 if result.failed or result.mismatched else 0
