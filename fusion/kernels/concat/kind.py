"""The channel-join kernel kind: ``qconcat`` on the accelerator.

A join of int8 ``M x C_i`` tensors along their columns (a ``qconcat``'s rows, or an NCHW
tensor's pixel rows, :mod:`fusion.passes.concat_fold`) is, tile by tile, a copy: in the
tile-blocked layout (``[Mb][Nb][R][C]``, :mod:`fusion.kernels.layout`) input ``i``'s column
blocks are column blocks ``b_i .. b_i + Nb_i - 1`` of every block row of the output, when every
input before it fills whole blocks (``C_i`` a multiple of the columns). So the program is one
standalone epilogue pass per input (``epilogue_pass.j2``, :func:`fusion.kernels.epilogue.
pass_context` with ``out_pitch``), each writing its blocks into every block row of the output:
a copy where the input is quantized as the output, else the rescale stages (a bias of
``-x_zp``, then the requantize with halves to even, exact on every code by construction).

The same program joins tensors stored K-major (``kmajor_out``: ``[Mb][Nb][C][R]``, each tile
transposed, square arrays only): the stages are the same on every element of a tile, so a
transposed tile comes out transposed; the readers of a K-major join (a GEMM's A, a window
convolution's input) then read it where it lies, and so does the join read its producers'.

Regions, in allocation order: ``in0`` .. ``in{n-1}``, ``bias`` (when an input is rescaled),
``out``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.concat.build import RESCALE, build_concat, part_dims, sizes
from fusion.kernels.concat.features import ConcatFeatures
from fusion.kernels.epilogue import pass_fit_problem
from fusion.kernels.layout import GemmDims, Region, place
from fusion.kernels.program import Kernel
from fusion.kernels.protocol import (
    Build,
    KernelKind,
    Operand,
    Refusal,
    check_sizes,
    stage_refusal,
)
from hwgen.config import VariantConfig
from hwgen.reference import INT8_MAX, INT8_MIN, EpilogueParams, epilogue, to_dtype

#: The requantize multiplier and shift of a scale of 1.
UNIT = (1 << 30, 30)


@dataclass(frozen=True, kw_only=True)
class ConcatParams:
    """The join of int8 ``M x widths[i]`` tensors into one ``M x sum(widths)`` tensor.

    Parameters
    ----------
    M : int
        Rows (pixels) of every input and of the output.
    widths : tuple of int
        Each input's columns, at least two inputs.
    mult, shift : tuple of int
        Each input's rescale into the output's quantization (``hwgen.reference.requantize``
        with halves to even); ``(2**30, 30)`` with ``x_zp == zp`` is a copy.
    x_zp : tuple of int
        Each input's zero point, as int8 lanes.
    zp : int
        The output's zero point, as int8 lanes.
    kmajor_out : bool
        Every input and the output are stored K-major (each tile transposed) instead of in
        tiles.

    Raises
    ------
    ValueError
        A non-positive size, fewer than two inputs, or per-input values of another length.
    """

    M: int
    widths: tuple[int, ...]
    mult: tuple[int, ...]
    shift: tuple[int, ...]
    x_zp: tuple[int, ...]
    zp: int
    kmajor_out: bool = False

    def __post_init__(self) -> None:
        check_sizes(M=self.M, **{f"width {i}": w for i, w in enumerate(self.widths)})
        n = len(self.widths)
        if n < 2:
            raise ValueError(f"a join needs at least 2 inputs, not {n}")
        for name in ("mult", "shift", "x_zp"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} needs one value per input ({n}), not "
                                 f"{len(getattr(self, name))}")
        for z in (*self.x_zp, self.zp):
            if not INT8_MIN <= z <= INT8_MAX:
                raise ValueError(f"zero point {z} is not an int8 lane value")

    @property
    def N(self) -> int:  # noqa: N802 - the layout's customary name
        return sum(self.widths)

    def epilogue_of(self, i: int) -> EpilogueParams | None:
        """Input ``i``'s rescale stages' parameters, None for a copy."""
        if (self.mult[i], self.shift[i]) == UNIT and self.x_zp[i] == self.zp:
            return None
        return EpilogueParams(mult=self.mult[i], shift=self.shift[i], zp=self.zp,
                              round_even=True)

    @property
    def rescaled(self) -> tuple[bool, ...]:
        return tuple(self.epilogue_of(i) is not None for i in range(len(self.widths)))


@dataclass(frozen=True, eq=False)
class ConcatKernel(Kernel):
    """A compiled join; its operands are ``in0=``, ``in1=``, ... (``M x widths[i]`` int8)."""


class ConcatKind(KernelKind):
    """The join of int8 tensors along their columns (see the module docstring)."""

    name = "concat"
    template = "epilogue_pass.j2"
    params_type = ConcatParams
    kernel_type = ConcatKernel
    features_type = ConcatFeatures
    const_regions = frozenset({"bias"})

    def legality(self, config: VariantConfig, params: ConcatParams) -> Refusal | None:
        p, cols = params, config.cols
        for i, w in enumerate(p.widths[:-1]):
            if w % cols:
                return Refusal(self.name, "unaligned",
                               f"input {i} of the join has {w} channels, not a multiple of the "
                               f"array's {cols} columns: the inputs after it would start "
                               f"inside a column block (the join runs on the host)",
                               input=i, width=w, cols=cols)
        if p.kmajor_out and config.rows != cols:
            return Refusal(self.name, "not_square", "a K-major join needs a square array "
                           f"({config.rows}x{cols})", rows=config.rows, cols=cols)
        if any(p.rescaled):
            refusal = stage_refusal(self.name, RESCALE, config.epilogue)
            if refusal is not None:
                return refusal
        for i, w in enumerate(p.widths):
            problem = pass_fit_problem(part_dims(config, p.M, w),
                                       stages=RESCALE if p.rescaled[i] else (),
                                       params=p.epilogue_of(i) or EpilogueParams(), src_dt="i8")
            if problem is not None:
                return Refusal(self.name, "pass_does_not_fit", problem)
        if self.features(config, p).instructions() is None:  # built alone, cached for pricing
            try:
                self.build(config, p, place(config, self.regions(config, p)))
            except ValueError as exc:  # what stopped it: the instruction memory, the memory
                return Refusal(self.name, "program", str(exc))
        return None

    def dims(self, params: ConcatParams) -> tuple[int, int, int]:
        return params.M, 1, params.N

    def stages(self, params: ConcatParams) -> tuple[str, ...]:
        return RESCALE if any(params.rescaled) else ()

    def epilogue(self, params: ConcatParams) -> EpilogueParams:
        found = [e for i in range(len(params.widths)) if (e := params.epilogue_of(i))]
        return found[0] if found else EpilogueParams()

    def operands(self, config: VariantConfig, params: ConcatParams) -> dict[str, Operand]:
        return {f"in{i}": Operand("int8", (params.M, w)) for i, w in enumerate(params.widths)}

    def output(self, params: ConcatParams) -> Operand:
        return Operand("int8", (params.M, params.N))

    def regions(self, config: VariantConfig, params: ConcatParams) -> dict[str, int]:
        return sizes(config, params.M, params.widths, params.rescaled)

    def key_params(self, params: ConcatParams) -> dict[str, Any]:
        p = params
        return {"m": p.M, "widths": list(p.widths), "mult": list(p.mult),
                "shift": list(p.shift), "x_zp": list(p.x_zp), "zp": p.zp,
                "kmajor_out": p.kmajor_out}

    def build(self, config: VariantConfig, params: ConcatParams,
              regions: Mapping[str, Region]) -> Build:
        p = params
        return build_concat(config, p.M, p.widths,
                            [p.epilogue_of(i) for i in range(len(p.widths))], regions,
                            what=self.describe(p))

    def _pack(self, dims: GemmDims, x: np.ndarray, kmajor: bool) -> bytes:
        if not kmajor:
            return layout.pack_tiles(dims, x)
        tiles = np.frombuffer(layout.pack_tiles(dims, x), np.int8)
        shaped = tiles.reshape(dims.Mb, dims.Nb, dims.R, dims.C)
        return shaped.transpose(0, 1, 3, 2).tobytes()  # each tile transposed

    def pack(self, config: VariantConfig, params: ConcatParams,
             values: Mapping[str, np.ndarray]) -> dict[str, bytes]:
        p = params
        data = {f"in{i}": self._pack(part_dims(config, p.M, w), values[f"in{i}"], p.kmajor_out)
                for i, w in enumerate(p.widths)}
        biases = [layout.pack_bias(part_dims(config, p.M, w), np.full(w, -p.x_zp[i], np.int32))
                  for i, w in enumerate(p.widths) if p.rescaled[i]]
        if biases:
            data["bias"] = b"".join(biases)
        return data

    def reference(self, params: ConcatParams, values: Mapping[str, np.ndarray]) -> np.ndarray:
        parts = []
        for i, w in enumerate(params.widths):
            x, e = values[f"in{i}"], params.epilogue_of(i)
            if e is not None:
                x = to_dtype(epilogue(x, RESCALE, e, bias=np.full(w, -params.x_zp[i])),
                             np.dtype(np.int8))
            parts.append(np.asarray(x, np.int8))
        return np.concatenate(parts, axis=1)

    def features(self, config: VariantConfig, params: ConcatParams) -> ConcatFeatures:
        return ConcatFeatures(config=config, M=params.M, widths=params.widths,
                              rescaled=params.rescaled)

    def describe(self, params: ConcatParams, ops: str = "") -> str:
        p = params
        rescaled = sum(p.rescaled)
        return (f"concat {p.M}x[{'+'.join(map(str, p.widths))}]{f' [{ops}]' if ops else ''} "
                f"{rescaled} of {len(p.widths)} rescaled"
                f"{', K-major' if p.kmajor_out else ''}")

    def host_operands(self, config: VariantConfig, params: ConcatParams,
                      inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """Each input's pixel rows: an NCHW tensor transposed, a ``qconcat``'s rows as they
        are (:func:`fusion.kernels.layout.pixel_rows`)."""
        return {f"in{i}": layout.pixel_rows(x, w)
                for i, (x, w) in enumerate(zip(inputs, params.widths, strict=True))}

    def tensor_of(self, params: ConcatParams, out: np.ndarray, shape: tuple[int, ...]
                  ) -> np.ndarray:
        """The joined tensor from the pixel rows: an NCHW tensor transposed back, rows as
        they are (:meth:`region_view`)."""
        if layout.nchw_view(shape) == layout.PIXELS:
            n, c, h, w = shape
            return np.asarray(out).reshape(n, h, w, c).transpose(0, 3, 1, 2)
        return super().tensor_of(params, out, shape)

    def region_layout(self, config: VariantConfig, params: ConcatParams, region: str) -> str:
        """Tiles, or K-major over each region's whole column blocks (``kmajor_out``)."""
        if not params.kmajor_out or region == "bias":
            return "tiles"
        width = params.N if region == "out" else params.widths[int(region[2:])]
        return layout.layout_name("kmajor", -(-width // config.cols) * config.cols)

    def region_view(self, params: ConcatParams, region: str, shape: tuple[int, ...]) -> str:
        """Pixel rows of an NCHW tensor, or the rows of a ``qconcat`` (:func:`fusion.kernels.
        layout.nchw_view`)."""
        return layout.nchw_view(shape)

    def inputs_in_place(self, params: ConcatParams) -> dict[str, int]:
        return {f"in{i}": i for i in range(len(params.widths))}


CONCAT = ConcatKind()
