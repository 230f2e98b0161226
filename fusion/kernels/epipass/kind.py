"""The epilogue-pass kernel kind: epilogue stages alone, one memory-to-memory pass.

A model compiler runs the epilogue stages on their own where no GEMM precedes them (a
requantize or a residual add between layers). A pass streams a tile-blocked ``M x N`` tensor
(``[Mb][Nb][R][C]``, :mod:`fusion.kernels.layout`; int32 via ``e32`` or int8 via ``e8``) through
the epilogue scratchpad and its stages (:func:`fusion.kernels.epilogue.pass_context`,
``epilogue_pass.j2``), and stores it in the same layout as int32 or int8. The geometry is that
of an ``M x 1 x N`` GEMM (:class:`fusion.kernels.layout.GemmDims`, K unused).

Regions, in allocation order: ``src``, ``bias`` (for the bias stage or per-channel
requantize: :func:`fusion.kernels.layout.pack_bias_group`), ``residual`` (int8 tiles, for the
residual stage), ``out``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.cache import KernelCache
from fusion.kernels.epilogue import (
    epilogue_operands,
    pack_epilogue,
    pass_fit_problem,
)
from fusion.kernels.epipass.build import (
    DTYPES,
    TEMPLATE,
    build_pass,
    pass_dims,
    pass_sizes,
)
from fusion.kernels.epipass.columns import needs_columns
from fusion.kernels.epipass.features import PassFeatures
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.program import (
    Kernel,
    compile_kernel,
    key_parts,
    regions_of,
)
from fusion.kernels.protocol import (
    Build,
    KernelKind,
    Operand,
    Refusal,
    check_epilogue,
    check_sizes,
    stage_refusal,
)
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, epilogue, to_dtype


def lane_dtype(value: Any, what: str) -> str:
    """``value`` (a name or numpy dtype) as ``"int8"`` or ``"int32"``.

    Raises
    ------
    ValueError
        Any other type, naming ``what``.
    """
    try:
        name = np.dtype(value).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"{what} must be int8 or int32, not {value!r}")
    return name


@dataclass(frozen=True, kw_only=True)
class PassParams:
    """One pass of ``stages`` over an ``M x N`` tensor.

    Parameters
    ----------
    M, N : int
        The tensor's shape.
    stages : tuple of str
        The stages to apply, in the variant's chain order (empty: a copy that converts
        between the dtypes).
    epilogue : EpilogueParams
        The requantize, clamp and residual CSR values (identity defaults).
    src_dtype, out_dtype : {"int32", "int8"} or numpy dtype
        The element types of the input and of the output. An int8 input is sign-extended;
        an int8 output keeps the low byte of each lane (:func:`hwgen.reference.to_dtype`),
        which is exact after requant or residual.

    Raises
    ------
    ValueError
        A non-positive dimension, a dtype other than int8 or int32, or per-channel
        requantize without the requant stage.
    """

    M: int
    N: int
    stages: tuple[str, ...] = ()
    epilogue: EpilogueParams = field(default_factory=EpilogueParams)
    src_dtype: str = "int32"
    out_dtype: str = "int32"

    def __post_init__(self) -> None:
        check_sizes(M=self.M, N=self.N)
        if isinstance(self.stages, str):
            raise ValueError(f"stages must be a sequence of stage names, not the string "
                             f"{self.stages!r}")
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "src_dtype", lane_dtype(self.src_dtype, "src_dtype"))
        object.__setattr__(self, "out_dtype", lane_dtype(self.out_dtype, "out_dtype"))
        check_epilogue(self.stages, self.epilogue, self.src_dtype)


@dataclass(frozen=True, eq=False)
class PassKernel(Kernel):
    """A compiled epilogue pass, and what is needed to run it on given operands."""

    @property
    def src_dtype(self) -> np.dtype:
        return np.dtype(self.signature.src_dtype)

    def memory(self, src: np.ndarray | None = None,
               **values: np.ndarray | None) -> list[tuple[int, bytes]]:
        """``(word address, bytes)`` writes that put the operands where the program reads.

        Operands no stage uses are ignored. ``mult`` and ``shift`` are the per-channel
        requantize vectors (N int32 each, with ``params.per_channel``).

        Raises
        ------
        ValueError
            A missing operand, or one whose shape or values do not match the metadata
            (naming it and what the kernel was compiled for).
        """
        return self.write({"src": src, **values})

    def expected(self, src: np.ndarray | None = None, **values: np.ndarray | None) -> np.ndarray:
        """The reference result for these operands (numpy, no hardware), M x N."""
        return self.result_of({"src": src, **values})


class PassKind(KernelKind):
    """Epilogue stages alone, memory to memory (see the module docstring)."""

    name = "pass"
    template = TEMPLATE
    params_type = PassParams
    kernel_type = PassKernel
    features_type = PassFeatures
    const_regions = frozenset({"bias"})

    @staticmethod
    def _dims(config: VariantConfig, p: PassParams) -> GemmDims:
        return pass_dims(config, p.M, p.N)

    def legality(self, config: VariantConfig, params: PassParams) -> Refusal | None:
        p = params
        refusal = stage_refusal(self.name, p.stages, config.epilogue)
        if refusal is not None:
            return refusal
        dims, src_dt = self._dims(config, p), DTYPES[p.src_dtype]
        problem = pass_fit_problem(dims, stages=p.stages, params=p.epilogue, src_dt=src_dt)
        if problem is not None and not needs_columns(dims, stages=p.stages, params=p.epilogue,
                                                     src_dt=src_dt):
            return Refusal(self.name, "pass_does_not_fit", problem)
        return None

    def dims(self, params: PassParams) -> tuple[int, int, int]:
        return params.M, 1, params.N

    def stages(self, params: PassParams) -> tuple[str, ...]:
        return params.stages

    def epilogue(self, params: PassParams) -> EpilogueParams:
        return params.epilogue

    def operands(self, config: VariantConfig, params: PassParams) -> dict[str, Operand]:
        p = params
        return {"src": Operand(p.src_dtype, (p.M, p.N)),
                **epilogue_operands(p.stages, p.epilogue, p.M, p.N)}

    def output(self, params: PassParams) -> Operand:
        return Operand(params.out_dtype, (params.M, params.N))

    def regions(self, config: VariantConfig, params: PassParams) -> dict[str, int]:
        p = params
        return pass_sizes(self._dims(config, p), p.stages, p.epilogue, p.src_dtype,
                          p.out_dtype)

    def key_params(self, params: PassParams) -> dict[str, Any]:
        p = params
        return {"shape": [p.M, p.N], "stages": list(p.stages),
                "quant": dataclasses.asdict(p.epilogue), "src_dtype": p.src_dtype,
                "out_dtype": p.out_dtype}

    def build(self, config: VariantConfig, params: PassParams,
              regions: Mapping[str, Region]) -> Build:
        p = params
        return build_pass(config, self._dims(config, p), p.stages, p.epilogue, p.src_dtype,
                          p.out_dtype, regions, self.describe(p))

    def pack(self, config: VariantConfig, params: PassParams,
             values: Mapping[str, np.ndarray]) -> dict[str, bytes]:
        p, dims = params, self._dims(config, params)
        # per channel, a pass without the bias stage still loads the groups (zero bias rows)
        return {"src": layout.pack_tiles(dims, values["src"], np.dtype(p.src_dtype).type),
                **pack_epilogue(dims, p.stages, p.epilogue, values)}

    def reference(self, params: PassParams, values: Mapping[str, np.ndarray]) -> np.ndarray:
        extra = {k: v for k, v in values.items() if k != "src"}
        out = epilogue(values["src"], params.stages, params.epilogue, **extra)
        return to_dtype(out, np.dtype(params.out_dtype))

    def features(self, config: VariantConfig, params: PassParams) -> PassFeatures:
        p = params
        return PassFeatures(config=config, M=p.M, N=p.N, stages=p.stages, epilogue=p.epilogue,
                            src_dtype=p.src_dtype, out_dtype=p.out_dtype)

    def describe(self, params: PassParams, ops: str = "") -> str:
        p = params
        return (f"pass {p.M}x{p.N} {p.src_dtype}->{p.out_dtype}{f' [{ops}]' if ops else ''} "
                f"stages={','.join(p.stages)}")

    def host_operands(self, config: VariantConfig, params: PassParams,
                      inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        shape = (params.M, params.N)
        ops = {"src": np.asarray(inputs[0]).reshape(shape)}
        if "residual" in params.stages:
            ops["residual"] = np.asarray(inputs[1]).reshape(shape)
        return ops

    def inputs_in_place(self, params: PassParams) -> dict[str, int]:
        return {"src": 0, **({"residual": 1} if "residual" in params.stages else {})}


PASS = PassKind()


def pass_params(M: int, N: int, *, stages: Sequence[str] = (),  # noqa: N803
                params: EpilogueParams | None = None, src_dtype: Any = "int32",
                out_dtype: Any = "int32") -> PassParams:
    """:class:`PassParams` from the builder's customary arguments."""
    return PassParams(M=M, N=N, stages=stages,
                      epilogue=params if params is not None else EpilogueParams(),
                      src_dtype=src_dtype, out_dtype=out_dtype)


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
) -> PassKernel:
    """One memory-to-memory epilogue pass over an M x N tile-blocked tensor.

    Parameters
    ----------
    config : VariantConfig
        The variant to run on.
    M, N, stages, params, src_dtype, out_dtype
        As for :class:`PassParams` (``params`` is its ``epilogue``).
    placement, cache
        As for :func:`fusion.kernels.program.compile_kernel` (the regions are those of
        :func:`pass_regions`).

    Returns
    -------
    PassKernel

    Raises
    ------
    KernelRefused
        A stage not in the chain or out of order, or a tile that does not fit the epilogue
        scratchpad.
    ValueError
        A dtype other than int8 or int32, a placement that misses, adds or overlaps regions
        or runs past the memory, or a tensor too large for the memory.
    """
    p = pass_params(M, N, stages=stages, params=params, src_dtype=src_dtype,
                    out_dtype=out_dtype)
    return compile_kernel(PASS, config, p, placement=placement, cache=cache)


def pass_regions(config: VariantConfig, M: int, N: int, *,  # noqa: N803
                 stages: Sequence[str], params: EpilogueParams | None = None,
                 src_dtype: Any = "int32", out_dtype: Any = "int32") -> dict[str, int]:
    """The memory regions :func:`compiled_pass` uses, without building the program:
    ``name -> bytes`` in allocation order (see the module docstring).

    Raises
    ------
    ValueError
        As :func:`compiled_pass` does before building.
    """
    p = pass_params(M, N, stages=stages, params=params, src_dtype=src_dtype,
                    out_dtype=out_dtype)
    return regions_of(PASS, config, p)


def pass_key_parts(config: VariantConfig, M: int, N: int, *,  # noqa: N803
                   stages: Sequence[str], params: EpilogueParams | None = None,
                   src_dtype: Any = "int32", out_dtype: Any = "int32",
                   placement: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The cache key parts of an epilogue pass's program."""
    p = pass_params(M, N, stages=stages, params=params, src_dtype=src_dtype,
                    out_dtype=out_dtype)
    return key_parts(PASS, config, p, placement)
