"""Batched quantized matmuls with a constant weight: one 2-D GEMM over the batch.

ONNX's ``MatMul`` (``QLinearMatMul``, ``MatMulInteger``) broadcasts over leading axes: a
``[B, M, K]`` activation times a constant ``[B, K, N]`` weight is ``B`` independent GEMMs. The
array takes a 2-D ``K x N`` weight, so this pass rewrites such a ``qmatmul`` into one, with
host layout steps (``reshape``, ``transpose``: data movement, no arithmetic) around it:

- **batched activation** (``a`` is ``[*batch, M, K]``, ``b`` is ``[*batch, K, N]``, ``G`` the
  product of the batch axes): the activation is laid out as ``[M, G*K]`` (each row holds its
  ``G`` batches' rows side by side) and multiplied by the block-diagonal ``[G*K, G*N]``
  weight whose block ``g`` is ``b[g]``; column block ``g`` of the ``[M, G*N]`` result is
  ``a[g] @ b[g]``. The qmatmul carries ``group=G``: the grouped GEMM reduces each column
  block over its own ``K`` rows where the array's columns allow
  (:func:`fusion.compiler.kernels.grouping`).
- **shared activation** (``a`` is 2-D, broadcast over the weight's batch): the weights sit
  side by side, ``[K, G*N]``, and the result's column block ``g`` is ``a @ b[g]``.

Either way the result goes back to ``[*batch, M, N]`` by a reshape and a transpose, and the
epilogue after the qmatmul (requantize, per channel along N too) reads it as before.

Exactness, and the zero points: the off-diagonal blocks are filled with the weight's zero
point of their column, not 0, so that :mod:`fusion.passes.weight_zero_point` (which runs
after this pass) folds them to ``w - zw = 0``; a per-channel weight's scales and zero points
(along N) repeat once per batch. The activation's zero point correction ``-za * colsum(w')``
sums only a column's own block, the others being 0. The integers are the same as the ``G``
GEMMs', term for term.
"""

from __future__ import annotations

import math

import numpy as np

from fusion.ir.graph import Graph, Node, Quant
from fusion.passes._edit import Edit, rewrite_each


def _tiled(q: Quant | None, times: int) -> Quant | None:
    """A per-channel (last axis) quantization repeated ``times`` along that axis."""
    if q is None or not q.per_channel:
        return q
    return Quant(q.scale * times, q.zero_point * times, -1)


def _column_zero_points(q: Quant | None, n: int) -> np.ndarray:
    if q is None:
        return np.zeros(n, np.int64)
    return np.broadcast_to(np.array(q.zero_point, np.int64), (n,))


def batched_weight(w: np.ndarray, zero_points: np.ndarray, shared: bool) -> np.ndarray:
    """The 2-D weight of a ``[G, K, N]`` weight ``w``: side by side (``shared``: one
    activation for every batch, ``[K, G*N]``) or block-diagonal (``[G*K, G*N]``, the
    off-diagonal entries each column's zero point, so that they stand for 0).

    Parameters
    ----------
    w : ndarray
        ``[G, K, N]``, any integer dtype (kept).
    zero_points : ndarray
        ``N`` zero points, one per column of ``w[g]``.
    shared : bool
    """
    g, k, n = w.shape
    if shared:
        return np.concatenate(list(w), axis=1)
    out = np.empty((g * k, g * n), w.dtype)
    out[...] = np.tile(zero_points.astype(w.dtype), g)
    for i in range(g):
        out[i * k:(i + 1) * k, i * n:(i + 1) * n] = w[i]
    return out


def _rewritable(graph: Graph, node: Node) -> bool:
    if node.op != "qmatmul" or node.inputs[1] not in graph.initializers:
        return False
    a, b = (graph.tensors[n] for n in node.inputs)
    if len(b.shape) < 3 or node.attr("group", 1) != 1:
        return False
    return len(a.shape) == 2 or tuple(a.shape[:-2]) == tuple(b.shape[:-2])


def rewrite_one(graph: Graph, node: Node) -> Graph:
    """``graph`` with the batched ``qmatmul`` ``node`` as one 2-D GEMM (module docstring)."""
    a_name, b_name = node.inputs
    a, b = (graph.tensors[n] for n in node.inputs)
    out = graph.tensors[node.outputs[0]]
    batch = tuple(b.shape[:-2])
    g = math.prod(batch)
    k, n = b.shape[-2:]
    m = a.shape[-2]
    shared = len(a.shape) == 2
    value = graph.initializers[b_name].reshape(g, k, n)
    w = batched_weight(value, _column_zero_points(b.quant, n), shared)
    edit = Edit(graph)
    base = node.name
    x = a_name
    if not shared:
        x = edit.node(f"{base}/batch_rows", "reshape", [x], shape=(g, m, k), quant=a.quant)
        x = edit.node(f"{base}/batch_side", "transpose", [x], perm=(1, 0, 2), quant=a.quant)
        x = edit.node(f"{base}/batch_a", "reshape", [x], shape=(m, g * k), quant=a.quant)
    weight = edit.const(f"{b_name}/batched", w, quant=_tiled(b.quant, g))
    y = edit.node(f"{base}/batched", "qmatmul", [x, weight], quant=_tiled(out.quant, g),
                  **({} if shared else {"group": g}))
    edit.drop(node)
    y = edit.node(f"{base}/batch_cols", "reshape", [y], shape=(m, g, n), quant=out.quant)
    y = edit.node(f"{base}/batch_first", "transpose", [y], perm=(1, 0, 2), quant=out.quant)
    edit.node(f"{base}/batch_out", "reshape", [y], output=node.outputs[0],
              shape=(*batch, m, n), quant=out.quant)
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Rewrite every ``qmatmul`` with a constant weight of 3 or more axes (module docstring);
    ``(graph, changed)`` like every pass. Other forms (an activation whose batch axes differ
    from the weight's) are left for lowering to refuse by name."""
    return rewrite_each(graph, lambda gr, node: rewrite_one(gr, node)
                        if _rewritable(gr, node) else None)
