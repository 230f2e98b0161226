"""GEMM kernels through the kernel cache: compile once per signature, pack operands per run.

:func:`fusion.kernels.gemm.build.build_gemm` takes the operand arrays and returns one object with
both halves of a kernel: the program (with its memory layout), which depends only on the
*signature*, and the memory image and expected result, which depend on the operand *values*.
Only the first half is worth caching: the same layer runs with new activations every time,
and the operand bytes are large. So the key (:func:`gemm_key_parts`) is the signature, which
is exactly what the program depends on:

- the variant (its ``key()``: array shape, port width, scratchpad and imem depths, chain);
- the shape ``M, K, N`` and the operand/result dtypes;
- the epilogue stages and fused/unfused;
- the quantization (the requantize and clamp CSR values are immediates in the program, and
  the clamp range decides which unfused intermediates may be stored as int8);
- the requested tiling (``None``: the default tiler's choice, recorded in the metadata);
- the placement of the regions (``None``: allocated from word 0): addresses are immediates.

The value is a :class:`~fusion.kernels.cache.CompiledKernel`: the words, the listing, and metadata
naming the regions each operand goes to. :class:`CompiledGemm` packs operands into those
regions (checking their shapes against the metadata first) and decodes the output. On a miss
the program is built by ``build_gemm`` on zero operands of the right shapes; the layout and
the program do not depend on the values.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.cache import CompiledKernel, KernelCache
from fusion.kernels.gemm.build import build_gemm, gemm_regions
from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import Tiling
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, check_stages, gemm_epilogue, output_dtype

#: Operand -> (dtype name, shape as a function of M, K, N); bias and residual only when a
#: stage reads them, mult and shift (per-channel requantize, one value per output column)
#: only when ``params.per_channel``.
OPERANDS = {
    "a": ("int8", lambda m, k, n: [m, k]),
    "b": ("int8", lambda m, k, n: [k, n]),
    "bias": ("int32", lambda m, k, n: [n]),
    "residual": ("int8", lambda m, k, n: [m, n]),
    "mult": ("int32", lambda m, k, n: [n]),
    "shift": ("int32", lambda m, k, n: [n]),
}


def placement_key(placement: Mapping[str, int] | None) -> dict[str, int] | None:
    """A placement as key/metadata JSON: ``{name: word address}`` sorted by name, or None.

    Check the placement against the kernel's regions first (:func:`fusion.kernels.layout.place`);
    this only normalizes it (numpy integers become ints).

    Raises
    ------
    ValueError
        If ``placement`` is not a mapping of names to integers.
    """
    if placement is None:
        return None
    if not isinstance(placement, Mapping):
        raise ValueError(f"a placement maps region names to word addresses, not "
                         f"{type(placement).__name__}")
    out = {}
    for name in sorted(placement, key=str):
        addr = placement[name]
        if not isinstance(name, str) or not isinstance(addr, int | np.integer) or \
                isinstance(addr, bool):
            raise ValueError(f"a placement maps region names to integer word addresses, not "
                             f"{name!r} -> {addr!r}")
        out[name] = int(addr)
    return out


def _operand_names(stages: Sequence[str], per_channel: bool = False) -> list[str]:
    return (["a", "b"] + [name for name in ("bias", "residual") if name in stages]
            + (["mult", "shift"] if per_channel else []))


def gemm_key_parts(config: VariantConfig, M: int, K: int, N: int, *,  # noqa: N803
                   stages: Sequence[str] = (), fused: bool = True,
                   tiling: Tiling | None = None,
                   params: EpilogueParams | None = None,
                   placement: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The cache key parts of a GEMM kernel's program (see the module docstring)."""
    stages = check_stages(stages, config.epilogue)
    params = params if params is not None else EpilogueParams()
    return {
        "op": "gemm", "variant": config.key(), "shape": [M, K, N],
        "dtypes": {**{name: OPERANDS[name][0]
                      for name in _operand_names(stages, params.per_channel)},
                   "out": output_dtype(stages).name},
        "stages": list(stages), "fused": bool(fused),
        "quant": dataclasses.asdict(params),
        "tiling": dataclasses.asdict(tiling) if tiling is not None else None,
        "placement": placement_key(placement),
    }


@dataclass(frozen=True, eq=False)
class CachedProgram:
    """What every cached kernel has: a program from the kernel cache and its metadata
    (regions read back, bytes moved, the ideal cycles, the output type).

    :class:`CompiledGemm` and the standalone kernels of :mod:`fusion.kernels.epipass.build` add
    their
    operands and their ``dims`` (the tile geometry :meth:`decode` unpacks with).
    """

    config: VariantConfig
    kernel: CompiledKernel

    @functools.cached_property
    def meta(self) -> dict[str, Any]:
        return self.kernel.metadata

    @property
    def program(self) -> list[int]:
        return list(self.kernel.words)

    @property
    def source(self) -> str:
        return self.kernel.source

    @property
    def reads(self) -> dict[str, tuple[int, int]]:
        return {name: (int(a), int(n)) for name, (a, n) in self.meta["reads"].items()}

    @property
    def bytes_loaded(self) -> int:
        return int(self.meta["bytes_loaded"])

    @property
    def bytes_stored(self) -> int:
        return int(self.meta["bytes_stored"])

    @property
    def ideal_cycles(self) -> int:
        return int(self.meta["ideal_cycles"])

    @property
    def out_dtype(self) -> np.dtype:
        return np.dtype(self.meta["dtypes"]["out"])

    def decode(self, outputs: Mapping[str, Any] | bytes | np.ndarray) -> np.ndarray:
        """The M x N result from the bytes read back at :attr:`reads` (``"out"``).

        ``outputs`` maps ``"out"`` to its bytes (bytes, bytearray or a uint8 array), or is
        those bytes itself.
        """
        return layout.unpack_output(self.dims, outputs, self.out_dtype)


@dataclass(frozen=True, eq=False)
class CompiledGemm(CachedProgram):
    """A cached GEMM program and what is needed to run it on given operands.

    Attributes mirror :class:`fusion.kernels.gemm.build.GemmKernel` where they mean the same
    (``config``, ``dims``, ``stages``, ``fused``, ``tiling``, ``params``, ``program``,
    ``source``, ``reads``, ``bytes_loaded``, ``bytes_stored``, ``ideal_cycles``), so the cost
    model's features can be taken from either.
    """

    @property
    def dims(self) -> GemmDims:
        m, k, n = self.meta["shape"]
        return GemmDims(self.config, m, k, n)

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(self.meta["stages"])

    @property
    def fused(self) -> bool:
        return bool(self.meta["fused"])

    @property
    def tiling(self) -> Tiling:
        return Tiling(**self.meta["tiling"])

    @property
    def params(self) -> EpilogueParams:
        return EpilogueParams(**self.meta["quant"])

    def check_operands(self, operands: Mapping[str, np.ndarray | None]) -> None:
        """Refuse operands the kernel was not compiled for (shape, or a missing one).

        Raises
        ------
        ValueError
            Naming the operand, its shape and the shape the kernel expects.
        """
        m, k, n = self.meta["shape"]
        for name, want in self.meta["operands"].items():
            value = operands.get(name)
            if value is None:
                raise ValueError(f"the kernel ({', '.join(self.stages) or 'no epilogue'}) "
                                 f"needs a {name} operand of shape {tuple(want)}")
            if list(np.shape(value)) != want:
                raise ValueError(f"operand {name} has shape {np.shape(value)}, the kernel was "
                                 f"compiled for {tuple(want)} (M={m}, K={k}, N={n})")

    def memory(self, a: np.ndarray, b: np.ndarray, *, bias: np.ndarray | None = None,
               residual: np.ndarray | None = None, mult: np.ndarray | None = None,
               shift: np.ndarray | None = None) -> list[tuple[int, bytes]]:
        """``(word address, bytes)`` writes that put the operands where the program reads.

        Per channel (``params.per_channel``), ``mult`` and ``shift`` (N values each) go with
        the bias into the bias region's groups (:func:`fusion.kernels.layout.pack_bias_group`).
        """
        operands = {"a": a, "b": b, "bias": bias, "residual": residual, "mult": mult,
                    "shift": shift}
        self.check_operands(operands)
        dims, regions = self.dims, self.meta["regions"]
        pack = {"a": layout.pack_a, "b": layout.pack_b, "bias": layout.pack_bias,
                "residual": lambda d, x: layout.pack_tiles(d, x, np.int8)}
        per_channel = self.params.per_channel
        names = [name for name in self.meta["operands"] if name not in ("mult", "shift")]
        if per_channel:  # one region holds bias (or zeros), multipliers and shifts
            names = [name for name in names if name != "bias"] + ["bias"]
            pack["bias"] = lambda d, _: layout.pack_bias_group(
                d, bias if "bias" in self.stages else None, mult, shift)
        writes = []
        for name in names:
            blob = pack[name](dims, operands[name])
            addr, nbytes = regions[name]
            if len(blob) != nbytes:  # the layout code changed under the cached entry
                raise ValueError(f"operand {name} packs to {len(blob)} bytes but its region "
                                 f"holds {nbytes}; clear the kernel cache")
            writes.append((int(addr), blob))
        return writes

    def expected(self, a: np.ndarray, b: np.ndarray, *, bias: np.ndarray | None = None,
                 residual: np.ndarray | None = None, mult: np.ndarray | None = None,
                 shift: np.ndarray | None = None) -> np.ndarray:
        """The reference result for these operands (numpy, no hardware); ``mult`` and
        ``shift`` are the per-channel requantize vectors (needed when
        ``params.per_channel``)."""
        return gemm_epilogue(a, b, self.stages, self.params, bias=bias, residual=residual,
                             mult=mult, shift=shift)


def _build(config: VariantConfig, M: int, K: int, N: int, stages: tuple[str, ...],  # noqa: N803
           fused: bool, tiling: Tiling | None, params: EpilogueParams,
           parts: dict[str, Any]) -> CompiledKernel:
    shapes = {name: OPERANDS[name][1](M, K, N)
              for name in _operand_names(stages, params.per_channel)}
    zeros = {name: np.zeros(shape, np.dtype(OPERANDS[name][0]))
             for name, shape in shapes.items()}
    kernel = build_gemm(config, M, K, N, stages=stages, fused=fused, tiling=tiling,
                        params=params, placement=parts["placement"], **zeros)
    meta = {
        "kind": "gemm", "variant": config.key(), "shape": [M, K, N], "stages": list(stages),
        "fused": fused, "tiling": dataclasses.asdict(kernel.tiling),
        "quant": dataclasses.asdict(params), "dtypes": parts["dtypes"], "operands": shapes,
        "regions": {name: [r.addr, r.nbytes] for name, r in kernel.regions.items()},
        "reads": {name: list(v) for name, v in kernel.reads.items()},
        "bytes_loaded": kernel.bytes_loaded, "bytes_stored": kernel.bytes_stored,
        "ideal_cycles": kernel.ideal_cycles, "program_words": len(kernel.program),
        "placement": parts["placement"],
    }
    return CompiledKernel.create(kernel.program, kernel.source, meta)


def compiled_gemm(
    config: VariantConfig,
    M: int,  # noqa: N803 - the GEMM's customary names
    K: int,  # noqa: N803
    N: int,  # noqa: N803
    *,
    stages: Sequence[str] = (),
    fused: bool = True,
    tiling: Tiling | None = None,
    params: EpilogueParams | None = None,
    placement: Mapping[str, int] | None = None,
    cache: KernelCache | None = None,
) -> CompiledGemm:
    """The program of ``epilogue(a @ b)`` on ``config``, from ``cache`` when it has it.

    Parameters
    ----------
    config, M, K, N, stages, fused, tiling, params, placement
        As for :func:`fusion.kernels.gemm.build.build_gemm`, without the operands. The placement
        (word addresses of the regions of :func:`fusion.kernels.gemm.build.gemm_regions`) is part of
        the key: the program's address immediates depend on it.
    cache : KernelCache, optional
        Where to look and store; without one the kernel is built every time.

    Returns
    -------
    CompiledGemm

    Raises
    ------
    ValueError
        As ``build_gemm`` does for a problem that does not fit the variant (never cached).
    """
    stages = check_stages(stages, config.epilogue)
    params = params if params is not None else EpilogueParams()
    if placement is not None:  # refuse a bad placement before looking it up
        layout.place(config, gemm_regions(config, M, K, N, stages=stages, fused=fused,
                                          params=params), placement, what=f"{M}x{K}x{N} GEMM")
    parts = gemm_key_parts(config, M, K, N, stages=stages, fused=fused, tiling=tiling,
                           params=params, placement=placement)

    def build() -> CompiledKernel:
        return _build(config, M, K, N, stages, bool(fused), tiling, params, parts)

    kernel = build() if cache is None else cache.get_or_build(parts, build)
    if kernel.metadata.get("variant") != config.key():
        raise ValueError(f"the cached kernel was compiled for variant "
                         f"{kernel.metadata.get('variant')!r}, not {config.key()!r}")
    return CompiledGemm(config, kernel)
