"""What the compiler may know of the data a plan will run on: which elements of the model's
inputs are exactly zero.

A run's input is known before its plan is compiled (``hwgen run MODEL --input FILE``), and a
GEMM whose A the host quantizes from a model input sees, in every tile whose elements are all
zero, its zero point only: an exact zero quantizes to the zero point whatever the scale. The
lowering (:func:`fusion.compiler.kernels.spec_for`) gives such a GEMM the tile flags of its A
(:attr:`fusion.kernels.gemm.params.GemmParams.flags`), and the engine prices the
zero-skipping program (:mod:`fusion.kernels.gemm.skip`) for them beside the dense ones. The
flags only price: the program reads the flags the host writes for the data it runs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fusion.ir.graph import Graph
from fusion.kernels.gemm.skip import tile_flags
from fusion.kernels.layout import GemmDims
from hwgen.config import VariantConfig

#: The ops between a model input and a GEMM's A that keep its zeros where they are: the
#: host's quantize (0 maps to the zero point) and views of the same values.
_KEEP_ZEROS = frozenset({"quantize", "Reshape", "Flatten", "reshape", "flatten"})


@dataclass(frozen=True, eq=False)
class ZeroHints:
    """Which elements of each model input are exactly zero.

    Parameters
    ----------
    masks : mapping of str to ndarray of bool
        Input name -> a mask of its shape (True: the element is 0).
    """

    masks: Mapping[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, inputs: Mapping[str, np.ndarray]) -> ZeroHints:
        """The hints of a run's inputs."""
        return cls({name: np.asarray(x) == 0 for name, x in inputs.items()})

    def a_flags(self, graph: Graph, config: VariantConfig, tensor: str, M: int,  # noqa: N803
                K: int) -> tuple[tuple[bool, ...], ...] | None:  # noqa: N803
        """The tile flags of a GEMM's ``M x K`` A (``tensor``) when the host made it from a
        model input through ops that keep its zeros; None when nothing is known of it."""
        name, quantized = tensor, False
        while name not in self.masks:
            node = graph.producer(name)
            if node is None or node.op not in _KEEP_ZEROS or not node.inputs:
                return None
            quantized |= node.op == "quantize"
            name = node.inputs[0]
        if not quantized:  # an integer input's 0 is not its zero point
            return None
        mask = self.masks[name]
        if mask.size != M * K:
            return None
        dims = GemmDims(config, M, K, 1)
        # an element that is 0 holds the zero point: a tile of them is "all zero point"
        flags = tile_flags(dims, mask.reshape(M, K).astype(np.int8), 1)
        return tuple(tuple(bool(f) for f in row) for row in flags)
