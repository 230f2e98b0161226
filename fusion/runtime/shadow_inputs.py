"""Directed input sets for the shadow check of a model's kernels.

The model's own values may never reach a stage's edge cases (a ReLU input of exactly -1, a
saturation, a clamp bound), and a fault there then passes. So :func:`directed_inputs` makes
further values of a kernel's input tensors, which :func:`fusion.runtime.run.run_compiled` runs
in the same simulator launch and checks against the reference like the model's own:

- each set starts from a family of values (uniform over the whole range; the extremes and the
  values around zero; mostly zeros), so that element-wise kernels (max pooling) see equal,
  smaller and larger pairs;
- for a kernel with epilogue stages, rows of its GEMM operand ``a`` (or elements of a pass's
  ``src``) are then solved against the kernel's own weights so that each edge case the stages
  can reach occurs (:func:`fusion.runtime.edge_cases.plant`), and residual elements set
  against the values they meet; the edits are written back to the input tensors through the
  kind's own operand layout (:meth:`~fusion.kernels.protocol.KernelKind.host_operands`, run on
  element numbers);
- for a GEMM that skips all-zero-point tiles of ``a`` at run time (the zero-skipping program),
  about half of its tiles are then set to the zero point, so that every set takes both paths
  of its branches.

:func:`kernel_coverage` counts the edge cases one set of input values reaches, on the
reference's intermediate values.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from fusion.compiler.kernels import KernelSpec
from fusion.compiler.lower import from_lanes, to_lanes
from fusion.ir.graph import Graph
from fusion.kernels.gemm.sparse import block_rows
from fusion.runtime.edge_cases import coverage, plant
from hwgen.config import VariantConfig
from hwgen.reference import OPERANDS, gemm

#: Lane value ranges of the tensor types directed sets are made for.
_LANES = {"int8": (-128, 127), "uint8": (-128, 127), "int32": (-(1 << 20), 1 << 20)}


def _family(rng: np.random.Generator, n: int, shape: tuple[int, ...], lo: int, hi: int
            ) -> np.ndarray:
    """Set ``n``'s base values: uniform, extremes and near zero, or mostly zero."""
    uniform = rng.integers(lo, hi + 1, shape, dtype=np.int64)
    if n % 3 == 0:
        return uniform
    if n % 3 == 1:
        edges = np.array([lo, lo + 1, -2, -1, 0, 1, 2, hi - 1, hi], np.int64)
        return np.where(rng.random(shape) < 0.5, rng.choice(edges, shape), uniform)
    return np.where(rng.random(shape) < 0.8, 0, uniform)


def _stage_input(spec: KernelSpec, ops: Mapping[str, np.ndarray]) -> tuple[str, bool] | None:
    """The operand the kernel's stages run on, and whether it is a GEMM's ``a``."""
    stages = getattr(spec.params, "stages", ())
    if not stages:
        return None
    if "a" in ops and "b" in ops:
        return "a", True
    if "src" in ops:
        return "src", False
    return None


def directed_inputs(graph: Graph, spec: KernelSpec, kernel: Any, values: Mapping[str, Any],
                    config: VariantConfig, count: int, *, seed: int = 0
                    ) -> list[dict[str, np.ndarray]]:
    """``count`` directed sets of values of the kernel's input tensors (see the module
    docstring); none for a kernel that reads a float tensor.

    Parameters
    ----------
    graph : Graph
    spec : KernelSpec
        The kernel: its kind, params, input tensors and constant operands.
    kernel : fusion.kernels.program.Kernel
        Its compiled form (the stages and control-register values the program runs).
    values : mapping
        The model's own values of the input tensors (for their shapes).
    config : VariantConfig
    count : int
        How many sets.
    seed : int
        Seed of the random part (each kernel draws its own stream from it and its name).
    """
    # A tensor the kernel reads twice (a GEMM's input that is also its residual) is one set
    # of values: its operands share element numbers, and the later edit of an element wins.
    names = list(dict.fromkeys(spec.inputs))
    dtypes = [graph.tensors[t].dtype for t in names]
    if count <= 0 or any(dt not in _LANES for dt in dtypes):
        return []
    shapes = [np.shape(values[t]) for t in names]
    sizes = [int(np.prod(s)) for s in shapes]
    starts = np.cumsum([0, *sizes])
    # Element numbers (from 1; the layouts pad with 0 or negative values) through the kind's
    # own layout: where each operand element comes from.
    numbers = {t: np.arange(a + 1, a + 1 + n, dtype=np.int64).reshape(s)
               for t, a, n, s in zip(names, starts, sizes, shapes, strict=False)}
    origin = spec.kind.host_operands(config, spec.params, [numbers[t] for t in spec.inputs])
    rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
    sets = []
    for n in range(count):
        flat = np.concatenate([_family(rng, n, (size,), *_LANES[dt])
                               for size, dt in zip(sizes, dtypes, strict=True)])
        ops = _operands(spec, kernel, origin, flat)
        target = _stage_input(spec, ops)
        if target is not None:
            name, is_gemm = target
            plant(ops[name], ops.get("b"), kernel.stages, kernel.params, ops, rng,
                  direct=not is_gemm)
            if is_gemm and getattr(spec.params, "skip", False):
                _zero_tiles(ops["a"], spec.params.skip_zp, config, rng)
            for edited in (name, "residual"):
                if edited in origin and edited in ops:
                    where = np.asarray(origin[edited]) > 0
                    flat[np.asarray(origin[edited])[where] - 1] = ops[edited][where]
        sets.append({t: from_lanes(flat[a:a + size].reshape(shape), dt) for t, a, size, shape, dt
                     in zip(names, starts, sizes, shapes, dtypes, strict=False)})
    return sets


def _zero_tiles(a: np.ndarray, zp: int, config: VariantConfig,
                rng: np.random.Generator) -> None:
    """Set about half of the tiles of the ``M x K`` operand ``a`` (one row block by
    :func:`~fusion.kernels.gemm.sparse.block_rows` K rows) to the zero point ``zp``."""
    r, kb = config.rows, block_rows(config)
    for i in range(0, a.shape[0], r):
        for j in range(0, a.shape[1], kb):
            if rng.random() < 0.5:
                a[i:i + r, j:j + kb] = zp


def _operands(spec: KernelSpec, kernel: Any, origin: Mapping[str, np.ndarray],
              flat: np.ndarray) -> dict[str, np.ndarray]:
    """The kernel's operands (lane values) when its inputs hold ``flat``: each taken from its
    origin, in the type the kernel reads it as; constants copied (planting edits them)."""
    ops = {}
    types = kernel.operands
    for name, where in origin.items():
        where = np.asarray(where)
        ops[name] = np.where(where > 0, flat[np.maximum(where, 1) - 1], 0).astype(
            types[name].dtype if name in types else flat.dtype)
    ops.update({k: np.array(v, copy=True) for k, v in spec.consts.items()})
    return ops


def kernel_coverage(graph: Graph, spec: KernelSpec, kernel: Any, values: Mapping[str, Any],
                    config: VariantConfig) -> dict[str, int]:
    """How often each edge case of the kernel's stages occurs with ``values`` of its input
    tensors (:func:`fusion.runtime.edge_cases.coverage`); empty for a kernel without stages."""
    xs = [to_lanes(values[t], graph.tensors[t].dtype) for t in spec.inputs]
    ops = {**spec.kind.host_operands(config, spec.params, xs), **spec.consts}
    target = _stage_input(spec, ops)
    if target is None:
        return {}
    name, is_gemm = target
    x = gemm(ops["a"], ops["b"]) if is_gemm else ops["src"]
    return coverage(x, kernel.stages, kernel.params,
                    **{k: v for k, v in ops.items() if k in OPERANDS})
