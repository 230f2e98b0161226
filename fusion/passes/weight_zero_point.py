"""Weight zero points: fold them into the weights, exactly, so the array multiplies int8 x int8.

A ``qmatmul`` computes ``sum_k (a_k - za) * (w_kn - zw_n)``. The accelerator subtracts the
activation's zero point ``za`` itself (:mod:`fusion.compiler.kernels` folds ``-za * colsum`` into
the bias), but it has no weight zero point and multiplies int8 weights only. So, for every
``qmatmul`` with a constant 2-D weight that is uint8 or has a non-zero zero point (per tensor
or per output column), this pass computes ``w' = w - zw`` once, in exact integers, as gemmlowp
does with its offsets:

- when every ``w'`` fits int8 (uint8 weights with zero point 128; symmetric-range weights),
  ``w'`` replaces the weight, with zero point 0: same GEMM, no cost;
- otherwise (asymmetric weights, e.g. a channel of all-positive uint8 weights with zero point 0:
  ``w'`` reaches 255) ``w'`` is split into ``P`` int8 parts ``w' = w_1 + ... + w_P`` stacked
  along K, and the activation is repeated ``P`` times along K by a host ``repeat`` node, so
  ``[a, ..., a] @ [w_1; ...; w_P] = a @ w'``: exact, at ``P`` times the K of that layer only.
  ``P`` is the smallest with ``-128 * P <= w' <= 127 * P``: 2 for ``w'`` in -256..254, 3 for
  ``w' = 255`` (two int8 values sum to at most 254).

Both are exact in int32 too: the accumulator wraps modulo ``2**32`` and the parts sum to the
same integers. The activation's zero point stays where it is, and its bias correction is
computed from the new weights (``colsum`` of the stacked parts is ``colsum(w')``), so
``(a - za) @ w'`` comes out. Symmetric int8 weights (zero point 0) are left untouched: their
programs do not change.

The pass runs in the legalize pipeline, after convolutions are in GEMM form; weights it
cannot rewrite (not constant, not 2-D) are left for lowering to refuse by name.
"""

from __future__ import annotations

import numpy as np

from fusion.ir.graph import Graph, Node, Quant, Tensor
from fusion.passes._edit import Edit, rewrite_each

INT8 = (-128, 127)


def column_zero_points(weight: Tensor) -> np.ndarray:
    """The zero point of each column of a ``[K, N]`` weight, as int64 (0 without Quant)."""
    n = weight.shape[-1]
    q = weight.quant
    if q is None:
        return np.zeros(n, np.int64)
    return np.broadcast_to(np.array(q.zero_point, np.int64), (n,)).copy()


def parts_needed(w: np.ndarray) -> int:
    """The fewest int8 parts that sum to every value of the integer array ``w``."""
    lo, hi = (int(w.min()), int(w.max())) if w.size else (0, 0)
    # ceil(lo / -128) and ceil(hi / 127), by floor division
    return max(1, -(lo // -INT8[0]), -(-hi // INT8[1]))


def split_int8(w: np.ndarray, parts: int) -> list[np.ndarray]:
    """``w`` (int64) as ``parts`` int8 arrays that sum to it, as equal as integers allow.

    Part ``p`` is ``floor(w / parts)`` plus 1 where ``p < w mod parts``. That fits int8 for every
    ``-128 * parts <= w <= 127 * parts``: the floor is in -128..127, and it is below 127
    whenever a remainder adds 1.

    Raises
    ------
    ValueError
        If some value needs more parts.
    """
    if parts < parts_needed(w):
        raise ValueError(f"{parts} int8 parts cannot sum to {int(w.min())}..{int(w.max())}; "
                         f"{parts_needed(w)} are needed")
    base, rest = np.divmod(w, parts)
    return [(base + (p < rest)).astype(np.int8) for p in range(parts)]


def _rewritable(graph: Graph, node: Node) -> bool:
    if node.op != "qmatmul" or node.inputs[1] not in graph.initializers:
        return False
    w = graph.tensors[node.inputs[1]]
    if len(w.shape) != 2 or w.dtype not in ("int8", "uint8"):
        return False
    return w.dtype == "uint8" or bool(column_zero_points(w).any())


def fold_one(graph: Graph, node: Node) -> Graph:
    """``graph`` with the weight zero points of ``qmatmul`` ``node`` folded (module docstring)."""
    a, wname = node.inputs
    wt = graph.tensors[wname]
    exact = graph.initializers[wname].astype(np.int64) - column_zero_points(wt)
    parts = parts_needed(exact)
    value = np.concatenate(split_int8(exact, parts)) if parts > 1 else exact.astype(np.int8)
    q = wt.quant
    quant = None if q is None else Quant(q.scale, (0,) * len(q.zero_point), q.axis)
    edit = Edit(graph)
    shared = len(graph.consumers(wname)) > 1
    # One reader (the usual case): the weight keeps its name, which names the conv it came from
    # (conv_legalize.original_convs). A shared weight gets a new one for this node.
    new_w = edit.const(f"{wname}/w0", value, quant=quant) if shared else wname
    if not shared:
        edit.tensors[wname] = Tensor(wname, value.shape, "int8", quant)
        edit.initializers[wname] = value
    if parts > 1:
        a = edit.node(f"{node.name}/split_k", "repeat", [a], times=parts,
                      quant=graph.tensors[a].quant)
    edit.drop(node)
    edit.node(node.name, "qmatmul", [a, new_w], output=node.outputs[0],
              **({"group": node.attr("group")} if node.attr("group", 1) > 1 else {}))
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Fold the weight zero points (and uint8 weights) of every ``qmatmul`` into int8 weights,
    as the module docstring says; ``(graph, changed)`` like every pass."""
    return rewrite_each(graph, lambda g, node: fold_one(g, node) if _rewritable(g, node)
                        else None)
