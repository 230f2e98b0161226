"""How far the analytical model is from DRAM cycles (issue 12, item 5): its MAPE per platform.

``python -m bench.dram_model [--kernels N] [--seed S]``: one set of GEMM kernels (log-uniform
M, K, N from 1 to 512 including odd sizes; no epilogue, fused or unfused
bias+requant+relu; the default tiling or another of the tiler's candidates, streamed B
among them) on one 8x8 variant with a 16-byte port, run on the ideal memory, SDR, DDR3 and
DDR3 with hot refresh, every platform's kernels in one simulator launch. Every run is
checked bit for bit. For each kernel the analytical model predicts the cycles on that
platform (:class:`fusion.cost.analytical.AnalyticalModel`, whose DRAM terms are
:mod:`fusion.cost.memory`'s); the table gives the mean absolute percentage error, the
median and the largest, and the mean signed error, against the measured ``cycles``
counter. Nothing in the model was fitted to these kernels: its constants are the ports'
characterized figures (:data:`hwgen.platform.PORT_FIGURES`).

Writes ``build/bench_dram_model.json`` (per platform the figures and every kernel's
measured and predicted cycles).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from bench.output import write_results
from fusion.cost.analytical import AnalyticalModel
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import ranked_tilings, stream_tilings
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from sim.build import build_variant
from sim.gemm_check import GemmCase, run_gemms

CHAIN = ("bias", "requant", "relu")
#: The variant: 8x8, a 16-byte port (DDR3's controller word), 2 MiB of memory (the SDR
#: part's limit at this port width).
VARIANT = VariantConfig(rows=8, cols=8, port_bytes=16, mem_addr_bits=21, epilogue=CHAIN)
PLATFORMS: dict[str, PlatformConfig] = {
    "ideal": PlatformConfig(),
    "sdr": PlatformConfig(memory="sdr"),
    "ddr3": PlatformConfig(memory="ddr3"),
    "ddr3-hot": PlatformConfig(memory="ddr3", refresh="hot"),
}
#: Largest M*K*N drawn (keeps a kernel under ~0.2 M cycles on the 8x8 array).
MAX_MACS = 8 * 1024 * 1024


def _log_uniform(rng: np.random.Generator, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def cases(n: int, seed: int) -> list[GemmCase]:
    """``n`` seeded GEMM cases of varied shape, epilogue and tiling."""
    rng = np.random.default_rng(seed)
    out: list[GemmCase] = []
    while len(out) < n:
        M, K, N = (_log_uniform(rng, 1, 512) for _ in range(3))  # noqa: N806
        if M * K * N > MAX_MACS:
            continue
        kind = rng.integers(3)
        stages, fused = ((), True) if kind == 0 else (CHAIN, bool(kind == 1))
        dims = GemmDims(VARIANT, M, K, N)
        gemm_stages = stages if fused else ()
        candidates = [None] + list(ranked_tilings(dims, gemm_stages))[:4] + stream_tilings(
            dims, gemm_stages)
        tiling = candidates[int(rng.integers(len(candidates)))]
        case = GemmCase(M, K, N, stages=stages, fused=fused, tiling=tiling,
                        seed=int(rng.integers(1 << 30)))
        try:
            case.kernel(VARIANT)
        except ValueError:  # does not fit the 2 MiB memory: draw again
            continue
        out.append(case)
    return out


def errors(measured: list[int], predicted: list[int]) -> dict:
    """MAPE, median and largest absolute percentage error, and the mean signed error (%)."""
    m, p = np.array(measured, float), np.array(predicted, float)
    rel = (p - m) / m * 100
    return {"kernels": len(m), "mape": round(float(np.mean(np.abs(rel))), 2),
            "median_ape": round(float(np.median(np.abs(rel))), 2),
            "max_ape": round(float(np.max(np.abs(rel))), 2),
            "mean_signed": round(float(np.mean(rel)), 2),
            "measured_cycles": int(m.sum()), "predicted_cycles": int(p.sum())}


def run_platform(name: str, platform: PlatformConfig, batch: list[GemmCase]) -> dict:
    began = time.perf_counter()
    build = build_variant(VARIANT, platform=platform)
    reports = run_gemms(VARIANT, batch, build=build)
    bad = [r.summary() for r in reports if not r.ok]
    if bad:
        raise SystemExit(f"{name}: {len(bad)} GEMM(s) not bit-exact, first: {bad[0]}")
    model = AnalyticalModel(platform)
    ideal = AnalyticalModel()
    rows = []
    for case, r in zip(batch, reports, strict=True):
        f = GemmFeatures.from_kernel(case.kernel(VARIANT))
        rows.append({"m": case.M, "k": case.K, "n": case.N, "stages": list(case.stages),
                     "fused": case.fused, "tiling": str(f.tiling), "measured": r.cycles,
                     "predicted": int(model.predict(f)),
                     "ideal_predicted": int(ideal.predict(f))})
    out = {"platform": platform.to_dict(), "wall_seconds": round(time.perf_counter() - began, 1),
           **errors([r["measured"] for r in rows], [r["predicted"] for r in rows]),
           "ideal_model": errors([r["measured"] for r in rows],
                                 [r["ideal_predicted"] for r in rows]),
           "kernels_detail": rows}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dram_model", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--kernels", type=int, default=120)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--platforms", default=",".join(PLATFORMS),
                    help=f"comma-separated subset of {', '.join(PLATFORMS)}")
    args = ap.parse_args(argv)
    names = args.platforms.split(",")
    unknown = [n for n in names if n not in PLATFORMS]
    if unknown:
        ap.error(f"unknown platform(s) {unknown}; choose from {', '.join(PLATFORMS)}")
    batch = cases(args.kernels, args.seed)
    print(f"Analytical model vs measured cycles: {len(batch)} GEMM kernels (seed {args.seed}) "
          f"on 8x8, 16-byte port", flush=True)
    print(f"  {'platform':<9} {'MAPE %':>7} {'median %':>8} {'max %':>7} {'signed %':>8} "
          f"{'ideal-model MAPE %':>18} {'wall s':>6}", flush=True)
    results = {"variant": VARIANT.to_dict(), "seed": args.seed, "platforms": {}}
    for name in names:
        r = run_platform(name, PLATFORMS[name], batch)
        results["platforms"][name] = r
        print(f"  {name:<9} {r['mape']:>7.2f} {r['median_ape']:>8.2f} {r['max_ape']:>7.2f} "
              f"{r['mean_signed']:>8.2f} {r['ideal_model']['mape']:>18.2f} "
              f"{r['wall_seconds']:>6.1f}", flush=True)
    write_results("bench_dram_model.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
