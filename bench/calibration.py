"""The learned cost model, measured end to end: a calibration sweep on the 8x8 variant over the
four memories, held-out MLPerf Tiny workloads, and the sweep's throughput on each executor.

1. **Folders**: ``hwgen generate`` of :data:`bench.platforms.VARIANT` on the ideal memory,
   SDR, DDR3 and DDR3 with hot refresh, under ``build/calibration/`` (made once).
2. **Sweep** (``hwgen calibrate``): GEMMs, the bundled examples' kernels and random networks on
   each folder, and every candidate of the first random networks' GEMMs (alone and where the
   network's memory plan puts them: shaped like the held-out models' candidates), into
   ``build/calibration/profiles.db``. Resumable: a second ``make bench`` runs only what is
   missing.
3. **Held-out workloads**: the MLPerf Tiny models (``examples/real``, never in the sweep) run
   by ``hwgen run --db`` (fused and unfused) on each folder, and every candidate the engine
   prices for their GEMMs (``hwgen calibrate --candidates-of``), into a fresh
   ``build/calibration/heldout.db``.
4. **Train and score** (:func:`fusion.cost.heldout.heldout_report`, as ``hwgen train``): fitted
   on the sweep, scored on the held-out models, overall and per platform.
5. **Throughput**: the same small sweep (GEMMs on the ideal and DDR3 folders, fresh databases)
   on a local process pool and on a Dask ``LocalCluster``, with 1 and 2 workers.

Writes ``build/bench_calibration.json``. Run: ``python -m bench.calibration [--samples N]
[--networks N] [--network-candidates N] [--throughput-samples N] [--no-throughput]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.output import write_results
from bench.platforms import MODELS, PLATFORMS, VARIANT
from examples.real_check import REAL

ROOT = Path("build") / "calibration"
#: The held-out workloads: each MLPerf Tiny model's graph name as ``hwgen run --db`` records it.
HELD_OUT = ("model resnet8", "model ds_cnn", "model mobilenet_v1_025", "model fc_autoencoder",
            "model lenet5")


def _run(*argv: str) -> str:
    """The ``hwgen`` command with ``argv``, as a user runs it; its stdout, or exit on a
    failure (with its stderr)."""
    hwgen = Path(sys.executable).with_name("hwgen")
    done = subprocess.run([str(hwgen), *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"hwgen {' '.join(argv)} exited {done.returncode}: "
                         f"{done.stderr.strip()}")
    return done.stdout


def _current(folder: Path) -> bool:
    """The folder holds a variant this hwgen's gateware generated."""
    from hwgen.gateware.folder import open_variant

    try:
        open_variant(folder)
    except ValueError:
        return False
    return True


def folders() -> dict[str, str]:
    """The variant folder of each platform (generated again only when missing or made by
    other gateware)."""
    c = VARIANT
    out = {}
    for label, platform in PLATFORMS.items():
        folder = ROOT / f"v8-{label}"
        if not _current(folder):
            args = ["generate", "--rows", str(c.rows), "--cols", str(c.cols), "--epilogue",
                    ",".join(c.epilogue), "--port-bytes", str(c.port_bytes), "--mem-addr-bits",
                    str(c.mem_addr_bits), "-o", str(folder)]
            if platform.is_dram:
                args += ["--memory", platform.memory, "--refresh", platform.refresh]
            _run(*args)
        out[label] = str(folder)
    return out


def _calibrate(variants, db: Path, *extra: str) -> dict:
    argv = ["calibrate", *(a for v in variants for a in ("--variant", v)), "--db", str(db),
            "--quiet", "--json", *extra]
    return json.loads(_run(*argv).splitlines()[-1])


def sweep(variants: dict[str, str], samples: int, networks: int, candidates: int) -> dict:
    began = time.perf_counter()
    result = _calibrate(variants.values(), ROOT / "profiles.db", "--samples", str(samples),
                        "--networks", str(networks), "--network-candidates", str(candidates),
                        "--seed", "7", "--jobs", "2")
    result["wall_seconds"] = round(time.perf_counter() - began, 1)
    print(f"sweep: {result['runs']} runs ({result['skipped']} already there), "
          f"{result['runs_per_minute']:.0f} runs/min", flush=True)
    return result


def held_out(variants: dict[str, str]) -> dict:
    db = ROOT / "heldout.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    began = time.perf_counter()
    for folder in variants.values():
        for model in MODELS:
            for fusion in ((), ("--no-fusion",)):
                _run("run", str(REAL / f"{model}.onnx"), "--variant", folder, "--db", str(db),
                     "--shadow-inputs", "0", *fusion)
    runtime = time.perf_counter() - began
    candidates = _calibrate(variants.values(), db, "--samples", "0", "--no-models", "--seed",
                            "11", "--jobs", "2",
                            *(a for m in MODELS for a in ("--candidates-of",
                                                          str(REAL / f"{m}.onnx"))))
    print(f"held out: {len(variants) * len(MODELS) * 2} model runs in {runtime:.0f} s; "
          f"{candidates['runs']} candidate runs in {candidates['seconds']:.0f} s", flush=True)
    return {"model_runs_seconds": round(runtime, 1), "candidates": candidates}


def train_and_score() -> dict:
    from fusion.cost.heldout import heldout_report, render
    from fusion.cost.learned_store import save
    from fusion.cost.profiles import ProfileDB

    with ProfileDB(ROOT / "profiles.db") as a, ProfileDB(ROOT / "heldout.db") as b:
        rows = a.rows() + b.rows()
    began = time.perf_counter()
    model, report = heldout_report(rows, HELD_OUT, seed=0)
    report["train_seconds"] = round(time.perf_counter() - began, 1)
    save(model, ROOT / "model")
    print(render(report, ROOT / "model"), flush=True)
    return report


def throughput(variants: dict[str, str], samples: int) -> dict:
    """Runs a minute of one small sweep (GEMMs on the ideal and DDR3 folders) per executor."""
    from distributed import LocalCluster

    pair = [variants["ideal"], variants["ddr3"]]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            r = _calibrate(pair, Path(tmp) / f"pool{workers}.db", "--samples", str(samples),
                           "--no-models", "--seed", "5", "--jobs", str(workers))
            out[f"pool_{workers}"] = r
            print(f"throughput: process pool, {workers} worker(s): {r['runs']} runs, "
                  f"{r['runs_per_minute']:.0f} runs/min", flush=True)
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster:
                r = _calibrate(pair, Path(tmp) / f"dask{workers}.db", "--samples",
                               str(samples), "--no-models", "--seed", "5", "--scheduler",
                               cluster.scheduler_address)
            out[f"dask_{workers}"] = r
            print(f"throughput: Dask LocalCluster, {workers} worker(s): {r['runs']} runs, "
                  f"{r['runs_per_minute']:.0f} runs/min", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=260, help="GEMMs per folder (default 260)")
    p.add_argument("--networks", type=int, default=30,
                   help="random networks per folder (default 30)")
    p.add_argument("--network-candidates", dest="network_candidates", type=int, default=60,
                   help="random networks whose GEMMs' candidates are swept too (default 60)")
    p.add_argument("--throughput-samples", dest="throughput_samples", type=int, default=96,
                   help="GEMMs per folder of the throughput sweep (default 96)")
    p.add_argument("--no-throughput", dest="throughput", action="store_false")
    args = p.parse_args(argv)
    ROOT.mkdir(parents=True, exist_ok=True)
    variants = folders()
    results = {"variant": VARIANT.to_dict(), "folders": variants,
               "sweep": sweep(variants, args.samples, args.networks, args.network_candidates),
               "held_out": held_out(variants), "report": train_and_score()}
    if args.throughput:
        results["throughput"] = throughput(variants, args.throughput_samples)
    write_results("bench_calibration.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
