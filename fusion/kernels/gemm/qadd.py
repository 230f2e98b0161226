"""The qadd kernel kind: an element-wise ``a_mult * a + b_mult * b`` as a GEMM.

The two inputs, viewed as rows of ``cols`` elements, sit side by side in A
(``A = [a | b]``, ``K = 2 x cols``) and the constant B is ``[[a_mult * I], [b_mult * I]]``
(int8), so the array computes ``a_mult * a + b_mult * b`` per element; the zero points go into
the bias and the requantize is the epilogue's. Exact, at half the epilogue's element rate.
Everything but how the host makes A is the GEMM's (:mod:`fusion.kernels.gemm.kind`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fusion.kernels.gemm.kind import GemmKind
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.program import rows_of
from hwgen.config import VariantConfig


class QaddKind(GemmKind):
    """A GEMM whose A is the kernel's two inputs side by side (see the module docstring)."""

    name = "qadd"

    def host_operands(self, config: VariantConfig, params: GemmParams,
                      inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        return {"a": np.concatenate([rows_of(x, params.M, config.cols) for x in inputs],
                                    axis=1)}


QADD = QaddKind()
