"""Calibration: run a sweep of GEMM kernels on Verilator and record one row per run.

Each row (:class:`fusion.cost.data.Row`, JSONL) holds the kernel's features (shape, stages,
fused or not, tiling, program size, bytes) and every counter the run reported, keyed by the
variant key. The cost models in :mod:`fusion.cost` learn from and are judged against these
rows without importing the simulator. This module sits above both ``sim`` and ``fusion``.

A sweep is shapes x stage sets x fused/unfused x tilings, sampled deterministically, on each
variant; one variant's kernels run in one simulator launch (:func:`sim.gemm_check.run_gemms`).
Variants are independent, so they can go to a ``concurrent.futures`` executor (a process
pool, or a Dask client's ``get_executor()``); without one they run here, one after another.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from fusion.cost import AnalyticalModel, CostModel, Evaluation, Row, evaluate, write_rows
from fusion.kernels.codegen import ProgramTooLong
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.protocol import KernelRefused
from fusion.kernels.tiling import Tiling
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES, SIM_VARIANTS
from sim.gemm_check import GemmCase, run_gemms

#: Variants of the default sweep: the ones the simulation tests build (same configs, so the
#: same build cache entries).
DEFAULT_VARIANTS = SIM_VARIANTS

#: GEMM shapes (M, K, N): compute bound, K-heavy, K-light (drain and store bound, where the
#: one-draining-tile rule bites), ragged edges, and thin matrices (load bound).
SHAPES = [(64, 64, 64), (32, 256, 32), (128, 16, 128), (16, 512, 16), (96, 40, 72),
          (8, 8, 256), (200, 24, 8), (1, 128, 64), (48, 96, 24), (33, 64, 17)]

#: Epilogue stage sets, each run fused and unfused (filtered to each variant's chain).
STAGE_SETS = [(), ("bias", "requant", "relu"), ("requant", "residual"), ALL_STAGES]

#: Tilings: the default tiler's choice (None), one-tile super tiles, single buffering,
#: K chunking, and the other loop order.
TILINGS: list[Tiling | None] = [
    None, Tiling(tm=1, tn=1), Tiling(tm=2, tn=2, double_buffer=False),
    Tiling(tm=1, tn=1, kt=16), Tiling(tm=2, tn=4, order="nm"),
]


def sweep_cases(config: VariantConfig, samples: int, seed: int = 0) -> list[tuple[GemmCase,
                                                                              GemmFeatures]]:
    """Up to ``samples`` cases of the sweep product that build on ``config``, with features.

    The product is shuffled with ``seed`` and walked in that order; a case the variant
    refuses (a tiling or an epilogue pass that does not fit the scratchpads, a program longer
    than the instruction memory: ``KernelRefused`` or ``ProgramTooLong``, naming it) is skipped,
    since a calibration needs runnable kernels, not every combination.
    """
    stage_sets = [s for s in STAGE_SETS if set(s) <= set(config.epilogue)]
    product = [(shape, stages, fused, tiling) for shape in SHAPES for stages in stage_sets
               for fused in ((True, False) if stages else (True,)) for tiling in TILINGS]
    random.Random(seed).shuffle(product)
    picked = []
    for n, ((m, k, n_), stages, fused, tiling) in enumerate(product):
        if len(picked) >= samples:
            break
        case = GemmCase(m, k, n_, stages=stages, fused=fused, tiling=tiling, seed=seed + n)
        try:
            kernel = case.kernel(config)
        except (KernelRefused, ProgramTooLong):  # refused as illegal here, or too long for imem;
            continue  # any other error is a builder bug and must surface
        picked.append((case, GemmFeatures.from_kernel(kernel)))
    return picked


def calibrate_variant(config: VariantConfig, samples: int = 100, seed: int = 0) -> list[Row]:
    """Run :func:`sweep_cases` on ``config`` in one simulator launch; one row per kernel.

    Every run is also checked bit for bit; a mismatch is recorded (``ok`` false) and left
    out of evaluations, never silently measured.
    """
    picked = sweep_cases(config, samples, seed)
    began = time.perf_counter()
    reports = run_gemms(config, [case for case, _ in picked])
    wall = time.perf_counter() - began
    rows = []
    for (case, features), report in zip(picked, reports, strict=True):
        # one workload per GEMM shape: grouped splits keep a shape's tilings and stage sets
        # (near-duplicates) on one side
        rows.append(Row(features, dict(report.counters), report.ok,
                        {"seed": case.seed, "sim_seconds": round(report.wall_seconds, 4),
                         "launch_seconds": round(wall, 2)},
                        platform=report.platform, workload=f"gemm{case.M}x{case.K}x{case.N}"))
    return rows


@dataclass(frozen=True)
class CalibrationResult:
    """Rows recorded by :func:`calibrate` and the analytical model's evaluation on them."""

    rows: list[Row]
    evaluation: Evaluation
    per_variant: dict[str, Evaluation]
    seconds: float


def calibrate(
    variants: Sequence[VariantConfig] | None = None,
    out: Path | str | None = None,
    *,
    samples: int = 100,
    seed: int = 0,
    executor: Executor | None = None,
    model: CostModel | None = None,
) -> CalibrationResult:
    """Sweep ``variants`` (default :data:`DEFAULT_VARIANTS`), append rows to ``out``, and
    evaluate ``model`` (default the analytical one) against them.

    Parameters
    ----------
    variants : sequence of VariantConfig, optional
        Each is built once (cached by its key) and runs ``samples`` kernels.
    out : path, optional
        JSONL file the rows are appended to.
    samples, seed : int
        Kernels per variant, and the seed of the sweep's sampling and operands. The default
        (100 on each of the three default variants) runs in about 15 s on two cores once
        the variants are built (a build takes one to two minutes, cached by variant key).
    executor : concurrent.futures.Executor, optional
        Runs the variants in parallel (each its own simulator launch and run folder).
    model : CostModel, optional
        The model to evaluate.

    Returns
    -------
    CalibrationResult
    """
    began = time.perf_counter()
    variants = list(variants if variants is not None else DEFAULT_VARIANTS.values())
    if executor is None:
        per = [calibrate_variant(v, samples, seed) for v in variants]
    else:
        futures = [executor.submit(calibrate_variant, v, samples, seed) for v in variants]
        per = [f.result() for f in futures]
    rows = [row for chunk in per for row in chunk]
    if out is not None:
        write_rows(out, rows)
    model = model or AnalyticalModel()
    by_variant = {v.key(): evaluate(model, chunk) for v, chunk in zip(variants, per,
                                                                      strict=True)}
    return CalibrationResult(rows, evaluate(model, rows), by_variant,
                             time.perf_counter() - began)


def compare(rows: Sequence[Row], model: CostModel | None = None) -> list[tuple[Row, float]]:
    """Each row with ``model``'s prediction, worst relative error first (for reading)."""
    model = model or AnalyticalModel()
    pairs = [(r, model.predict(r.features)) for r in rows if r.ok]
    return sorted(pairs, key=lambda p: -abs(p[1] - p[0].cycles) / p[0].cycles)
