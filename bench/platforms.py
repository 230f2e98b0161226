"""The 8x8 variant on each board memory: GEMM 256^3 and the MLPerf Tiny models on the ideal
memory, SDR and DDR3 (normal and hot refresh), on Verilator.

One variant for all four (the same bitstream): 8x8, every epilogue stage, a 16-byte port (the
DDR3 controller's word) and a 21-bit word address (SDR's 32 MB). It has no window unit, which
needs a port as wide as the array's rows (``docs/memory.md``). Per platform and workload:
cycles, utilization, memory-stall cycles, the memory counters, the energy estimate, and the
simulator's speed. Every GEMM is checked bit for bit, every model kernel shadow-checked
against the reference executor, and each model's output must be the same on every platform
(the first's); the figures against the bundled exact reference output are printed too. Exit
status 1 if an output differs. Writes ``build/bench_platforms.json``.

Run: ``python -m bench.platforms [--models NAME,...]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnx

from bench.output import write_results
from examples.real_check import REAL, lsb_errors, output_scale, within_one_lsb
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from fusion.runtime.run import run_compiled
from hwgen.config import VariantConfig
from hwgen.energy import estimate
from hwgen.perf import memory_summary
from hwgen.platform import PlatformConfig
from hwgen.presets import ALL_STAGES
from sim.build import build_variant
from sim.gemm_check import GemmCase, run_gemms

VARIANT = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, port_bytes=16, mem_addr_bits=21)
PLATFORMS = {
    "ideal": PlatformConfig(),
    "sdr": PlatformConfig(memory="sdr"),
    "ddr3": PlatformConfig(memory="ddr3"),
    "ddr3_hot": PlatformConfig(memory="ddr3", refresh="hot"),
}
MODELS = ("resnet8_qdq", "ds_cnn_qdq", "mobilenet_v1_025_qdq", "fc_autoencoder_qdq",
          "lenet5_qdq")


def _gemm(build) -> dict:
    (report,) = run_gemms(VARIANT, [GemmCase(256, 256, 256)], build=build)
    if not report.ok:
        raise SystemExit(f"benchmark GEMM was not bit-exact on {build.platform.memory}: "
                         f"{report.summary()}")
    d = report.to_dict()
    return {"cycles": d["cycles"], "utilization": d["utilization"],
            "stall_memory": d["stall_memory"], "memory": d["memory"],
            "energy_nj": d["energy_nj"], "sim_cycles_per_s": d["sim_cycles_per_s"]}


def _model(name: str, build) -> tuple[dict, np.ndarray]:
    path = REAL / f"{name}.onnx"
    with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
        x, want = data["x"], data["y"]
    compiled = compile_model(load_model(path), VARIANT, cache=KernelCache(disk=False))
    report = run_compiled(compiled, {"x": x}, build=build)
    # the figures only (the bound is tests/fusion/test_real_models.py's); here the outputs
    # must be the ideal memory's
    _, figures = within_one_lsb(lsb_errors(report.outputs["y"], want,
                                           output_scale(onnx.load(str(path)), "y")),
                                "vs the exact reference", integer=want.dtype.kind in "iu")
    counters = {}
    for k in report.kernels:
        for key, value in k.counters.items():
            counters[key] = counters.get(key, 0) + value
    memory = memory_summary(counters, VARIANT.port_bytes)
    memory["read_latency_max"] = max(k.counters["read_latency_max"] for k in report.kernels)
    return {
        "cycles": report.total_cycles, "utilization": round(report.utilization, 4),
        "stall_memory": counters["stall_memory"], "memory": memory,
        "energy_nj": estimate(counters, VARIANT, build.platform).to_dict()["energy_nj"],
        "kernels": len(report.kernels),
        "sim_cycles_per_s": round(report.simulated_cycles / report.sim_seconds),
        "reference": figures,
    }, report.outputs["y"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--platforms", default=",".join(PLATFORMS))
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    results: dict = {"variant": VARIANT.to_dict(), "platforms": {}}
    failed = False
    outputs: dict[str, np.ndarray] = {}  # the first platform's, which every other must equal
    for label in args.platforms.split(","):
        platform = PLATFORMS[label]
        began = time.perf_counter()
        build = build_variant(VARIANT, platform=platform)
        entry = {"platform": platform.to_dict(), "build_seconds": round(build.build_seconds, 1),
                 "cached": build.cached}
        print(f"{label}: build {build.build_seconds:.0f} s{' (cached)' if build.cached else ''}",
              flush=True)
        entry["gemm_256"] = g = _gemm(build)
        print(f"  gemm 256^3: {g['cycles']:,} cycles, utilization {g['utilization']}, memory "
              f"stalls {g['stall_memory']:,}, {g['energy_nj']:,.0f} nJ, "
              f"{g['sim_cycles_per_s']:,} cycles/s", flush=True)
        for name in models:
            r, y = _model(name, build)
            entry[name] = r
            r["same_as_ideal"] = bool(np.array_equal(outputs.setdefault(name, y), y))
            failed |= not r["same_as_ideal"]
            print(f"  {name}: {r['cycles']:,} cycles, utilization {r['utilization']}, memory "
                  f"stalls {r['stall_memory']:,}, refresh {r['memory']['refresh_stall']:,}, "
                  f"activates {r['memory']['row_activates']:,}, {r['energy_nj']:,.0f} nJ, "
                  f"{r['sim_cycles_per_s']:,} cycles/s; {r['reference']}", flush=True)
        entry["seconds"] = round(time.perf_counter() - began, 1)
        results["platforms"][label] = entry
    ideal = results["platforms"].get("ideal")
    if ideal:
        for entry in results["platforms"].values():
            entry["sim_speed_vs_ideal"] = round(
                entry["gemm_256"]["sim_cycles_per_s"] / ideal["gemm_256"]["sim_cycles_per_s"], 3)
    write_results("bench_platforms.json", results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
