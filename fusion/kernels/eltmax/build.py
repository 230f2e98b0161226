"""Element-wise max of int8 tensors: the accelerator's max pooling.

``compiled_max`` chains ``n - 1`` standalone epilogue passes with only the residual stage in
max mode (CSR ``res_mode``): pass 1 reads ``in0`` and ``in1``, each later pass reads the
previous result and the next input, and the last writes ``out``. The compiler gathers each
pooling window position into one input plane on the host (:mod:`fusion.compiler.kernels`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.cache import CompiledKernel, KernelCache
from fusion.kernels.codegen import assemble_program, render
from fusion.kernels.epilogue import pass_context
from fusion.kernels.epipass.build import (
    _check_value,
    _Compiled,
    _dims,
    _figures,
    _lookup,
    _meta,
    _tensor_bytes,
)
from fusion.kernels.layout import GemmDims
from fusion.kernels.program import placement_key
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams


def _check_max(config: VariantConfig, n_inputs: int) -> None:
    if "residual" not in config.epilogue:
        raise ValueError(
            f"an element-wise max runs on the residual stage (in max mode), which this "
            f"variant's epilogue chain ({', '.join(config.epilogue) or 'empty'}) lacks; use a "
            f"variant generated with the residual stage")
    if not isinstance(n_inputs, int) or isinstance(n_inputs, bool) or n_inputs < 2:
        raise ValueError(f"an element-wise max needs n_inputs >= 2 tensors, not {n_inputs!r}")


def _max_sizes(dims: GemmDims, n_inputs: int) -> dict[str, int]:
    plane = _tensor_bytes(dims, "int8")
    sizes = {f"in{i}": plane for i in range(n_inputs)}
    # n - 1 passes; all but the last store an intermediate, alternating between two buffers
    # so that no pass reads the region it writes.
    sizes.update({f"tmp{t}": plane for t in range(min(2, n_inputs - 2))})
    sizes["out"] = plane
    return sizes


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
        As :func:`compiled_max`.
    """
    _check_max(config, n_inputs)
    return _max_sizes(_dims(config, M, N), n_inputs)


@dataclass(frozen=True, eq=False)
class CompiledMax(_Compiled):
    """A cached element-wise max of ``n_inputs`` int8 tensors.

    Attributes as for :class:`CompiledPass`; ``n_inputs`` the number of inputs.
    """

    @property
    def n_inputs(self) -> int:
        return int(self.meta["n_inputs"])

    def _values(self, inputs: Sequence[np.ndarray] | None,
                named: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        n = self.n_inputs
        if inputs is not None and named:
            raise ValueError("give the inputs of an element-wise max either as a sequence or "
                             "as in0=, in1=, ... keywords, not both")
        if inputs is None:
            unknown = sorted(set(named) - {f"in{i}" for i in range(n)})
            if unknown:
                raise ValueError(f"the element-wise max has inputs in0..in{n - 1}, not "
                                 f"{', '.join(unknown)}")
            inputs = [named.get(f"in{i}") for i in range(n)]
        elif isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
            raise ValueError(f"the inputs of an element-wise max are a sequence of {n} arrays, "
                             f"not {type(inputs).__name__}")
        if len(inputs) != n:
            raise ValueError(f"the element-wise max was compiled for {n} inputs, "
                             f"got {len(inputs)}")
        shape = self.meta["shape"]
        return [_check_value(f"in{i}", x, "int8", shape, "element-wise max")
                for i, x in enumerate(inputs)]

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
        return [self._write(f"in{i}", layout.pack_tiles(self.dims, x))
                for i, x in enumerate(self._values(inputs, named))]

    def expected(self, inputs: Sequence[np.ndarray] | None = None,
                 **named: np.ndarray) -> np.ndarray:
        """The reference result, ``np.maximum.reduce`` of the inputs (int8, M x N); the
        inputs as for :meth:`memory`."""
        return np.maximum.reduce(self._values(inputs, named)).astype(np.int8)


def max_key_parts(config: VariantConfig, M: int, N: int, n_inputs: int, *,  # noqa: N803
                  placement: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The cache key parts of an element-wise max's program."""
    return {"op": "max", "variant": config.key(), "shape": [M, N], "n_inputs": n_inputs,
            "dtypes": {**{f"in{i}": "int8" for i in range(n_inputs)}, "out": "int8"},
            "placement": placement_key(placement)}


def compiled_max(
    config: VariantConfig,
    M: int,  # noqa: N803 - the layout's customary names
    N: int,  # noqa: N803
    n_inputs: int,
    *,
    placement: Mapping[str, int] | None = None,
    cache: KernelCache | None = None,
) -> CompiledMax:
    """The element-wise max of ``n_inputs`` int8 M x N tensors, as one program.

    A chain of ``n_inputs - 1`` epilogue passes with only the residual stage in max mode
    (``EpilogueParams(residual_op="max")``): pass 1 takes ``in0`` as its input and ``in1`` as
    its residual, pass i the previous result and ``in{i}``; the intermediates alternate
    between ``tmp0`` and ``tmp1`` and the last pass writes ``out``. Each pass starts by
    waiting for the jobs before it, and only the last halts. Max pooling is this with one
    input per window position (the host gathers each position into a plane).

    Parameters
    ----------
    config : VariantConfig
        The variant; its epilogue chain must have the residual stage.
    M, N : int
        The shape of every input and of the output.
    n_inputs : int
        How many tensors, at least 2.
    placement : mapping of str to int, optional
        The word address of every region of :func:`max_regions` (exactly those); by default
        they are allocated first fit from word 0. Part of the cache key.
    cache : KernelCache, optional
        Where to look and store; without one the kernel is built every time.

    Returns
    -------
    CompiledMax

    Raises
    ------
    ValueError
        No residual stage in the variant, fewer than 2 inputs, a bad placement, a problem
        too large for the memory, or a program longer than the instruction memory.
    """
    _check_max(config, n_inputs)
    dims = _dims(config, M, N)
    what = f"{M}x{N} element-wise max of {n_inputs} inputs"
    regions = layout.place(config, _max_sizes(dims, n_inputs), placement, what=what)
    parts = max_key_parts(config, M, N, n_inputs, placement=placement)

    def build() -> CompiledKernel:
        params = EpilogueParams(residual_op="max")
        texts, src = [], regions["in0"]
        for i in range(1, n_inputs):
            last = i == n_inputs - 1
            dst = regions["out"] if last else regions[f"tmp{(i - 1) % 2}"]
            texts.append(render("epilogue_pass.j2", **pass_context(
                dims, stages=("residual",), params=params, src=src, src_dt="i8", out=dst,
                out_dt="i8", residual=regions[f"in{i}"], prefix=f"max{i}", halt=last)))
            src = dst
        program = assemble_program(config, "\n".join(texts), what=what)
        passes = n_inputs - 1
        meta = _meta("max", config, dims, regions, parts, n_inputs=n_inputs,
                     **_figures(config, program, passes * dims.Mb * dims.Nb * dims.R,
                                passes * regions["out"].nbytes))
        return CompiledKernel.create(program.words, program.text, meta)

    return CompiledMax(config, _lookup(config, parts, build, cache))
