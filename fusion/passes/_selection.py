"""A GEMM by a 0/1 selection matrix: a layout change the array makes exactly.

Each column of the matrix holds one 1, so each output is one input: the ``qmatmul`` sums it,
less ``rows``' zero point, at ``rows``' scale, and a ``requant`` by 1 to ``rows``' own
quantization adds the zero point back (exact, half to even never rounds). Its
multiply-accumulates are not the model's (``asked=0``: utilization does not count them).
A channel shuffle's permutation (:mod:`fusion.passes.channel_shuffle`) and a relayout copy's
identity (:mod:`fusion.passes.relayout_copy`) are both one.
"""

from __future__ import annotations

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Quant
from fusion.passes._edit import Edit


def selection_gemm(edit: Edit, base: str, rows: str, matrix: np.ndarray, what: str, *,
                   group: int | None = None) -> str:
    """Add ``requant(qmatmul(rows, matrix))`` to ``edit``; the requantized output's name.

    Parameters
    ----------
    edit : Edit
    base : str
        Name prefix of the new nodes (``{base}/qmatmul``, ``{base}/requant``).
    rows : str
        The 8-bit GEMM rows, quantized per tensor, selected from.
    matrix : numpy.ndarray
        int8 ``[K, N]``, 0 or 1, one 1 a column; the constant ``{base}/{what}``.
    what : str
        The matrix's name after ``base``.
    group : int, optional
        The ``qmatmul``'s ``group``: the identity's columns grouped one channel a group
        reduce over 8 rows a tile (:func:`fusion.compiler.kernels.grouping`).
    """
    y = edit.graph.tensors[rows]
    selector = edit.const(f"{base}/{what}", matrix, quant=Quant(1.0, 0))
    attrs = {"group": group} if group else {}
    acc = edit.node(f"{base}/qmatmul", "qmatmul", [rows, selector],
                    quant=Quant(float(y.quant.scale[0]), 0), **attrs, asked=0)
    return edit.node(f"{base}/requant", "requant", [acc], quant=y.quant,
                     **ops.requant_attrs(1.0, int(y.quant.zero_point[0]), out_dtype=y.dtype,
                                         round_even=True))
