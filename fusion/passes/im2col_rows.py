"""An ``im2col`` of a GEMM's output reads the GEMM's rows, not the NCHW tensor made of them.

Conv legalization ends a convolution with ``reshape(transpose(acc, (0, 2, 1)))`` back to
NCHW, and the next convolution starts with ``im2col`` of that NCHW tensor
(:mod:`fusion.passes.conv_legalize`). The two layout steps only rename the elements of the
GEMM's ``[N, H*W, C]`` rows ``Y``; the windows can be cut from ``Y`` directly. This pass
rewrites such an ``im2col`` to read ``Y`` with ``spatial=(H, W)`` (the op's rows form), so
that the window convolution kernel (:mod:`fusion.kernels.conv`) can take ``Y`` where the GEMM
stored it, and the transpose and reshape go to DCE when nothing else reads them.

Proof, not pattern matching, as :mod:`fusion.passes.layout_identity` does it: the layout chain
making the ``im2col``'s input is pushed over the index array of ``Y``, and the rewrite happens
only when the result is exactly ``Y`` viewed as ``[N, H, W, C]`` transposed to NCHW, with the
same dtype and quantization (the padding reads the zero point).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each
from fusion.passes.layout_identity import layout_chain, pushed


def rows_orders(graph: Graph, x: str) -> Iterator[tuple[str, int, np.ndarray]]:
    """Each ``[N, H*W, C]`` tensor ``Y`` (earliest first) that the layout chain making the
    NCHW ``x`` turns into ``x`` with channel ``c`` taken from column ``order[c]`` of ``Y``,
    with its position in the chain and that order (the identity where the chain merely renames
    ``Y``'s rows; a channel shuffle otherwise: :mod:`fusion.passes.channel_shuffle`)."""
    xt = graph.tensors[x]
    if len(xt.shape) != 4:
        return
    n, c, h, w = xt.shape
    chain = layout_chain(graph, x)
    for k in range(len(chain)):
        start = chain[k].inputs[0]
        st = graph.tensors[start]
        if st.shape != (n, h * w, c) or st.dtype != xt.dtype or st.quant != xt.quant:
            continue
        index = pushed(graph, chain[k:])
        if index is None:
            continue
        want = np.arange(n * h * w * c, dtype=np.int64).reshape(n, h, w, c).transpose(0, 3, 1, 2)
        order = index[0, :, 0, 0] % c  # Y's element index is ((n * H*W) + pixel) * C + channel
        if np.array_equal(index, want[:, order]):
            yield start, k, order


def rows_start(graph: Graph, x: str) -> tuple[str, tuple[int, int]] | None:
    """The ``[N, H*W, C]`` tensor whose rows the layout chain making the NCHW ``x`` merely
    renames, and ``(H, W)``; None when there is none."""
    for start, _k, order in rows_orders(graph, x):
        if np.array_equal(order, np.arange(order.size)):
            return start, graph.tensors[x].shape[2:]
    return None


def reroute(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with the NCHW ``im2col`` ``node`` reading the rows its input was made of, or
    None where it reads something else."""
    if node.op != "im2col" or node.attr("spatial"):
        return None
    found = rows_start(graph, node.inputs[0])
    if found is None:
        return None
    start, spatial = found
    edit = Edit(graph)
    edit.drop(node)
    edit.node(node.name, "im2col", (start,), output=node.outputs[0],
              **{**node.attr_dict, "spatial": spatial})
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Make every ``im2col`` of a GEMM's renamed rows read the rows (module docstring).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, reroute)
