"""SCALE-Sim's output-stationary estimate, as a baseline the other models are shown beside.

SCALE-Sim (Samajdar et al., "A Systematic Methodology for Characterizing Scalability of DNN
Accelerators using SCALE-Sim", ISPASS 2020) times an output-stationary ``R x C`` array on an
``M x K x N`` GEMM as ``ceil(M/R) * ceil(N/C)`` folds of ``K + 2R + C - 2`` cycles each (fill
the operands, compute K, drain the outputs), less one. It is computed here from that formula:
the ``scalesim`` package itself crashes on numpy 2.4. It knows nothing of memory, epilogues or
tiling, so it is a yardstick, not a model hwgen prices with.
"""

from __future__ import annotations

from fusion.cost.model import CostModel, Features


def gemm_shape(features: Features) -> tuple[int, int, int] | None:
    """The ``(M, K, N)`` a kernel multiplies: a GEMM's shape, a convolution's im2col GEMM;
    None for kinds without one (passes, element-wise max, depthwise windows)."""
    if features.kind == "gemm":
        return features.M, features.K, features.N
    if features.kind == "conv":
        p = features.params
        return p.M, p.K, p.Cout
    return None


def scalesim_cycles(M: int, K: int, N: int, rows: int, cols: int) -> int:  # noqa: N803
    """``ceil(M/R) * ceil(N/C) * (K + 2R + C - 2) - 1`` for an ``R x C`` (rows x cols) array.

    Raises
    ------
    ValueError
        A size that is not positive.
    """
    for name, v in (("M", M), ("K", K), ("N", N), ("rows", rows), ("cols", cols)):
        if v < 1:
            raise ValueError(f"{name} must be positive for SCALE-Sim's estimate, not {v!r}")
    folds = -(-M // rows) * -(-N // cols)
    return folds * (K + 2 * rows + cols - 2) - 1


class ScaleSimModel(CostModel):
    """:func:`scalesim_cycles` of a kernel's GEMM on its variant's array."""

    name = "scalesim"

    def covers(self, features: Features) -> bool:
        """Whether the kernel has a GEMM shape for the formula."""
        return gemm_shape(features) is not None

    def predict(self, features: Features) -> float:
        """
        Raises
        ------
        ValueError
            A kind without a GEMM shape (see :meth:`covers`).
        """
        shape = gemm_shape(features)
        if shape is None:
            raise ValueError(f"SCALE-Sim's estimate needs an M x K x N GEMM; a {features.kind} "
                             f"kernel has none (check ScaleSimModel.covers first)")
        return float(scalesim_cycles(*shape, features.config.rows, features.config.cols))
