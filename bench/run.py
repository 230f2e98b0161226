"""``make bench``: the performance figures, measured on Verilator (then the example and real
models, ``hwgen inspect``'s time on long Q/DQ chains: :mod:`bench.inspect_speed`, the 8x8
variant on each board memory: :mod:`bench.platforms`, the learned cost model:
:mod:`bench.calibration`, the feedback loop under drift: :mod:`bench.drift`, a variant
library's ECP5 synthesis figures: :mod:`bench.variant_library`, and the reconfiguration
manager on a mixed MLPerf Tiny workload: :mod:`bench.reconfig`).

Prints one line per figure and writes them all to ``build/bench.json``. Every GEMM is also
checked bit for bit; the benchmark fails if any is wrong.
"""

from __future__ import annotations

import sys
import time

from bench.output import write_results
from bench.sim_speed import measure
from hwgen.config import VariantConfig
from hwgen.gateware.emit import accelerator_verilog
from sim.gemm_check import GemmCase, run_gemms
from sim.run import MemoryImage

V8 = VariantConfig(rows=8, cols=8, epilogue=("bias", "requant", "relu"))
CHAIN = V8.epilogue


def gemm_figures() -> dict:
    cases = [
        GemmCase(256, 256, 256),
        GemmCase(256, 256, 256, stages=CHAIN),
        GemmCase(256, 64, 256, stages=CHAIN),
        GemmCase(256, 64, 256, stages=CHAIN, fused=False),
    ]
    plain, fused, fused64, unfused64 = run_gemms(V8, cases)
    for r in (plain, fused, fused64, unfused64):
        if not r.ok:
            raise SystemExit(f"benchmark GEMM was not bit-exact: {r.summary()}")
    return {
        "gemm_256_plain": plain.to_dict(),
        "gemm_256_fused": fused.to_dict(),
        "utilization_256": round(plain.utilization, 4),
        "fused_over_plain_cycles": round(fused.cycles / plain.cycles, 4),
        "gemm_256x64x256_fused": fused64.to_dict(),
        "gemm_256x64x256_unfused": unfused64.to_dict(),
        "unfused_over_fused_cycles_k64": round(unfused64.cycles / fused64.cycles, 3),
    }


def sim_speed_figures() -> dict:
    case = GemmCase(256, 256, 256)
    kernel = case.kernel(V8)
    memory = MemoryImage(writes=tuple(case.memory(kernel)), reads=kernel.reads)
    return measure(V8, kernel.program, memory)


def generation_figures() -> dict:
    out = {}
    for n in (4, 8, 16):
        config = VariantConfig(rows=n, cols=n, epilogue=CHAIN)
        began = time.perf_counter()
        accelerator_verilog(config)
        out[f"{n}x{n}"] = round(time.perf_counter() - began, 2)
    return out


def main() -> int:
    results: dict = {"variant_8x8": V8.to_dict()}
    print("Verilog generation (s):", end=" ", flush=True)
    results["verilog_seconds"] = generation_figures()
    print(results["verilog_seconds"])
    print("Simulation speed, 8x8, GEMM 256^3 ...", flush=True)
    speed = sim_speed_figures()
    results["sim_speed"] = speed
    for harness in ("cxx_driver", "cocotb"):
        run = speed[harness]
        print(f"  {harness}: build {run['build_seconds']} s (cached {run['cached_build_seconds']}"
              f" s), {run['cycles_per_second']:,} cycles/s, launch {run['launch_seconds']} s")
    print(f"  cocotb / C++ driver (the limit): {speed['cocotb_over_driver']} (same cycles: "
          f"{speed['same_cycles']}, same outputs: {speed['same_outputs']})")
    print("GEMMs on the 8x8 variant ...", flush=True)
    results.update(gemm_figures())
    print(f"  256^3 utilization {results['utilization_256']} (target >= 0.85)")
    print(f"  fused bias+requant+relu / plain cycles {results['fused_over_plain_cycles']} "
          f"(target <= 1.05)")
    print(f"  M=N=256, K=64: unfused/fused cycles {results['unfused_over_fused_cycles_k64']}")
    write_results("bench.json", results)
    from bench import (
        calibration,
        dram_model,
        drift,
        inspect_speed,
        models,
        platforms,
        real_models,
        reconfig,
        sparse_models,
        variant_library,
        zoo_models,
    )

    return (models.main() or inspect_speed.main([]) or real_models.main()
            or zoo_models.main([]) or sparse_models.main([]) or platforms.main([])
            or dram_model.main([]) or calibration.main([])
            or drift.main(["--learned", str(calibration.ROOT / "model"),
                           "--model-threshold", "0.08", "--passes", "10"])
            or variant_library.main([]) or reconfig.main([]))


if __name__ == "__main__":
    sys.exit(main())
