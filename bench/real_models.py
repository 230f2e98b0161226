"""The MLPerf Tiny-style models end to end (issue 11's figures): cycles, utilization, wall time.

Each bundled model of ``examples/real`` (the QDQ forms; see ``examples/build_real_models.py``)
is compiled for the 8x8 all-stage variant and run on the simulator, every kernel
shadow-checked, and its output compared with the exact reference's output bundled beside it
(the 1-LSB bound of ``examples/real_check.py``; a model outside it is reported, and the
benchmark exits 1). The FC autoencoder also runs at batch 32 (32 seeded inputs, each compared
with the exact reference, ``examples/exact_reference.py``, run on it alone), and its batch-1
run is measured against its weight-bandwidth
roofline (weight bytes / port bytes per cycle), the fair limit of a chain of GEMVs.

Per model: kernels, layout host steps, host ops, kernel cycles, the MACs the model asks for,
utilization of MACs / (rows * cols), the latency in us and inferences per second at the
platform's clock (``time``: this variant has no routed Fmax, it fits no ECP5 yet), the model's
cycles per wall second of ``run_compiled``,
wall seconds, the simulator launch's share of them and its own speed (every job it simulated,
the directed shadow sets included, per second of the launch), and the
activation bytes the host wrote into the accelerator's memory (the model's input, and what
host steps made: every host step is data the accelerator did not move itself). Host steps run
in numpy and are in no cycle count.

Then the same models without each technique of issue 11 (``CompileOptions``): the window
convolution (windows gathered by the accelerator; without it the host's im2col), K-major
stores (outputs stored as the next kernel reads them; without, the host repacks them),
grouped GEMMs (depthwise convolutions; without, dense block-diagonal GEMMs) and the window
unit (depthwise convolutions and max pools; without, grouped GEMMs of host-gathered windows
and max passes), and without all four: the gain of each, in cycles, utilization, host steps
and host-written bytes.

``python -m bench.real_models`` prints them and writes ``build/bench_real_models.json``;
``make bench`` runs it last.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from bench.output import verdict, write_results
from examples.build_real_models import sample_input
from examples.real_check import REAL, lsb_errors, output_scale, within_one_lsb
from fusion.compiler.data_hints import ZeroHints
from fusion.compiler.options import DEFAULT, CompileOptions
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.runtime.clock import Clock
from fusion.runtime.run import run_compiled
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from hwgen.presets import ALL_STAGES

#: With the window unit, so that the table shows what it brings (``--without window_unit``).
VARIANT = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24, window_unit=True)
#: The clock the figures' time is at: the ideal platform's, since this variant has no routed
#: Fmax (it fits no ECP5 yet: docs/variants.md); ``hwgen run`` on a built folder gives both.
CLOCK = Clock(platform_hz=PlatformConfig().clock_hz)
#: (bundled model, batch): the QDQ form of each network, and the autoencoder batched.
RUNS = (("resnet8_qdq", 1), ("ds_cnn_qdq", 1), ("mobilenet_v1_025_qdq", 1),
        ("fc_autoencoder_qdq", 1), ("fc_autoencoder_qdq", 32), ("lenet5_qdq", 1))


def _inputs(name: str, batch: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The model's input, and the reference output to compare with (None: computed here)."""
    if batch == 1:
        with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
            return data["x"], data["y"]
    base = name.rsplit("_", 1)[0]
    return np.concatenate([sample_input(base, 2000 + i) for i in range(batch)]), None


def _reference(path: Path, x: np.ndarray) -> np.ndarray:
    """The exact reference on each input alone, the outputs stacked."""
    from examples.exact_reference import reference_session

    session = reference_session(path)
    return np.concatenate([session.run(["y"], {"x": x[i:i + 1]})[0] for i in range(len(x))])


#: The with-and-without table: each technique off alone, then all of them.
WITHOUT = ("window_conv", "kmajor_store", "grouped_gemm", "window_unit", "relayout",
           "window_conv,kmajor_store,grouped_gemm,window_unit,relayout")
#: The models of the table (batch 1).
ABLATED = ("resnet8_qdq", "ds_cnn_qdq", "mobilenet_v1_025_qdq", "lenet5_qdq",
           "fc_autoencoder_qdq")


def run_one(name: str, batch: int, options: CompileOptions = DEFAULT) -> dict:
    x, want = _inputs(name, batch)
    return measure(REAL / f"{name}.onnx", x, want, batch, options)


def measure(path: Path, x: np.ndarray, want: np.ndarray | None, batch: int = 1,
            options: CompileOptions = DEFAULT, variant: VariantConfig = VARIANT,
            knows_input: bool = False) -> dict:
    """Compile ``path`` for ``variant`` (``knows_input``: knowing ``x``, as ``hwgen run
    --input`` does: :mod:`fusion.compiler.data_hints`), run it on ``x`` (every kernel
    shadow-checked) and compare its output with ``want`` (None: the exact reference's,
    computed here)."""
    began = time.perf_counter()
    compiled = compile_model(load_model(path, batch=batch), variant, batch=batch,
                             options=options,
                             data=ZeroHints.of({"x": x}) if knows_input else None)
    compile_seconds = time.perf_counter() - began
    began = time.perf_counter()
    report = run_compiled(compiled, {"x": x})
    wall = time.perf_counter() - began
    if want is None:
        want = _reference(path, x)
    got = report.outputs["y"]
    ok, figures = within_one_lsb(lsb_errors(got, want, output_scale(onnx.load(str(path)), "y")),
                                 "vs the exact reference", integer=want.dtype.kind in "iu")
    layout = [h for h in report.host if h.role == "layout"]
    return {
        "model": path.stem, "batch": batch, "options": options.label,
        "kernels": len(report.kernels),
        # GEMMs that run the block-sparse program (pruned weights, fusion.kernels.gemm.sparse)
        "sparse_kernels": sum(bool(getattr(s.spec.params, "sparse", False))
                              for s in compiled.steps if hasattr(s, "spec")),
        # GEMMs that run the zero-skipping program (fusion.kernels.gemm.skip), and the tiles
        # they jumped over
        "skip_kernels": sum(bool(getattr(s.spec.params, "skip", False))
                            for s in compiled.steps if hasattr(s, "spec")),
        "tiles_skipped": sum(k.counters.get("tiles_skipped", 0) for k in report.kernels),
        "layout_host_steps": len(layout), "repacks": len(compiled.repacks),
        "host_ops": len(report.host_ops),
        "host_ops_by_op": dict(sorted(Counter(h.op for h in report.host_ops).items())),
        "host_written_bytes": report.host_written_bytes,
        "cycles": report.total_cycles, "macs": report.total_macs,
        # the host steps' and repacks' time in accelerator cycles (the host cost model's, at
        # its clock: what the engine weighed against the kernels), beside the kernels'
        # measured cycles
        "host_cycles": round(compiled.predicted_host_cycles),
        "ideal_cycles": report.ideal_cycles, "utilization": round(report.utilization, 4),
        "bound_utilization": round(report.bound_utilization, 4),
        "roofline_fraction": round(report.roofline_fraction, 4),
        "inferences_per_mcycle": round(report.inferences_per_mcycle, 2),
        "time": CLOCK.figures(report.total_cycles, batch),
        "compile_seconds": round(compile_seconds, 2),
        "wall_seconds": round(wall, 2),
        "cycles_per_wall_second": round(report.total_cycles / wall),
        # the one simulator launch: its share of the run, and its own speed (the directed
        # shadow sets included)
        "sim_share": round(report.sim_seconds / wall, 2),
        "simulated_cycles_per_second": round(report.simulated_cycles / report.sim_seconds),
        "reference": figures, "within_bound": ok, "output": got,
    }


def main() -> int:
    rows = []
    print(f"Real models on {VARIANT.rows}x{VARIANT.cols}, all stages (every kernel "
          f"shadow-checked, outputs against the exact reference) ...", flush=True)
    print(f"  {'model':<22} {'batch':>5} {'kernels':>7} {'cycles':>10} {'util':>5} "
          f"{'roofline':>8} {'inf/Mcyc':>9} {'us':>9} {'inf/s':>8} {'wall s':>7} "
          f"{'cyc/s':>8} {'sim':>4} "
          f"{'sim cyc/s':>9}  vs the exact reference")
    for name, batch in RUNS:
        row = run_one(name, batch)
        rows.append(row)
        print(f"  {name:<22} {batch:>5} {row['kernels']:>7} {row['cycles']:>10,} "
              f"{row['utilization']:>5.2f} {row['roofline_fraction']:>8.2f} "
              f"{row['inferences_per_mcycle']:>9.1f} {row['time']['latency_us']:>9,.1f} "
              f"{row['time']['inferences_per_second']:>8,.0f} {row['wall_seconds']:>7.1f} "
              f"{row['cycles_per_wall_second']:>8,} {row['sim_share']:>4.0%} "
              f"{row['simulated_cycles_per_second']:>9,}  {row['reference']}", flush=True)
    print("With and without each technique (batch 1; util = MACs/64 over kernel cycles):",
          flush=True)
    print(f"  {'model':<22} {'compiled':<48} {'cycles':>9} {'util':>5} {'host steps':>10} "
          f"{'repacks':>7} {'host cyc':>8} {'host bytes':>10}")
    ablation = []
    for name in ABLATED:
        base = next(r for r in rows if r["model"] == name and r["batch"] == 1)
        for row in [base] + [run_one(name, 1, CompileOptions.without(w)) for w in WITHOUT]:
            ablation.append(row)
            print(f"  {name:<22} {row['options']:<48} {row['cycles']:>9,} "
                  f"{row['utilization']:>5.2f} {row['layout_host_steps']:>10} "
                  f"{row['repacks']:>7} {row['host_cycles']:>8,} "
                  f"{row['host_written_bytes']:>10,}", flush=True)
    rows_out = rows + [r for r in ablation if r["options"] != "all"]
    write_results("bench_real_models.json",
                  {"variant": VARIANT.to_dict(), "runs": _json(rows), "ablation": _json(ablation)})
    return verdict([r["model"] for r in rows_out if not r["within_bound"]])


def _json(rows: list[dict]) -> list[dict]:
    """The rows without their output arrays."""
    return [{k: v for k, v in r.items() if k != "output"} for r in rows]


if __name__ == "__main__":
    sys.exit(main())
