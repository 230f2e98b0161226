"""The element-wise max kernel kind: the max of ``n`` int8 tensors, the accelerator's pooling.

The program chains ``n - 1`` standalone epilogue passes (``epilogue_pass.j2``) with only the
residual stage in max mode (CSR ``res_mode``, ``EpilogueParams(residual_op="max")``): pass 1
reads ``in0`` and ``in1``, each later pass the previous result and the next input, and the
last writes ``out``. The intermediates alternate between ``tmp0`` and ``tmp1`` (only as many
as the chain needs: none for 2 inputs, one for 3), so that no pass reads the region it writes.

Max pooling is this with one input per window position: the host gathers each position of
the pooling window (:class:`Window`) into one plane, padding with the int8 minimum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.ir import windows
from fusion.kernels import layout
from fusion.kernels.cache import KernelCache
from fusion.kernels.eltmax.build import MAX_MODE, TEMPLATE, build_max, max_dims, max_sizes
from fusion.kernels.eltmax.features import MaxFeatures
from fusion.kernels.epilogue import pass_fit_problem
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.program import (
    Kernel,
    compile_kernel,
    key_parts,
    regions_of,
    rows_of,
)
from fusion.kernels.protocol import Build, KernelKind, Operand, Refusal, check_sizes
from hwgen.config import VariantConfig
from hwgen.reference import INT8_MIN, EpilogueParams


@dataclass(frozen=True)
class Window:
    """A 2-D pooling window, as the ``maxpool`` op's attributes give it."""

    kernel_shape: tuple[int, ...]
    strides: tuple[int, ...] = (1, 1)
    dilations: tuple[int, ...] = (1, 1)
    pads: tuple[int, ...] = (0, 0, 0, 0)
    ceil_mode: int = 0


@dataclass(frozen=True, kw_only=True)
class MaxParams:
    """The element-wise max of ``n_inputs`` int8 ``M x N`` tensors.

    Parameters
    ----------
    M, N : int
        The shape of every input and of the output.
    n_inputs : int
        How many tensors, at least 2.
    window : Window, optional
        Host side only (not part of the program): the inputs are the positions of this
        pooling window over the kernel's one graph input (:meth:`MaxKind.host_operands`).

    Raises
    ------
    ValueError
        A non-positive dimension, or fewer than 2 inputs.
    """

    M: int
    N: int
    n_inputs: int
    window: Window | None = None

    def __post_init__(self) -> None:
        check_sizes(M=self.M, N=self.N)
        n = self.n_inputs
        if not isinstance(n, int) or isinstance(n, bool) or n < 2:
            raise ValueError(f"an element-wise max needs n_inputs >= 2 tensors, not {n!r}")


@dataclass(frozen=True, eq=False)
class MaxKernel(Kernel):
    """A compiled element-wise max, and what is needed to run it on given inputs."""

    @property
    def n_inputs(self) -> int:
        return int(self.signature.n_inputs)

    def _named(self, inputs: Sequence[np.ndarray] | None,
               named: Mapping[str, np.ndarray]) -> dict[str, Any]:
        n = self.n_inputs
        if inputs is not None and named:
            raise ValueError("give the inputs of an element-wise max either as a sequence or "
                             "as in0=, in1=, ... keywords, not both")
        if inputs is None:
            unknown = sorted(set(named) - {f"in{i}" for i in range(n)})
            if unknown:
                raise ValueError(f"the element-wise max has inputs in0..in{n - 1}, not "
                                 f"{', '.join(unknown)}")
            return dict(named)
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
            raise ValueError(f"the inputs of an element-wise max are a sequence of {n} arrays, "
                             f"not {type(inputs).__name__}")
        if len(inputs) != n:
            raise ValueError(f"the element-wise max was compiled for {n} inputs, "
                             f"got {len(inputs)}")
        return {f"in{i}": x for i, x in enumerate(inputs)}

    def memory(self, inputs: Sequence[np.ndarray] | None = None,
               **named: np.ndarray) -> list[tuple[int, bytes]]:
        """``(word address, bytes)`` writes of the inputs (M x N int8 each).

        The inputs are a sequence in order, or keywords ``in0=``, ``in1=``, ... (the region
        names, as a model compiler holds its operands).

        Raises
        ------
        ValueError
            The wrong number of inputs (or a missing or unknown name), or one of the wrong
            shape or out of int8.
        """
        return self.write(self._named(inputs, named))

    def expected(self, inputs: Sequence[np.ndarray] | None = None,
                 **named: np.ndarray) -> np.ndarray:
        """The reference result, ``np.maximum.reduce`` of the inputs (int8, M x N); the
        inputs as for :meth:`memory`."""
        return self.result_of(self._named(inputs, named))


class MaxKind(KernelKind):
    """The element-wise max of int8 tensors (see the module docstring)."""

    name = "max"
    template = TEMPLATE
    params_type = MaxParams
    kernel_type = MaxKernel
    features_type = MaxFeatures

    @staticmethod
    def _dims(config: VariantConfig, p: MaxParams) -> GemmDims:
        return max_dims(config, p.M, p.N)

    def variant_refusal(self, config: VariantConfig) -> Refusal | None:
        if "residual" in config.epilogue:
            return None
        return Refusal(
            self.name, "no_residual_stage",
            f"an element-wise max runs on the residual stage (in max mode), which this "
            f"variant's epilogue chain ({', '.join(config.epilogue) or 'empty'}) lacks; "
            f"use a variant generated with the residual stage", chain=config.epilogue)

    def legality(self, config: VariantConfig, params: MaxParams) -> Refusal | None:
        refusal = self.variant_refusal(config)
        if refusal is not None:
            return refusal
        problem = pass_fit_problem(self._dims(config, params), stages=("residual",),
                                   params=MAX_MODE, src_dt="i8")
        if problem is not None:
            return Refusal(self.name, "pass_does_not_fit", problem)
        return None

    def dims(self, params: MaxParams) -> tuple[int, int, int]:
        return params.M, 1, params.N

    def stages(self, params: MaxParams) -> tuple[str, ...]:
        return ("residual",)

    def epilogue(self, params: MaxParams) -> EpilogueParams:
        return MAX_MODE

    def operands(self, config: VariantConfig, params: MaxParams) -> dict[str, Operand]:
        return {f"in{i}": Operand("int8", (params.M, params.N)) for i in range(params.n_inputs)}

    def output(self, params: MaxParams) -> Operand:
        return Operand("int8", (params.M, params.N))

    def regions(self, config: VariantConfig, params: MaxParams) -> dict[str, int]:
        return max_sizes(self._dims(config, params), params.n_inputs)

    def key_params(self, params: MaxParams) -> dict[str, Any]:
        return {"shape": [params.M, params.N], "n_inputs": params.n_inputs}

    def build(self, config: VariantConfig, params: MaxParams,
              regions: Mapping[str, Region]) -> Build:
        return build_max(config, self._dims(config, params), params.n_inputs, regions,
                         what=self.describe(params))

    def pack(self, config: VariantConfig, params: MaxParams,
             values: Mapping[str, np.ndarray]) -> dict[str, bytes]:
        dims = self._dims(config, params)
        return {name: layout.pack_tiles(dims, x) for name, x in values.items()}

    def reference(self, params: MaxParams, values: Mapping[str, np.ndarray]) -> np.ndarray:
        inputs = [values[f"in{i}"] for i in range(params.n_inputs)]
        return np.maximum.reduce(inputs).astype(np.int8)

    def features(self, config: VariantConfig, params: MaxParams) -> MaxFeatures:
        return MaxFeatures(config=config, M=params.M, N=params.N, n_inputs=params.n_inputs)

    def describe(self, params: MaxParams, ops: str = "") -> str:
        return (f"max of {params.n_inputs} planes {params.M}x{params.N}"
                f"{f' [{ops}]' if ops else ''}")

    def host_operands(self, config: VariantConfig, params: MaxParams,
                      inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """The planes: the inputs themselves, or with a :class:`Window` every position of
        the window over the one input (padding reads the int8 minimum), each laid over
        ``M x N``."""
        p, w = params, params.window
        if w is None:
            planes = list(inputs)
        else:
            cols = windows.windows(inputs[0], w.kernel_shape, w.strides, w.dilations, w.pads,
                                   INT8_MIN, ceil_mode=w.ceil_mode)
            n, ch, kh, kw = cols.shape[:4]
            planes = cols.reshape(n, ch, kh * kw, -1).transpose(2, 0, 1, 3).reshape(kh * kw, -1)
        return {f"in{i}": rows_of(x, p.M, p.N) for i, x in enumerate(planes)}


MAX = MaxKind()


def compiled_max(
    config: VariantConfig,
    M: int,  # noqa: N803 - the layout's customary names
    N: int,  # noqa: N803
    n_inputs: int,
    *,
    placement: Mapping[str, int] | None = None,
    cache: KernelCache | None = None,
) -> MaxKernel:
    """The element-wise max of ``n_inputs`` int8 M x N tensors, as one program.

    Parameters
    ----------
    config : VariantConfig
        The variant; its epilogue chain must have the residual stage.
    M, N, n_inputs
        As for :class:`MaxParams`.
    placement, cache
        As for :func:`fusion.kernels.program.compile_kernel` (the regions are those of
        :func:`max_regions`).

    Returns
    -------
    MaxKernel

    Raises
    ------
    KernelRefused
        No residual stage in the variant.
    ValueError
        Fewer than 2 inputs, a bad placement, a problem too large for the memory, or a
        program longer than the instruction memory.
    """
    p = MaxParams(M=M, N=N, n_inputs=n_inputs)
    return compile_kernel(MAX, config, p, placement=placement, cache=cache)


def max_regions(config: VariantConfig, M: int, N: int, n_inputs: int) -> dict[str, int]:  # noqa: N803
    """The memory regions :func:`compiled_max` uses, without building the program.

    Returns
    -------
    dict of str to int
        ``name -> bytes`` in allocation order: ``in0`` .. ``in{n-1}``, ``tmp0`` (3 or more
        inputs), ``tmp1`` (4 or more), ``out``; each an int8 tile-blocked M x N tensor.

    Raises
    ------
    ValueError
        As :func:`compiled_max` does before building.
    """
    return regions_of(MAX, config, MaxParams(M=M, N=N, n_inputs=n_inputs))


def max_key_parts(config: VariantConfig, M: int, N: int, n_inputs: int, *,  # noqa: N803
                  placement: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The cache key parts of an element-wise max's program."""
    return key_parts(MAX, config, MaxParams(M=M, N=N, n_inputs=n_inputs), placement)
