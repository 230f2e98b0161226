"""Profiles of the data at kernel boundaries: what a kernel could specialize to (issue 33).

For each tensor a kernel reads or writes, :class:`TensorProfile` holds its shape and dtype;
the share of its values equal to its zero point (its zeros); the share of its all-zero tiles
at the array's granularity, the blocks a GEMM could skip (:func:`tile_shape`: ``rows x K
block`` of an A operand, ``K block x cols`` of a weight, the K block as many K rows as the
array has rows); its least and greatest value and a histogram over its dtype's whole range;
and, for a requantize's output, the share of values its clamp saturated (the value before the
clamp, :func:`hwgen.lanes.requantize_unsaturated`, outside the output dtype's range).

:func:`profile_tensor` profiles one array; :func:`kernel_profiles` the tensors of one kernel
from the values of a run (the reference's values, which every kernel is checked against, so
the profile is the data's and not the hardware's); ``hwgen run --profile-data`` reports them
for every kernel of a model (:func:`fusion.runtime.run.run_compiled`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.ir.graph import Graph, Node
from fusion.ir.ops import INT_RANGE
from fusion.reference.hwgen_ops import requant
from hwgen.config import VariantConfig

#: Bins of a profile's histogram: equal ranges over the dtype's values (16 of 16 codes for
#: 8 bits).
HISTOGRAM_BINS = 16

#: How a tensor is read, which sets its tiles (:func:`tile_shape`).
ROLES = ("activation", "weight")


@dataclass(frozen=True)
class TensorProfile:
    """The profile of one tensor's values (see the module docstring)."""

    tensor: str
    role: str
    shape: tuple[int, ...]
    dtype: str
    zero_point: int
    #: Share of the elements equal to the zero point.
    zero_share: float
    #: The tile (rows, columns) of the tensor's matrix view, and the share of its tiles whose
    #: every element is the zero point (a partial tile at an edge counts its own elements).
    tile: tuple[int, int]
    tiles: int
    zero_tiles: float
    minimum: int
    maximum: int
    #: Element counts of :data:`HISTOGRAM_BINS` equal ranges over the dtype's values.
    histogram: tuple[int, ...]
    #: Share of a requantize's outputs its clamp saturated; None for a tensor no requantize
    #: makes.
    saturated: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "role": self.role, "shape": list(self.shape),
                "dtype": self.dtype, "zero_point": self.zero_point,
                "zero_share": self.zero_share, "tile": list(self.tile), "tiles": self.tiles,
                "zero_tiles": self.zero_tiles, "minimum": self.minimum,
                "maximum": self.maximum, "histogram": list(self.histogram),
                "saturated": self.saturated}


def tile_shape(config: VariantConfig, role: str) -> tuple[int, int]:
    """The tile a GEMM would skip whole on ``config``: ``(rows, K block)`` of an A operand
    (output rows by reduction rows), ``(K block, cols)`` of a weight, the K block ``rows``."""
    if role not in ROLES:
        raise ValueError(f"a profile's role is one of {', '.join(ROLES)}, not {role!r}")
    return (config.rows, config.rows) if role == "activation" else (config.rows, config.cols)


def profile_tensor(name: str, values: np.ndarray, *, zero_point: int, dtype: str,
                   tile: tuple[int, int], role: str = "activation",
                   saturated: float | None = None) -> TensorProfile:
    """The profile of ``values``, an integer tensor of ``dtype`` whose zero is
    ``zero_point``: its matrix view is ``[product of the leading axes, last axis]`` (an A
    operand's ``[M, K]``, a weight's ``[K, N]``; an NCHW tensor's ``[N*H*W, C]``, as a
    convolution's GEMM reads it), cut into ``tile`` s.

    Raises
    ------
    ValueError
        For values that are not integers of ``dtype``'s range, or an empty tensor.
    """
    if dtype not in INT_RANGE:
        raise ValueError(f"profiles are of integer tensors, not {dtype}")
    x = np.asarray(values)
    if not np.issubdtype(x.dtype, np.integer) or x.size == 0:
        raise ValueError(f"tensor {name!r}: a profile needs integer values, not an empty "
                         f"tensor or {x.dtype}")
    lo, hi = INT_RANGE[dtype]
    if int(x.min()) < lo or int(x.max()) > hi:
        raise ValueError(f"tensor {name!r} holds values outside {dtype}'s range")
    zero = x == zero_point
    if x.ndim == 4:  # NCHW: pixels by channels, the rows a convolution's GEMM reads
        matrix = np.moveaxis(zero, 1, -1).reshape(-1, x.shape[1])
    else:
        matrix = zero.reshape(-1, x.shape[-1]) if x.ndim else zero.reshape(1, 1)
    r, c = tile
    rows, cols = matrix.shape
    # pad with zeros (True) to whole tiles: an edge tile counts only its own elements
    padded = np.ones((math.ceil(rows / r) * r, math.ceil(cols / c) * c), bool)
    padded[:rows, :cols] = matrix
    blocks = padded.reshape(padded.shape[0] // r, r, padded.shape[1] // c, c)
    all_zero = blocks.all(axis=(1, 3))
    width = (hi - lo + 1) // HISTOGRAM_BINS
    histogram = np.bincount((x.astype(np.int64).ravel() - lo) // width,
                            minlength=HISTOGRAM_BINS)
    return TensorProfile(name, role, tuple(int(d) for d in x.shape), dtype, int(zero_point),
                         float(zero.mean()), (r, c), int(all_zero.size),
                         float(all_zero.mean()), int(x.min()), int(x.max()),
                         tuple(int(n) for n in histogram), saturated)


def saturation(node: Node, acc: np.ndarray) -> float:
    """Share of ``requant`` ``node``'s outputs on ``acc`` (its int32 input) that its clamp
    saturated: the value before the clamp outside the output dtype's range."""
    a = node.attr_dict
    y = requant(acc, a["mult"], a["shift"], a["zp"], a["out_dtype"], a["axis"],
                bool(a["round_even"]), saturate=False)
    lo, hi = INT_RANGE[a["out_dtype"]]
    return float(((y < lo) | (y > hi)).mean()) if y.size else 0.0


def kernel_profiles(graph: Graph, config: VariantConfig, spec: Any,
                    values: Mapping[str, np.ndarray]) -> list[TensorProfile]:
    """The profiles of the integer tensors kernel ``spec`` (a :class:`fusion.compiler.spec.
    KernelSpec`) reads and writes, from ``values`` (tensor name -> the run's values of the
    kernel's inputs, constants and its nodes' intermediates: the reference's, which every
    kernel is checked against). A ``qmatmul``'s constant B has the weight role, the rest the
    activation role; the output's ``saturated`` is that of the kernel's last ``requant``."""
    nodes = [graph.node(n) for n in spec.nodes]
    weights = {n.inputs[1] for n in nodes if n.op == "qmatmul" and n.inputs[1] in
               graph.initializers}
    requants = [n for n in nodes if n.op == "requant" and n.inputs[0] in values]
    found = []
    for name in dict.fromkeys((*spec.inputs, *sorted(weights), spec.output)):
        t = graph.tensors.get(name)
        if name not in values or t is None or t.dtype not in INT_RANGE:
            continue
        role = "weight" if name in weights else "activation"
        zp = int(t.quant.zero_point[0]) if t.quant is not None and not t.quant.per_channel \
            else 0
        saturated = (saturation(requants[-1], values[requants[-1].inputs[0]])
                     if name == spec.output and requants else None)
        found.append(profile_tensor(name, values[name], zero_point=zp, dtype=t.dtype,
                                    tile=tile_shape(config, role), role=role,
                                    saturated=saturated))
    return found


def profile_table(profiles: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Rows (a header, then one per tensor) of :meth:`TensorProfile.to_dict` s, for a table."""
    rows = [("tensor", "role", "shape", "zeros", "zero tiles", "range", "saturated")]
    for p in profiles:
        sat = "-" if p["saturated"] is None else f"{p['saturated']:.1%}"
        rows.append((p["tensor"], p["role"], "x".join(map(str, p["shape"])),
                     f"{p['zero_share']:.1%}",
                     f"{p['zero_tiles']:.1%} of {p['tiles']:,} {p['tile'][0]}x{p['tile'][1]}",
                     f"{p['minimum']}..{p['maximum']}", sat))
    return rows
