"""The reconfiguration manager on a mixed MLPerf Tiny workload (issue 14's benchmark).

1. **Library** (``hwgen variants build``): three variants of 64 PEs each, so that all three fit
   the same FPGA, each best at one kind of layer: an 8x8 array with the window unit
   (depthwise convolutions: DS-CNN), a 4x16 array with a 16-byte port (GEMVs: the
   autoencoder), an 8x8 array with a 16-byte port (ResNet's convolutions). Synthesis figures
   come with it (cached by the Verilog's hash).
2. **Workload**: ResNet-8, DS-CNN and the autoencoder, each a phase of ``--repeat`` runs on its
   bundled input, the three phases twice.
3. **Break-even**: from the measured cycles of every model on every variant, the swap cost at
   which the offline optimum stops beating the best static variant (bisection on
   :func:`fusion.runtime.reconfig.planner.offline_plan`).
4. **Runs** (``hwgen run --variants --workload --json``): the online and offline policies at a
   quarter of the break-even swap cost and at four times it, and at the descriptors' own
   reconfiguration cost (the ECP5's full bitstream). Every kernel runs on Verilator,
   bit-exact.
5. **Report**: ``hwgen report`` of the online run below break-even.

Writes ``build/bench_reconfig.json``. Run: ``python -m bench.reconfig [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.output import write_results
from fusion.runtime.reconfig.planner import offline_plan, static_plan

ROOT = Path("build") / "reconfig"
STAGES = "bias,requant,relu,clamp,residual"
SPECS = (f"8x8:{STAGES}+window", f"4x16:{STAGES}+port16", f"8x8:{STAGES}+port16")
MODELS = ("resnet8_qdq", "ds_cnn_qdq", "fc_autoencoder_qdq")
REAL = Path("examples") / "real"


def _hwgen(*argv: str, ok: tuple[int, ...] = (0,)) -> str:
    """The ``hwgen`` command as a user runs it; its stdout, or exit with its stderr."""
    hwgen = Path(sys.executable).with_name("hwgen")
    done = subprocess.run([str(hwgen), *argv], capture_output=True, text=True, check=False)
    if done.returncode not in ok:
        raise SystemExit(f"hwgen {' '.join(argv)} exited {done.returncode}: "
                         f"{done.stderr.strip()[-2000:]}")
    return done.stdout


def workload(repeat: int) -> Path:
    """The workload file: each model's bundled input, three phases, twice."""
    ROOT.mkdir(parents=True, exist_ok=True)
    phases = []
    for model in MODELS:
        np.save(ROOT / f"{model}_x.npy", np.load(REAL / f"{model}.npz")["x"])
    for _ in range(2):
        phases += [{"model": str((REAL / f"{m}.onnx").resolve()), "input": f"{m}_x.npy",
                    "repeat": repeat} for m in MODELS]
    path = ROOT / "workload.json"
    path.write_text(json.dumps({"phases": phases}, indent=1))
    return path


def break_even(run: dict) -> float:
    """The swap cost at which the offline optimum over the measured cycles no longer beats
    the best static variant."""
    names = list(run["variants"])
    table = [[float(run["measured"][r["model"]][v]) if run["measured"][r["model"]][v]
              is not None else float("inf") for v in names] for r in run["timeline"]]

    def gain(d: float) -> float:
        swap = [d] * len(names)
        best = min(static_plan(table, swap, v).total for v in range(len(names)))
        return best - offline_plan(table, swap).total

    lo, hi = 0.0, 1.0
    while gain(hi) > 0:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gain(mid) > 0 else (lo, mid)
    return hi


def summary(run: dict) -> dict:
    keys = ("policy", "total_cycles", "kernel_cycles", "swaps", "swap_cycles", "static_cycles",
            "offline_optimal_cycles", "wall_seconds")
    out = {k: run[k] for k in keys}
    best = min(c for c in run["static_cycles"].values() if c is not None)
    out["best_static_cycles"] = best
    out["over_best_static"] = round(run["total_cycles"] / best, 4)
    out["schedule"] = [f"{r['model']}@{r['variant']}" for r in run["timeline"]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=2, help="runs of each phase (default 2)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    library = ROOT / "library"
    # resources only: Fmax and the tools' times are bench.variant_library's (nextpnr takes
    # minutes a variant); yosys failing on one variant exits 1 with the library written
    _hwgen("variants", "build", "-o", str(library), *SPECS, "--no-pnr", "--quiet", ok=(0, 1))
    variants = json.loads(_hwgen("variants", "list", str(library), "--json"))
    build_seconds = time.perf_counter() - t0
    path = workload(args.repeat)
    base = ["run", "--variants", str(library), "--workload", str(path), "--json",
            "--shadow-inputs", "0"]
    # the descriptors' own swap cost (a full bitstream over slave SPI), when every variant
    # fits a part; else a what-if swap of 1 cycle, only to measure every model on every variant
    costs = [v["reconfig_cycles"] for v in variants["variants"]]
    own_cost = None if None in costs else max(costs)
    first = ["--swap-cycles", "1"] if own_cost is None else []
    own = json.loads(_hwgen(*base, "--policy", "offline", *first))
    d_star = break_even(own)
    results = {"specs": SPECS, "variants": variants, "library_seconds": round(build_seconds, 1),
               "repeat": args.repeat, "break_even_swap_cycles": round(d_star),
               "descriptor_swap_cycles": own_cost,
               "measured": own["measured"], "predicted": own["predicted"], "runs": {}}
    if own_cost is not None:
        results["runs"]["descriptor_offline"] = summary(own)
    for label, d in (("below", round(d_star / 4)), ("above", round(d_star * 4))):
        for policy in ("online", "offline"):
            extra = ["--compare-unfused"] if (label, policy) == ("below", "online") else []
            run = json.loads(_hwgen(*base, "--policy", policy, "--swap-cycles", str(d), *extra))
            results["runs"][f"{label}_{policy}"] = {"swap_cycles_each": d, **summary(run)}
            print(f"swap {d:,} ({label} break-even {d_star:,.0f}), {policy}: "
                  f"{run['total_cycles']:,} cycles, {run['swaps']} swaps; best static "
                  f"{results['runs'][f'{label}_{policy}']['best_static_cycles']:,}, optimum "
                  f"{run['offline_optimal_cycles']:,}")
            if extra:
                (ROOT / "run_below_online.json").write_text(json.dumps(run))
    if own_cost is not None:
        own_online = json.loads(_hwgen(*base, "--policy", "online"))
        results["runs"]["descriptor_online"] = summary(own_online)
    _hwgen("report", str(ROOT / "run_below_online.json"), "-o", str(ROOT / "report.html"))
    results["report"] = str(ROOT / "report.html")
    results["seconds"] = round(time.perf_counter() - t0, 1)
    write_results("bench_reconfig.json", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
