"""Weight and activation sparsity (issue 33): block-pruned models, dense against specialized,
and the dense MLP on a padded batch, zero-skipping against dense, on Verilator.

Each model of :mod:`examples.build_pruned_models` (the 256-256-256-64 MLP at batch 32, the FC
autoencoder at batch 1 and 32, ResNet-8), pruned at 0, 50, 75 and 90% of its weight blocks
and quantized by onnxruntime, is compiled for the 8x8 all-stage variant twice: with every GEMM
dense (``--without sparse_weights``) and as the compiler chooses (the block-sparse program
where it is predicted faster, :mod:`fusion.kernels.gemm.sparse`). Both run on the simulator,
every kernel shadow-checked, and their outputs are compared with the exact reference
(:mod:`examples.exact_reference`, each input alone): the benchmark exits 1 when an output is
outside 1 LSB of it.

Per model and share pruned: the kernel cycles dense and specialized (measured) and their
ratio, the kernels that run block-sparse, the host cycles (the input's quantize and the
output's dequantize, the same in both), and the distance to the exact reference.

Activation sparsity: the unpruned MLP at batch 32 on a random input, and on the same input
with rows 8 to 31 zero (a batch of 8 padded to 32), compiled knowing its input (the
zero-skipping program where its A tiles are zero, :mod:`fusion.kernels.gemm.skip`) and not
(``--without zero_skip``).

``python -m bench.sparse_models [MODEL ...]`` prints them and writes
``build/bench_sparse_models.json``; ``make bench`` runs it.
"""

from __future__ import annotations

import sys

import numpy as np

from bench.output import verdict, write_results
from bench.real_models import measure
from examples.build_pruned_models import FRACTIONS, build, sample
from fusion.compiler.options import DEFAULT, CompileOptions

#: (model, batch) of the table.
RUNS = (("mlp", 32), ("fc_autoencoder", 1), ("fc_autoencoder", 32), ("resnet8", 1))
DENSE = CompileOptions.without("sparse_weights")


def run(name: str, batch: int, fraction: float) -> dict:
    """Dense and specialized figures of one pruned model (both measured)."""
    path = build(name, fraction)
    x = np.concatenate([sample(name, 3000 + i) for i in range(batch)])
    dense, special = (measure(path, x, None, batch, options) for options in (DENSE, DEFAULT))
    return {
        "model": name, "batch": batch, "pruned": fraction,
        "dense_cycles": dense["cycles"], "sparse_cycles": special["cycles"],
        "ratio": round(special["cycles"] / dense["cycles"], 4),
        "sparse_kernels": special["sparse_kernels"], "kernels": special["kernels"],
        "host_cycles": special["host_cycles"],
        "dense_reference": dense["reference"], "reference": special["reference"],
        "within_bound": dense["within_bound"] and special["within_bound"],
    }


def main(argv: list[str] | None = None) -> int:
    names = set(argv if argv is not None else sys.argv[1:])
    print("Weight sparsity on 8x8, all stages: block-pruned models, dense vs specialized "
          "(measured kernel cycles, every kernel shadow-checked) ...", flush=True)
    print(f"  {'model':<16} {'batch':>5} {'pruned':>6} {'dense':>9} {'specialized':>11} "
          f"{'ratio':>6} {'sparse k':>8} {'host cyc':>8}  vs the exact reference")
    rows = []
    for name, batch in RUNS:
        if names and name not in names:
            continue
        for fraction in FRACTIONS:
            row = run(name, batch, fraction)
            rows.append(row)
            print(f"  {name:<16} {batch:>5} {fraction:>6.0%} {row['dense_cycles']:>9,} "
                  f"{row['sparse_cycles']:>11,} {row['ratio']:>6.3f} "
                  f"{row['sparse_kernels']:>3}/{row['kernels']:<4} {row['host_cycles']:>8,}  "
                  f"{row['reference']}", flush=True)
    zero_rows = activation_runs() if not names or "mlp" in names else []
    write_results("bench_sparse_models.json", {"runs": rows, "zero_rows": zero_rows})
    return verdict([f"{r['model']} at {r['pruned']:.0%}" for r in rows
                    if not r["within_bound"]] + [f"mlp on {r['input']} ({r['options']})"
                                                 for r in zero_rows if not r["within_bound"]])


def activation_runs() -> list[dict]:
    """The dense MLP at batch 32 on a random input and on it with 24 rows zero, compiled
    knowing its input (zero-skipping where it gains) and not; printed as they come."""
    print("Activation sparsity on 8x8: the dense MLP at batch 32, compiled knowing its input "
          "(measured kernel cycles) ...", flush=True)
    path = build("mlp", 0.0)
    x = np.random.default_rng(5).normal(0, 1, (32, 256)).astype(np.float32)
    padded = x.copy()
    padded[8:] = 0
    out = []
    for label, data, options in (("random", x, DEFAULT), ("24 rows zero", padded, DEFAULT),
                                 ("24 rows zero", padded, CompileOptions.without("zero_skip"))):
        m = measure(path, data, None, 32, options, knows_input=True)
        row = {"input": label, "options": options.label, "cycles": m["cycles"],
               "skip_kernels": m["skip_kernels"], "tiles_skipped": m["tiles_skipped"],
               "reference": m["reference"], "within_bound": m["within_bound"]}
        if out:
            row["ratio_to_random"] = round(m["cycles"] / out[0]["cycles"], 4)
        out.append(row)
        print(f"  {label:<13} {options.label:<18} {m['cycles']:>8,} cycles "
              f"{row.get('ratio_to_random', 1.0):>6.3f}x  zero-skipping kernels "
              f"{m['skip_kernels']}, tiles skipped {m['tiles_skipped']:,}  {m['reference']}",
              flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
