"""A global pool as the window unit's sum of each image's plane, on variants that have it.

The Q/DQ fold writes a global average pool as a GEMM over the spatial axis
(:func:`fusion.passes.qdq_fold._global_sum`): ``requant(reshape(x, [N*C, H*W]) @ ones)``
reshaped to ``[N, C, 1, 1]``. That reads every input once on the array, but only from the
NCHW tensor, so when ``x`` is a convolution's output the host transposes the convolution's
``[N, H*W, C]`` rows into it, and reshapes and flattens the pooled result for the next GEMM:
five host steps, for a tensor that never needed to leave the accelerator.

The window unit sums a plane where the convolution stored it (``WINDOW`` mode sum). This pass,
which the compiler runs only for a variant with the unit (:func:`for_variant`), writes the
pool back as what it is, a depthwise convolution whose all-ones window covers the plane:
``requant(qconv2d(x, ones[C, 1, H, W], group=C))``. Legalization then makes it an ``im2col``
of the convolution's rows and a grouped GEMM (:mod:`fusion.passes.conv_legalize`,
:mod:`fusion.passes.im2col_rows`), which the compiler runs as a window-unit kernel in sum
mode, and the layout chains around it turn out to be identities
(:mod:`fusion.passes.layout_identity`) and go. Without the unit, that grouped GEMM would do
``C`` times the work of the pool GEMM, so other variants keep the GEMM form.

Exact: both forms sum the same int8 values into an int32 and requantize with the same
multiplier, shift and zero point (the requantize node is kept as it was).
"""

from __future__ import annotations

import numpy as np

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each


def rewrite(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with the global-sum GEMM ``node`` written as a depthwise convolution, or
    None when ``node`` is not one (the form :func:`fusion.passes.qdq_fold._global_sum`
    makes: a ``qmatmul`` of a ``reshape`` of NCHW ``x`` to ``[N*C, H*W]`` and a column of
    int8 ones, read only by a per-tensor ``requant`` read only by a ``reshape`` to
    ``[N, C, 1, 1]``)."""
    if node.op != "qmatmul" or node.attr("group", 1) not in (None, 1):
        return None
    rows, ones = node.inputs[:2]
    flat = graph.producer(rows)
    w = graph.initializers.get(ones)
    if flat is None or flat.op != "reshape" or w is None:
        return None
    x = graph.tensors[flat.inputs[0]]
    if len(x.shape) != 4 or x.dtype not in ("int8", "uint8"):
        return None
    n, c, h, wd = x.shape
    if graph.tensors[rows].shape != (n * c, h * wd) or w.shape != (h * wd, 1) \
            or w.dtype != np.int8 or not (w == 1).all():
        return None
    requant = graph.sole_reader(node.outputs[0], "requant")
    if requant is None or np.ndim(requant.attr("mult")) != 0:
        return None
    back = graph.sole_reader(requant.outputs[0], "reshape")
    if back is None or graph.tensors[back.outputs[0]].shape != (n, c, 1, 1):
        return None
    edit = Edit(graph)
    edit.drop(node, requant, back)
    weights = edit.const(f"{node.name}/window_ones", np.ones((c, 1, h, wd), np.int8),
                         quant=graph.tensors[ones].quant)
    acc = edit.node(f"{node.name}/window", "qconv2d", [x.name, weights], group=c,
                    quant=graph.tensors[node.outputs[0]].quant, strides=(1, 1),
                    dilations=(1, 1), pads=(0, 0, 0, 0))
    edit.node(requant.name, "requant", [acc], output=back.outputs[0],
              **{k: v for k, v in requant.attr_dict.items() if k != "axis"})
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Write every global-sum GEMM as a depthwise convolution (module docstring).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, rewrite)


def for_variant(graph: Graph) -> Graph:
    """``graph`` (optimized) with its global pools on the window unit: this pass, then
    legalization and pruning again to a fixed point (:mod:`fusion.passes.driver`)."""
    from fusion.passes.driver import legalize_pipeline, prune_pipeline, run_to_fixed_point

    graph, changed = run(graph)
    if changed:
        graph = run_to_fixed_point(graph, legalize_pipeline())
        graph = run_to_fixed_point(graph, prune_pipeline())
    return graph
