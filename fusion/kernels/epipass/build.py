"""Standalone epilogue kernels: one pass over a tensor (the element-wise max of tensors,
:mod:`fusion.kernels.eltmax.build`, chains them).

A model compiler runs the epilogue stages on their own where no GEMM precedes them (a
requantize or a residual add between layers), and max pooling as a chain of passes whose
residual stage computes ``sat8(max(x, r))`` (``EpilogueParams.residual_op == "max"``, CSR
``res_mode``). Both are built from :mod:`fusion.kernels.epilogue` and ``epilogue_pass.j2``, over
tensors in the tile-blocked ``[Mb][Nb][R][C]`` layout of :mod:`fusion.kernels.layout`, and cached
like the GEMMs (:mod:`fusion.kernels.program`): the key is the signature (variant, shape,
dtypes, stages, quantization, placement), the value the program with metadata naming the
regions; the operands are packed per run.

Regions (``name -> bytes`` before building: :func:`pass_regions`, :func:`max_regions`):

- a pass: ``src``, ``bias`` (for the bias stage or per-channel requantize), ``residual``
  (int8 tiles, for the residual stage), ``out``;
- a max of n inputs: ``in0`` .. ``in{n-1}``, ``tmp0`` and ``tmp1`` (the ping-pong of the
  intermediate results, only as many as the chain needs: none for 2 inputs, one for 3),
  ``out``.

The geometry is that of an M x 1 x N GEMM (:class:`fusion.kernels.layout.GemmDims`, K unused).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.cache import CompiledKernel, KernelCache
from fusion.kernels.codegen import assemble_program, load_bytes, render
from fusion.kernels.epilogue import pass_context, reads_bias_region
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.program import CachedProgram, placement_key
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, check_stages, epilogue, to_dtype

#: Element types of a pass's input and output, and their names in the templates.
DTYPES = {"int8": "i8", "int32": "i32"}


def _dims(config: VariantConfig, M: int, N: int) -> GemmDims:  # noqa: N803
    return GemmDims(config, M, 1, N)  # a pass has no reduction: K is unused


def _dtype(value: Any, what: str) -> str:
    try:
        name = np.dtype(value).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"{what} must be int8 or int32, not {value!r}")
    return name


def _per_channel(stages: Sequence[str], params: EpilogueParams) -> bool:
    if params.per_channel and "requant" not in stages:
        raise ValueError(f"per-channel requantize (params.per_channel) needs the requant stage, "
                         f"but the stages are ({', '.join(stages) or 'none'}); add requant or "
                         f"use per_channel=False")
    return params.per_channel


def _pass_operands(M: int, N: int, stages: Sequence[str], params: EpilogueParams,  # noqa: N803
                   src_dtype: str) -> dict[str, tuple[str, list[int]]]:
    """Operand -> (dtype name, shape) of a pass, in region order."""
    ops = {"src": (src_dtype, [M, N])}
    if "bias" in stages:
        ops["bias"] = ("int32", [N])
    if _per_channel(stages, params):
        ops["mult"], ops["shift"] = ("int32", [N]), ("int32", [N])
    if "residual" in stages:
        ops["residual"] = ("int8", [M, N])
    return ops


def _tensor_bytes(dims: GemmDims, dtype: str) -> int:
    return dims.Mb * dims.Nb * dims.tile_bytes(np.dtype(dtype).itemsize)


def _pass_sizes(dims: GemmDims, stages: tuple[str, ...], params: EpilogueParams,
                src_dtype: str, out_dtype: str) -> dict[str, int]:
    _per_channel(stages, params)  # refuse per-channel without requant here too
    sizes = {"src": _tensor_bytes(dims, src_dtype)}
    if reads_bias_region(stages, params):
        sizes["bias"] = layout.bias_region_bytes(dims, params)
    if "residual" in stages:
        sizes["residual"] = _tensor_bytes(dims, "int8")
    sizes["out"] = _tensor_bytes(dims, out_dtype)
    return sizes


def pass_regions(
    config: VariantConfig,
    M: int,  # noqa: N803 - the layout's customary names
    N: int,  # noqa: N803
    *,
    stages: Sequence[str],
    params: EpilogueParams | None = None,
    src_dtype: Any = "int32",
    out_dtype: Any = "int32",
) -> dict[str, int]:
    """The memory regions :func:`compiled_pass` uses, without building the program.

    Parameters
    ----------
    config, M, N, stages, params, src_dtype, out_dtype
        As for :func:`compiled_pass`.

    Returns
    -------
    dict of str to int
        ``name -> bytes`` in allocation order: ``src``, ``bias`` (when there is a bias
        region), ``residual`` (when the residual stage runs), ``out``.

    Raises
    ------
    ValueError
        A stage not in the variant's chain or out of order, a dtype other than int8 or
        int32, or a non-positive dimension.
    """
    stages = check_stages(stages, config.epilogue)
    params = params if params is not None else EpilogueParams()
    return _pass_sizes(_dims(config, M, N), stages, params,
                       _dtype(src_dtype, "src_dtype"), _dtype(out_dtype, "out_dtype"))


def _check_value(name: str, value: Any, dtype: str, shape: Sequence[int],
                 what: str) -> np.ndarray:
    """``value`` as an array of ``dtype``, refused with a message naming the operand."""
    if value is None:
        raise ValueError(f"the {what} needs a {name} operand: {dtype} of shape {tuple(shape)}")
    x = np.asarray(value)
    if list(x.shape) != list(shape):
        raise ValueError(f"operand {name} has shape {x.shape}, the {what} was compiled for "
                         f"{tuple(shape)}")
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"operand {name} must be an integer array ({dtype}), not {x.dtype}")
    info = np.iinfo(dtype)
    if x.size and (x.min() < info.min or x.max() > info.max):
        raise ValueError(f"operand {name} has values outside {dtype} "
                         f"({int(x.min())}..{int(x.max())}); the {what} was compiled for "
                         f"{dtype}")
    return x.astype(dtype)


def _pack_bias_region(dims: GemmDims, params: EpilogueParams, stages: Sequence[str],
                      values: Mapping[str, np.ndarray]) -> bytes:
    if not _per_channel(stages, params):
        return layout.pack_bias(dims, values["bias"])
    # Per-channel requantize: one (bias, multipliers, shifts) row group per column block
    # (hwgen/epilogue.py); a pass without the bias stage has zero bias rows.
    return layout.pack_bias_group(dims, values.get("bias"), values["mult"], values["shift"])


@dataclass(frozen=True, eq=False)
class _Compiled(CachedProgram):
    """What the standalone kernels share: a cached program with regions and figures."""

    @property
    def dims(self) -> GemmDims:
        m, n = self.meta["shape"]
        return _dims(self.config, m, n)

    @property
    def regions(self) -> dict[str, Region]:
        return {name: Region(name, int(a), int(n)) for name, (a, n) in self.meta["regions"].items()}

    @property
    def placement(self) -> dict[str, int] | None:
        return self.meta["placement"]

    def _write(self, name: str, blob: bytes) -> tuple[int, bytes]:
        addr, nbytes = self.meta["regions"][name]
        if len(blob) != nbytes:  # the layout code changed under the cached entry
            raise ValueError(f"operand {name} packs to {len(blob)} bytes but its region holds "
                             f"{nbytes}; clear the kernel cache")
        return int(addr), blob


@dataclass(frozen=True, eq=False)
class CompiledPass(_Compiled):
    """A cached epilogue pass and what is needed to run it on given operands.

    Attributes mirror :class:`fusion.kernels.program.CompiledGemm` where they mean the same
    (``config``, ``dims``, ``stages``, ``params``, ``program``, ``source``, ``reads``,
    ``bytes_loaded``, ``bytes_stored``, ``ideal_cycles``), plus ``src_dtype``, ``regions``
    and ``placement``.
    """

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(self.meta["stages"])

    @property
    def params(self) -> EpilogueParams:
        return EpilogueParams(**self.meta["quant"])

    @property
    def src_dtype(self) -> np.dtype:
        return np.dtype(self.meta["dtypes"]["src"])

    def _values(self, operands: Mapping[str, Any]) -> dict[str, np.ndarray]:
        what = f"epilogue pass ({', '.join(self.stages) or 'no stage'})"
        return {name: _check_value(name, operands.get(name), dtype, shape, what)
                for name, (dtype, shape) in self.meta["operands"].items()}

    def memory(self, src: np.ndarray, *, bias: np.ndarray | None = None,
               residual: np.ndarray | None = None, mult: np.ndarray | None = None,
               shift: np.ndarray | None = None) -> list[tuple[int, bytes]]:
        """``(word address, bytes)`` writes that put the operands where the program reads.

        Operands no stage uses are ignored. ``mult`` and ``shift`` are the per-channel
        requantize vectors (N int32 each, with ``params.per_channel``).

        Raises
        ------
        ValueError
            A missing operand, or one whose shape or values do not match the metadata
            (naming it and what the kernel was compiled for).
        """
        values = self._values({"src": src, "bias": bias, "residual": residual, "mult": mult,
                               "shift": shift})
        dims, writes = self.dims, [self._write("src", layout.pack_tiles(
            self.dims, values["src"], self.src_dtype.type))]
        if "bias" in self.meta["regions"]:
            writes.append(self._write("bias", _pack_bias_region(dims, self.params, self.stages,
                                                                values)))
        if "residual" in values:
            writes.append(self._write("residual", layout.pack_tiles(dims, values["residual"])))
        return writes

    def expected(self, src: np.ndarray, *, bias: np.ndarray | None = None,
                 residual: np.ndarray | None = None, mult: np.ndarray | None = None,
                 shift: np.ndarray | None = None) -> np.ndarray:
        """The reference result for these operands (numpy, no hardware), M x N."""
        values = self._values({"src": src, "bias": bias, "residual": residual, "mult": mult,
                               "shift": shift})
        extra = {name: values[name] for name in ("mult", "shift") if name in values}
        out = epilogue(values["src"], self.stages, self.params, bias=values.get("bias"),
                       residual=values.get("residual"), **extra)
        return to_dtype(out, self.out_dtype)


def _figures(config: VariantConfig, program: Any, rows: int, stored: int) -> dict[str, int]:
    loaded = load_bytes(config, program.instrs)
    w = config.port_bytes
    # Every unit at full rate with perfect overlap: an epilogue row a cycle, a word a cycle
    # on each memory channel.
    return {"bytes_loaded": loaded, "bytes_stored": stored,
            "ideal_cycles": max(rows, -(-loaded // w), -(-stored // w)),
            "program_words": len(program.words)}


def _meta(kind: str, config: VariantConfig, dims: GemmDims, regions: Mapping[str, Region],
          parts: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "variant": config.key(), "shape": [dims.M, dims.N],
            "dtypes": parts["dtypes"], "placement": parts["placement"],
            "regions": {name: [r.addr, r.nbytes] for name, r in regions.items()},
            "reads": {"out": [regions["out"].addr, regions["out"].nbytes]}, **extra}


def pass_key_parts(config: VariantConfig, M: int, N: int, *,  # noqa: N803
                   stages: Sequence[str], params: EpilogueParams | None = None,
                   src_dtype: Any = "int32", out_dtype: Any = "int32",
                   placement: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The cache key parts of an epilogue pass's program."""
    stages = check_stages(stages, config.epilogue)
    params = params if params is not None else EpilogueParams()
    src, out = _dtype(src_dtype, "src_dtype"), _dtype(out_dtype, "out_dtype")
    ops = _pass_operands(M, N, stages, params, src)
    return {"op": "pass", "variant": config.key(), "shape": [M, N],
            "dtypes": {**{name: dt for name, (dt, _) in ops.items()}, "out": out},
            "stages": list(stages), "quant": dataclasses.asdict(params),
            "placement": placement_key(placement)}


def compiled_pass(
    config: VariantConfig,
    M: int,  # noqa: N803 - the layout's customary names
    N: int,  # noqa: N803
    *,
    stages: Sequence[str],
    params: EpilogueParams | None = None,
    src_dtype: Any = "int32",
    out_dtype: Any = "int32",
    placement: Mapping[str, int] | None = None,
    cache: KernelCache | None = None,
) -> CompiledPass:
    """One memory-to-memory epilogue pass over an M x N tile-blocked tensor.

    Parameters
    ----------
    config : VariantConfig
        The variant to run on.
    M, N : int
        The tensor's shape.
    stages : sequence of str
        The stages to apply, an ordered subset of ``config.epilogue`` (empty: a copy that
        converts between the dtypes).
    params : EpilogueParams, optional
        The requantize, clamp and residual CSR values (identity defaults).
    src_dtype, out_dtype : {"int32", "int8"} or numpy dtype
        The element types of the input and of the output. An int8 input is sign-extended;
        an int8 output keeps the low byte of each lane (:func:`hwgen.reference.to_dtype`),
        which is exact after requant or residual.
    placement : mapping of str to int, optional
        The word address of every region of :func:`pass_regions` (exactly those); by default
        they are allocated first fit from word 0. Part of the cache key.
    cache : KernelCache, optional
        Where to look and store; without one the kernel is built every time.

    Returns
    -------
    CompiledPass

    Raises
    ------
    ValueError
        A stage not in the chain or out of order, a dtype other than int8 or int32, a
        placement that misses, adds or overlaps regions or runs past the memory, a tensor
        too large for the memory, or a tile that does not fit the epilogue scratchpad.
    """
    stages = check_stages(stages, config.epilogue)
    params = params if params is not None else EpilogueParams()
    src_dt, out_dt = _dtype(src_dtype, "src_dtype"), _dtype(out_dtype, "out_dtype")
    dims = _dims(config, M, N)
    what = f"{M}x{N} epilogue pass ({', '.join(stages) or 'no stage'})"
    regions = layout.place(config, _pass_sizes(dims, stages, params, src_dt, out_dt),
                           placement, what=what)
    parts = pass_key_parts(config, M, N, stages=stages, params=params, src_dtype=src_dt,
                           out_dtype=out_dt, placement=placement)

    def build() -> CompiledKernel:
        text = render("epilogue_pass.j2", **pass_context(
            dims, stages=stages, params=params, src=regions["src"], src_dt=DTYPES[src_dt],
            out=regions["out"], out_dt=DTYPES[out_dt], bias=regions.get("bias"),
            residual=regions.get("residual"), prefix="pass", halt=True))
        program = assemble_program(config, text, what=what)
        ops = _pass_operands(M, N, stages, params, src_dt)
        meta = _meta("pass", config, dims, regions, parts, stages=list(stages),
                     quant=dataclasses.asdict(params),
                     operands={name: [dt, shape] for name, (dt, shape) in ops.items()},
                     **_figures(config, program, dims.Mb * dims.Nb * dims.R,
                                regions["out"].nbytes))
        return CompiledKernel.create(program.words, program.text, meta)

    return CompiledPass(config, _lookup(config, parts, build, cache))


def _lookup(config: VariantConfig, parts: dict[str, Any], build: Any,
            cache: KernelCache | None) -> CompiledKernel:
    kernel = build() if cache is None else cache.get_or_build(parts, build)
    if kernel.metadata.get("variant") != config.key():
        raise ValueError(f"the cached kernel was compiled for variant "
                         f"{kernel.metadata.get('variant')!r}, not {config.key()!r}")
    return kernel


# -- element-wise max -----------------------------------------------------------------------
