"""Conv legalization: ``qconv2d`` into GEMM form with an explicit ``im2col`` layout node.

The PE array only multiplies matrices, so a convolution

    ``y[N, M, OH, OW] = qconv2d(x[N, C, H, W], w[M, C/group, kH, kW])``

becomes

    ``cols = im2col(x)``                 ``[N, OH*OW, C*kH*kW]``, padding with x's zero point
    ``acc = qmatmul(cols, wT)``          ``[N, OH*OW, M]``
    ``y = reshape(transpose(acc, (0, 2, 1)), (N, M, OH, OW))``

which :mod:`fusion.ir.ops` documents as bit-exact. For group 1, ``wT = w.reshape(M, -1).T``. A
grouped (or depthwise) convolution is the same single GEMM with a block-diagonal ``wT``
(:func:`gemm_weights`): column ``o`` holds o's weights at the rows (in im2col's (c, kh, kw)
order) of its group's input channels and o's weight zero point everywhere else, and
``zero_point - zero_point`` contributes exactly 0 to the accumulator (with the usual zero point
0, those entries are zeros). As a dense GEMM this is exact but wastes MACs: of the
``C*kH*kW`` products per output only ``C/group*kH*kW`` are nonzero. So the ``qmatmul`` keeps
the conv's ``group``, and the compiler runs it as a grouped GEMM, each column block of the
array over its own rows of K only, where the groups allow
(:func:`fusion.compiler.kernels.grouping`).

The per-channel epilogue that follows the
conv (``bias_add``/``requant`` along the channel axis, ``relu``, ``clamp``) moves in front of
the transpose, onto the GEMM's columns, so that it can fuse with the matmul; the layout goes
back to NCHW once, at the end, on the int8 result.

The original convolution stays recoverable: :func:`original_convs` rebuilds each ``qconv2d``
(its name, input, attributes, group and weights) from the ``im2col``/``qmatmul`` pair, for
reference runs and shadow checks.

What it refuses: convolutions whose weights are not constant (the GEMM weight matrix is
computed once, here).
"""

from __future__ import annotations

import math

import numpy as np

from fusion.ir.graph import Graph, Node, Quant
from fusion.passes._edit import Edit, rewrite_each

#: Ops of the per-channel epilogue that move onto the GEMM's columns.
EPILOGUE = ("bias_add", "requant", "relu", "clamp")


def _moved(quant: Quant | None, axis: int) -> Quant | None:
    """``quant`` with a per-channel axis 1 (NCHW channels) moved to ``axis``."""
    if quant is None or not quant.per_channel:
        return quant
    return Quant(quant.scale, quant.zero_point, axis)


def _epilogue_chain(graph: Graph, start: str) -> list[Node]:
    """The per-channel nodes after the conv output ``start``, while each has one reader."""
    chain, cur = [], start
    while cur not in graph.outputs and len(graph.consumers(cur)) == 1:
        node = graph.consumers(cur)[0]
        if node.op not in EPILOGUE or node.inputs[0] != cur:
            break
        if node.op == "bias_add" and node.attr("axis", -1) % 4 != 1:
            break
        if node.op == "requant" and isinstance(node.attr("mult"), tuple) and \
                node.attr("axis", -1) % 4 != 1:
            break
        chain.append(node)
        cur = node.outputs[0]
    return chain


def _column_zero_points(quant: Quant | None, m: int) -> np.ndarray:
    """The weight zero point of each of the ``m`` output channels, as int64."""
    if quant is None:
        return np.zeros(m, np.int64)
    return np.broadcast_to(np.array(quant.zero_point, np.int64), (m,))


def _block_mask(m: int, c: int, group: int) -> np.ndarray:
    """``[M, C]``: True where output channel o reads input channel c (same group)."""
    return (np.arange(m)[:, None] // (m // group)) == (np.arange(c)[None, :] // (c // group))


def gemm_weights(w: np.ndarray, channels: int, group: int,
                 quant: Quant | None = None) -> np.ndarray:
    """The ``[C*kH*kW, M]`` GEMM weights of conv weights ``w`` ``[M, C/group, kH, kW]``.

    Rows follow :func:`fusion.ir.windows.im2col`'s column order (c, kh, kw). For ``group`` > 1
    the matrix is block-diagonal: column ``o`` holds ``w[o]`` at the rows of the input
    channels of o's group and o's zero point (``quant``, per tensor or per output channel)
    elsewhere, so those rows contribute exactly 0.

    Parameters
    ----------
    w : numpy.ndarray
        ``[M, C/group, kH, kW]`` conv weights.
    channels : int
        ``C``, the conv's input channels.
    group : int
    quant : Quant, optional
        The weights' quantization (its zero points fill the blocks outside the diagonal).

    Returns
    -------
    numpy.ndarray
        ``[C*kH*kW, M]``, of ``w``'s dtype, C-contiguous.
    """
    m, _, kh, kw = w.shape
    full = np.empty((m, channels, kh, kw), w.dtype)
    full[...] = _column_zero_points(quant, m).astype(w.dtype).reshape(m, 1, 1, 1)
    full[_block_mask(m, channels, group)] = w.reshape(m * (channels // group), kh, kw)
    return np.ascontiguousarray(full.reshape(m, -1).T)


def refusal(graph: Graph, node: Node) -> str | None:
    """Why ``node`` (a ``qconv2d``) cannot be legalized, or None when it can."""
    if node.inputs[1] not in graph.initializers:
        return (f"qconv2d {node.name!r} has computed weights {node.inputs[1]!r}; they must be "
                f"constant")
    return None


def legalize_one(graph: Graph, node: Node) -> Graph:
    """``graph`` with the ``qconv2d`` ``node`` in GEMM form (see the module docstring)."""
    x, w = node.inputs
    out = graph.tensors[node.outputs[0]]
    n, m, oh, ow = out.shape
    wv = graph.initializers[w]
    wq = graph.tensors[w].quant
    base = node.name
    edit = Edit(graph)
    chain = _epilogue_chain(graph, node.outputs[0])
    edit.drop(node, *chain)
    cols = edit.node(f"{base}/im2col", "im2col", [x], quant=graph.tensors[x].quant,
                     kernel_shape=tuple(wv.shape[2:]), strides=node.attr("strides", (1, 1)),
                     pads=node.attr("pads", (0, 0, 0, 0)),
                     dilations=node.attr("dilations", (1, 1)))
    wt = edit.const(f"{w}/kxm", gemm_weights(wv, graph.tensors[x].shape[1],
                                             node.attr("group", 1), wq),
                    quant=_moved(wq, 1))
    group = node.attr("group", 1)
    cur = edit.node(f"{base}/qmatmul", "qmatmul", [cols, wt], quant=_moved(out.quant, 2),
                    **({"group": group} if group > 1 else {}))
    for step in chain:
        attrs = step.attr_dict
        if "axis" in attrs or step.op == "bias_add":
            attrs["axis"] = 2
        cur = edit.node(step.name, step.op, [cur, *step.inputs[1:]],
                        output=edit.fresh(f"{step.outputs[0]}/gemm"),
                        quant=_moved(graph.tensors[step.outputs[0]].quant, 2), **attrs)
    last = chain[-1].outputs[0] if chain else node.outputs[0]
    last_quant = graph.tensors[last].quant
    t = edit.node(f"{base}/transpose", "transpose", [cur], perm=(0, 2, 1),
                  quant=_moved(edit.tensors[cur].quant, 1))
    edit.node(f"{base}/reshape", "reshape", [t], output=last, quant=last_quant,
              shape=(n, m, oh, ow))
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Put every ``qconv2d`` with constant weights into GEMM form.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, lambda g, node: legalize_one(g, node) if (
        node.op == "qconv2d" and refusal(g, node) is None) else None)


def explain(graph: Graph) -> list[str]:
    """Why each ``qconv2d`` left in ``graph`` was not legalized."""
    return [why for node in graph.topo_order() if node.op == "qconv2d"
            for why in [refusal(graph, node)] if why]


def _group_of(full: np.ndarray, zero_points: np.ndarray) -> int:
    """The largest group for which ``full`` ``[M, C, kH, kW]`` is block-diagonal.

    That is, every weight outside the blocks equals its output channel's zero point (what
    :func:`gemm_weights` writes there).
    """
    m, c = full.shape[:2]
    off = full.astype(np.int64) != zero_points.reshape(m, 1, 1, 1)
    for group in range(math.gcd(m, c), 1, -1):
        if m % group == 0 and c % group == 0 and \
                not off[~_block_mask(m, c, group)].any():
            return group
    return 1


def original_convs(graph: Graph) -> dict[str, tuple[Node, np.ndarray]]:
    """The convolutions a legalized graph computes, rebuilt from its ``im2col``/``qmatmul``.

    The group is read back from the block structure of the GEMM weights: the largest group
    for which every weight outside the diagonal blocks is its column's zero point. That is the
    original group, unless the weights of a convolution happen to be zero outside the blocks
    of a larger group; then the rebuilt convolution has that larger group and computes the
    very same values.

    Returns
    -------
    dict
        For each ``qmatmul`` that reads an ``im2col``: the ``qconv2d`` node it replaced (its
        original name, input and attributes, group included; its weights input is named
        ``<weights>`` without the ``/kxm`` suffix) and the ``[M, C/group, kH, kW]`` weights.
        Its output is the qmatmul's own output name, so it can be run next to the GEMM form.
    """
    found = {}
    for node in graph.topo_order():
        if node.op != "qmatmul":
            continue
        producer = graph.producer(node.inputs[0])
        wt = node.inputs[1]
        if producer is None or producer.op != "im2col" or wt not in graph.initializers:
            continue
        x = producer.inputs[0]
        c = graph.tensors[x].shape[1]
        kh, kw = producer.attr("kernel_shape")
        full = graph.initializers[wt].T.reshape(-1, c, kh, kw)
        m = full.shape[0]
        group = _group_of(full, _column_zero_points(graph.tensors[wt].quant, m))
        weights = np.ascontiguousarray(
            full[_block_mask(m, c, group)].reshape(m, c // group, kh, kw))
        name = producer.name.removesuffix("/im2col")
        conv = Node(name, "qconv2d", (x, wt.removesuffix("/kxm")), node.outputs,
                    {"strides": producer.attr("strides"), "pads": producer.attr("pads"),
                     "dilations": producer.attr("dilations"), "group": group})
        found[node.name] = (conv, weights)
    return found
