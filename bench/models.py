"""Model-level figures (issue 4): compile time cold vs warm, fused vs unfused cycles, and the
analytical model's error per kernel.

``python -m bench.models`` prints them and writes ``build/bench_models.json``; ``make bench``
runs it after the GEMM figures. Every kernel run is shadow-checked bit for bit.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.output import write_results
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.ir.synthetic import mlp
from fusion.kernels.cache import KernelCache
from fusion.runtime.compare import compare, render
from hwgen.config import VariantConfig

VARIANT = VariantConfig(rows=8, cols=8, epilogue=("bias", "requant", "relu", "clamp",
                                                  "residual"))
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MODELS = ("qop_mlp", "qdq_mlp_residual", "qdq_cnn")


def compile_times(graph, repeats: int = 3) -> dict:
    """Cold (empty cache folder), warm from disk (new process-like cache object on the same
    folder) and warm from memory (the same cache object), best of ``repeats`` each."""
    cold, disk, memory = [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as root:
            cache = KernelCache(root)
            began = time.perf_counter()
            first = compile_model(graph, VARIANT, cache=cache)
            cold.append(time.perf_counter() - began)
            began = time.perf_counter()
            compile_model(graph, VARIANT, cache=cache)
            memory.append(time.perf_counter() - began)
            began = time.perf_counter()
            again = compile_model(graph, VARIANT, cache=KernelCache(root))
            disk.append(time.perf_counter() - began)
    return {"kernels": len(first.kernels), "cold_seconds": round(min(cold), 3),
            "warm_disk_seconds": round(min(disk), 3), "warm_memory_seconds": round(min(memory), 3),
            "cold_misses": first.cache_stats["misses"],
            "warm_disk_hits": again.cache_stats["disk_hits"]}


def main() -> int:
    results: dict = {"variant": VARIANT.to_dict()}
    graph = mlp(layers=20, width=128, batch=32)
    print("Compile, 20-layer MLP (32x128 activations, 128x128 weights) ...", flush=True)
    results["compile_mlp20"] = times = compile_times(graph)
    print(f"  {times['kernels']} kernels: cold {times['cold_seconds']} s, warm from disk "
          f"{times['warm_disk_seconds']} s, warm from memory {times['warm_memory_seconds']} s")
    kernels = []
    cache = KernelCache(tempfile.mkdtemp(prefix="hwgen-bench-cache-"))
    models = {name: load_model(EXAMPLES / f"{name}.onnx") for name in MODELS}
    models["mlp20"] = graph
    results["models"] = {}
    for name, g in models.items():
        c = compare(name, g, VARIANT, cache=cache)
        print(render(c), flush=True)
        results["models"][name] = c.to_dict()
        for fusion, report in ((True, c.fused), (False, c.unfused)):
            kernels += [{"model": name, "fused": fusion, **k.to_dict()} for k in report.kernels]
    err = np.array([abs(k["predicted_cycles"] - k["cycles"]) / k["cycles"] for k in kernels])
    worst = kernels[int(np.argmax(err))]
    results["analytical_model"] = {
        "kernels": len(kernels), "mape": round(float(err.mean()), 4),
        "max_ape": round(float(err.max()), 4),
        "worst": {"model": worst["model"], "name": worst["name"], "cycles": worst["cycles"],
                  "predicted": worst["predicted_cycles"]},
        "per_kernel": [{k: v for k, v in row.items() if k != "counters"} for row in kernels],
    }
    print(f"Analytical model over {len(kernels)} kernels: MAPE {100 * err.mean():.2f}%, worst "
          f"{100 * err.max():.2f}% ({worst['model']} {worst['name']}: {worst['cycles']} "
          f"measured, {worst['predicted_cycles']} predicted)")
    write_results("bench_models.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
