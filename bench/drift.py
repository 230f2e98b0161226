"""The feedback loop under drift: a workload on DDR3 whose board turns hot mid-run, unannounced.

MLPerf Tiny models run in turn on the 8x8 variant of :mod:`bench.platforms` on a
:class:`sim.board.Board` that starts on DDR3 at normal refresh and switches to the
hot-refresh build after ``--switch-after`` simulator launches. The runtime
(:class:`fusion.runtime.online.OnlineLoop`) compiles each run with its current model
(profiles measured since its last refit, then the analytical model), records every kernel in
a profile database, and refits when the kernels it runs again at the same placement no longer
take what they took (their rolling change crosses the threshold: the hardware changed). With
``--learned DIR`` (a model ``hwgen train`` or :mod:`bench.calibration` saved) the base model
is that learned model, and each refit fits it again with the runs since the drift
(:meth:`~fusion.cost.learned.LearnedModel.refitted`), so the kernels no profile prices
recover too. Printed: per run, the model, the mean error of its kernels, which tier priced
them, the error of the model-priced ones, the profile mark, and where the board switched and
the loop refitted. Writes ``build/bench_drift.json``.

Run: ``python -m bench.drift [--passes N] [--switch-after N] [--threshold F] [--window N]
[--learned DIR] [--model-threshold F]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.output import write_results
from bench.platforms import VARIANT
from examples.real_check import REAL
from fusion.compiler.plan import compile_model
from fusion.cost import AnalyticalModel
from fusion.cost.profiles import ProfileDB
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from fusion.runtime.drift import DriftMonitor
from fusion.runtime.online import OnlineLoop
from fusion.runtime.run import run_compiled
from hwgen.platform import PlatformConfig
from sim.board import Board

MODELS = ("ds_cnn_qdq", "fc_autoencoder_qdq", "lenet5_qdq")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=int, default=6, help="passes over the models (default 6)")
    p.add_argument("--switch-after", dest="switch_after", type=int, default=9,
                   help="simulator launches before the board turns hot (default 9)")
    p.add_argument("--threshold", type=float, default=0.01,
                   help="rolling relative error that calls for a refit (default 0.01)")
    p.add_argument("--window", type=int, default=8, help="kernel runs in the rolling window")
    p.add_argument("--model-threshold", dest="model_threshold", type=float, default=None,
                   help="rolling error of the model-priced kernels that calls for a refit "
                        "(default: --threshold); above the model's own held-out error, so "
                        "that only a drift refits it")
    p.add_argument("--learned", metavar="DIR",
                   help="a saved learned model: the base model, refitted at each drift")
    args = p.parse_args(argv)
    normal = PlatformConfig(memory="ddr3")
    hot = PlatformConfig(memory="ddr3", refresh="hot")
    board = Board(VARIANT, normal)
    board.switch_after(args.switch_after, hot)
    graphs = {name: load_model(REAL / f"{name}.onnx") for name in MODELS}
    inputs = {}
    for name in MODELS:
        with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
            inputs[name] = {"x": data["x"]}
    timeline = []
    with tempfile.TemporaryDirectory() as tmp, ProfileDB(Path(tmp) / "profiles.db") as db:
        base, refit = AnalyticalModel(normal), None
        if args.learned:
            from fusion.cost.learned_store import load

            base = load(args.learned).on(normal)
            refit = base.refitted
        model_threshold = args.threshold if args.model_threshold is None \
            else args.model_threshold
        loop = OnlineLoop(db, normal, base,
                          DriftMonitor(threshold=args.threshold, window=args.window),
                          refit=refit,
                          model_monitor=DriftMonitor(threshold=model_threshold,
                                                     window=args.window))
        for run in range(args.passes * len(MODELS)):
            name = MODELS[run % len(MODELS)]
            model = loop.model()
            compiled = compile_model(graphs[name], VARIANT, cache=KernelCache(disk=False),
                                     platform=normal, model=model)
            report = run_compiled(compiled, inputs[name], build=board)
            errors = [abs(k.predicted_cycles - k.cycles) / k.cycles for k in report.kernels]
            tiers = {k.name: k.priced_by for k in compiled.kernels}
            profiled = [abs(k.predicted_cycles - k.cycles) / k.cycles for k in report.kernels
                        if tiers[k.name] == "measured"]
            modelled = [abs(k.predicted_cycles - k.cycles) / k.cycles for k in report.kernels
                        if tiers[k.name] != "measured"]
            refitted = loop.record(compiled, report)
            board_platform = "hot" if board.platform == hot else "normal"
            row = {"run": run, "model": name, "board": board_platform,
                   "priced": dict(model.counts), "cycles": report.total_cycles,
                   "mean_error": round(float(np.mean(errors)), 4),
                   "profiled_kernels": len(profiled),
                   "profiled_error": round(float(np.mean(profiled)), 4) if profiled else None,
                   "model_priced_kernels": len(modelled),
                   "model_priced_error": (round(float(np.mean(modelled)), 4) if modelled
                                          else None),
                   "base_model": loop.base.name,
                   "profile_rolling_error": round(loop.monitor.rolling_error(
                       VARIANT.key(), normal.key()), 4),
                   "profile_mark": loop.since, "refit": refitted}
            timeline.append(row)
            print(f"run {run:2d} {name:<20} board {board_platform:<6} cycles "
                  f"{report.total_cycles:>8,} mean error {100 * row['mean_error']:5.2f}% "
                  f"(profiled {len(profiled)}: "
                  f"{'-' if not profiled else f'{100 * np.mean(profiled):.2f}%'}; "
                  f"{loop.base.name} {len(modelled)}: "
                  f"{'-' if not modelled else f'{100 * np.mean(modelled):.2f}%'}) "
                  f"repeats' rolling change {100 * row['profile_rolling_error']:.2f}% "
                  f"priced {row['priced']} profile mark {loop.since}"
                  f"{'  REFIT' if refitted else ''}", flush=True)
    write_results("bench_drift.json", {"variant": VARIANT.to_dict(), "learned": args.learned,
                                       "model_threshold": model_threshold,
                                       "switch_after_launches": args.switch_after,
                                       "threshold": args.threshold, "window": args.window,
                                       "board_history": board.history, "timeline": timeline})
    return 0


if __name__ == "__main__":
    sys.exit(main())
