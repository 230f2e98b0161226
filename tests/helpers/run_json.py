"""Small, schema-correct run JSONs for ``hwgen report``'s tests: a workload run (the
``hwgen-workload-run`` format, version 1) on two variants with one swap, and a single-model
run (:meth:`fusion.runtime.run.RunReport.to_dict`'s keys). The figures are made up but
consistent: a model run's cycles are its kernels', the totals add up."""

from __future__ import annotations

import copy
from typing import Any

_VARIANTS = {
    "v4x4": {"rows": 4, "cols": 4, "port_bytes": 4, "reconfig_cycles": 30_000,
             "resources": {"lut": 1500, "ff": 1200, "dsp": 16, "bram": 4},
             "part": "LFE5U-25F", "fmax_mhz": 101.2},
    "v8x8": {"rows": 8, "cols": 8, "port_bytes": 8, "reconfig_cycles": 60_000,
             "resources": {"lut": 5200, "ff": 4100, "dsp": 64, "bram": 10},
             "part": "LFE5U-45F", "fmax_mhz": 84.5},
}
#: model -> its kernels (name, ops, MACs, bytes read), and the variant each phase runs on.
_MODELS = {
    "ds_cnn": [("k0", ["Conv_0", "Relu_1"], 40_000, 6_000), ("k1", ["Conv_2"], 20_000, 9_000),
               ("k2", ["Gemm_3"], 3_000, 3_100)],
    "autoenc": [("k0", ["Gemm_0", "Relu_1"], 64_000, 40_000),
                ("k1", ["Gemm_2"], 64_000, 36_000)],
}
_PHASES = [("ds_cnn", "v4x4", 2), ("autoenc", "v8x8", 1), ("ds_cnn", "v4x4", 1)]


def _kernels(model: str, variant: str) -> list[dict[str, Any]]:
    v = _VARIANTS[variant]
    peak = v["rows"] * v["cols"]
    out = []
    for name, ops, macs, read in _MODELS[model]:
        ideal = -(-macs // peak)
        cycles = max(ideal, read // v["port_bytes"]) + 200  # the port or the array, plus setup
        out.append({"name": name, "ops": ops, "cycles": cycles,
                    "predicted_cycles": round(cycles * (1.08 if name == "k1" else 0.95)),
                    "macs": macs, "ideal_cycles": ideal,
                    "utilization": round(ideal / cycles, 4), "bytes_read": read,
                    "bytes_written": read // 4})
    return out


def workload_run() -> dict[str, Any]:
    """A workload run: ds_cnn twice on v4x4, a swap, autoenc on v8x8, a swap, ds_cnn again."""
    timeline, cycle, swaps, swap_cycles, active = [], 0, 0, 0, None
    for phase, (model, variant, repeats) in enumerate(_PHASES):
        for repeat in range(repeats):
            swap = _VARIANTS[variant]["reconfig_cycles"] if variant != active else 0
            if active is None:
                swap = 0  # the first variant is loaded before the workload starts
            active = variant
            swaps, swap_cycles, cycle = swaps + bool(swap), swap_cycles + swap, cycle + swap
            kernels = _kernels(model, variant)
            run_cycles = sum(k["cycles"] for k in kernels)
            timeline.append({"phase": phase, "repeat": repeat, "model": model,
                             "variant": variant, "start_cycle": cycle, "swap_cycles": swap,
                             "cycles": run_cycles, "kernels": kernels})
            cycle += run_cycles
    fusion = {}
    for model, variant in (("ds_cnn", "v4x4"), ("autoenc", "v8x8")):
        fused = [{"name": k["name"], "cycles": k["cycles"]} for k in _kernels(model, variant)]
        unfused = []
        for k in fused:  # each fused kernel was an op kernel and a pass over its output
            unfused += [{"name": f"{k['name']}a", "cycles": k["cycles"]},
                        {"name": f"{k['name']}b", "cycles": k["cycles"] // 3}]
        fusion[model] = {"variant": variant, "fused": fused, "unfused": unfused,
                         "fused_cycles": sum(k["cycles"] for k in fused),
                         "unfused_cycles": sum(k["cycles"] for k in unfused)}
    kernel_cycles = cycle - swap_cycles
    return {"format": "hwgen-workload-run", "version": 1, "ok": True, "policy": "online",
            "total_cycles": cycle, "kernel_cycles": kernel_cycles, "swaps": swaps,
            "swap_cycles": swap_cycles,
            "static_cycles": {"v4x4": kernel_cycles + 9_000, "v8x8": None},
            "offline_optimal_cycles": cycle - 1_000,
            "variants": {name: {"key": f"{i:016x}", "epilogue": ["bias", "requant", "relu"],
                                "window_unit": False, **copy.deepcopy(v)}
                         for i, (name, v) in enumerate(_VARIANTS.items())},
            "timeline": timeline, "fusion": fusion}


def single_run() -> dict[str, Any]:
    """A single-model run's JSON (``hwgen run MODEL --variant DIR --json``), trimmed to the
    keys the report reads and a few it ignores."""
    kernels = []
    for k in _kernels("ds_cnn", "v4x4"):
        kernels.append({"name": k["name"], "ops": k["ops"], "cycles": k["cycles"],
                        "predicted_cycles": k["predicted_cycles"], "describe": "gemm",
                        "macs": k["macs"], "ideal_cycles": k["ideal_cycles"],
                        "utilization": k["utilization"],
                        "counters": {"cycles": k["cycles"], "bytes_read": k["bytes_read"],
                                     "bytes_written": k["bytes_written"]},
                        "memory": {}})
    return {"ok": True, "total_cycles": sum(k["cycles"] for k in kernels), "kernels": kernels,
            "fusion": True, "model": "ds_cnn", "variant": "0123456789abcdef", "batch": 1}
