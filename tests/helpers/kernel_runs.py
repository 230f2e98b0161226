"""Compile kernels of one kind and run them all in one simulator launch: the shared harness
of the per-kind Verilator tests (``tests/sim/test_window_conv.py``,
``tests/sim/test_window_kind.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels.program import Kernel, compile_kernel
from fusion.kernels.protocol import KernelKind
from hwgen.config import VariantConfig


@dataclass
class Run:
    """One case: its params, compiled kernel, operand values and the simulator's result."""

    name: str
    params: Any
    kernel: Kernel
    ops: dict[str, np.ndarray]
    result: Any  # sim.run.RunResult


def run_cases(kind: KernelKind, config: VariantConfig, cases: Sequence[tuple[str, Any]],
              values: Callable[[Any, int], dict[str, np.ndarray]]) -> list[Run]:
    """Compile each ``(name, params)`` case of ``kind`` (which must be legal on ``config``),
    make its operands with ``values(params, seed=i)``, and run every case in one launch."""
    from sim.build import build_variant
    from sim.run import Job, MemoryImage, run_programs

    build_variant(config)
    kernels, allops, jobs = [], [], []
    for i, (name, p) in enumerate(cases):
        assert kind.legality(config, p) is None, (name, kind.legality(config, p))
        kernel = compile_kernel(kind, config, p)
        ops = values(p, seed=i)
        kernels.append(kernel)
        allops.append(ops)
        jobs.append(Job(kernel.program, MemoryImage(writes=tuple(kernel.memory(**ops)),
                                                    reads=kernel.reads),
                        name=f"{kind.name} {name}"))
    results = run_programs(config, jobs)
    return [Run(name, p, k, ops, r) for (name, p), k, ops, r
            in zip(cases, kernels, allops, results, strict=True)]
