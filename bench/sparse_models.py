"""Weight sparsity (issue 33): block-pruned models, dense against specialized, on Verilator.

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
    write_results("bench_sparse_models.json", {"runs": rows})
    return verdict([f"{r['model']} at {r['pruned']:.0%}" for r in rows
                    if not r["within_bound"]])


if __name__ == "__main__":
    sys.exit(main())
