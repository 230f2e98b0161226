"""Remove chains of layout changes that, together, leave every element where it was.

Conv legalization ends every convolution with ``reshape(transpose(acc, (0, 2, 1)))`` back to
NCHW (:mod:`fusion.passes.conv_legalize`), and the next convolution starts with an ``im2col``
of that NCHW tensor. When the next one is pointwise (1x1 kernel, stride 1, no padding,
dilation 1), its ``im2col`` is ``x.transpose(0, 2, 3, 1).reshape(N, H*W, C)``, and the chain

    ``Y [N, H*W, C] -> transpose (0, 2, 1) -> [N, C, H*W] -> reshape -> [N, C, H, W]``
    ``-> im2col 1x1 -> [N, H*W, C]``

gives back ``Y`` element for element. The runtime runs every one of these ops as a host step
(:data:`fusion.compiler.lower.HOST_OPS`), taking ``Y`` out of the accelerator's memory and
packing it back for the next GEMM, for nothing. This pass makes the readers of the chain's end
read ``Y`` itself; DCE drops what no one reads any more (an intermediate that something else
reads, such as a residual branch or a graph output, stays).

Proof, not pattern matching: the chain is pushed over the index array ``arange(size)``
reshaped to ``Y``'s shape, op by op, with each op's own attributes and declared output shape,
and it is removed only when the result is that index array in the end tensor's shape, and
``Y`` has the end's shape, dtype and quantization. So any chain of pure layout ops (``reshape``,
``flatten``, ``transpose``, ONNX ``Reshape``/``Flatten``/``Transpose``/``Squeeze``/``Unsqueeze``/
``Identity``) proven an identity goes, whatever made it, and nothing else does. ``im2col``
counts as a layout op only as ``1x1``, stride 1, no padding, dilation 1 (anything else reads
windows, or pads with a zero point); another permutation, a strided or padded ``im2col``, a
3x3 kernel all leave the chain where it is.

What it refuses: a chain whose end is a graph output (its readers would be renamed; the
interface keeps its names), and a start annotated with another quantization than the end,
unless the end is unannotated and none of its readers takes zero points from annotations
(as :mod:`fusion.passes.identity`).
"""

from __future__ import annotations

import math

import numpy as np

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each
from fusion.passes.identity import READS_QUANT

#: Ops that only move elements: their output is their input in another shape or order.
RESHAPES = frozenset({"reshape", "flatten", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                      "Identity"})
TRANSPOSES = frozenset({"transpose", "Transpose"})


def is_layout(node: Node | None) -> bool:
    """``node`` only moves elements: a reshape, a transpose, or a pointwise ``im2col``."""
    if node is None or len(node.outputs) != 1 or not node.inputs or not node.inputs[0]:
        return False
    if node.op in RESHAPES or node.op in TRANSPOSES:
        return True
    return node.op == "im2col" and _pointwise(node)


def _pointwise(node: Node) -> bool:
    """An ``im2col`` that only reorders: 1x1 windows, stride 1, no padding, dilation 1."""
    return (tuple(node.attr("kernel_shape", ())) == (1, 1)
            and tuple(node.attr("strides", (1, 1))) == (1, 1)
            and tuple(node.attr("pads", (0, 0, 0, 0))) == (0, 0, 0, 0)
            and tuple(node.attr("dilations", (1, 1))) == (1, 1))


def _move(graph: Graph, node: Node, index: np.ndarray) -> np.ndarray | None:
    """Where layout op ``node`` puts each element of ``index`` (its input), or None when the
    input shape is not the one the graph declares."""
    if index.shape != graph.tensors[node.inputs[0]].shape:
        return None
    out = graph.tensors[node.outputs[0]].shape
    if node.op in TRANSPOSES:
        perm = node.attr("perm")
        moved = np.transpose(index, None if perm is None else tuple(perm))
    elif node.op == "im2col":
        if index.ndim != 4:
            return None
        # 1x1 windows at stride 1: row h*W + w of image n holds x[n, :, h, w]
        moved = index.transpose(0, 2, 3, 1).reshape(index.shape[0], -1, index.shape[1])
    else:
        moved = index.reshape(out)  # pure reshape: row-major element order kept
    return moved if moved.shape == out else None


def layout_chain(graph: Graph, end: str) -> list[Node]:
    """The layout ops that make ``end``, first first (each one's input is the last's output)."""
    chain: list[Node] = []
    cur = end
    while is_layout(node := graph.producer(cur)):
        chain.insert(0, node)
        cur = node.inputs[0]
    return chain


def _same_value(graph: Graph, start: str, end: str) -> bool:
    """``start`` can stand for ``end``: same shape and dtype, and quantization."""
    a, b = graph.tensors[start], graph.tensors[end]
    if (a.shape, a.dtype) != (b.shape, b.dtype):
        return False
    if a.quant == b.quant:
        return True
    return b.quant is None and not any(r.op in READS_QUANT for r in graph.consumers(end))


#: The most elements a chain is pushed over (128 MiB of int64 indices): a larger tensor's
#: layout chain is left where it is (the host runs it) rather than proven at that cost.
MAX_PUSHED = 2**24


def pushed(graph: Graph, chain: list[Node]) -> np.ndarray | None:
    """Where ``chain`` puts each element of its input: the input's element indices (row-major
    over its declared shape) carried through every op, or None when a shape does not fit or
    the input has more than :data:`MAX_PUSHED` elements."""
    start = graph.tensors[chain[0].inputs[0]].shape
    size = math.prod(start)
    if size > MAX_PUSHED:
        return None
    index = np.arange(size, dtype=np.int64).reshape(start)
    for node in chain:
        index = _move(graph, node, index)
        if index is None:
            return None
    return index


def _is_identity(graph: Graph, chain: list[Node]) -> bool:
    """True when ``chain`` leaves every element of its input where it was."""
    index = pushed(graph, chain)
    return index is not None and bool(np.array_equal(index.ravel(),
                                                     np.arange(index.size, dtype=np.int64)))


def identity_start(graph: Graph, end: str) -> str | None:
    """The earliest tensor that the layout chain making ``end`` merely reshapes back into
    ``end`` (proven on the element indices, see the module docstring), or None."""
    chain = layout_chain(graph, end)
    for k in range(len(chain)):
        start = chain[k].inputs[0]
        if _same_value(graph, start, end) and _is_identity(graph, chain[k:]):
            return start
    return None


def matrix_view_start(graph: Graph, end: str) -> str | None:
    """The earliest tensor that the layout chain making ``end`` only reshapes into it, up to
    its leading axes: same elements in the same row-major order, same last axis, dtype and
    quantization, so that a GEMM reading ``end`` as its ``[M, K]`` A (leading axes
    flattened) can read it instead; None when there is none. The chain stays in the graph
    (other readers may need ``end`` itself); a reader that takes the start needs none of it.
    """
    chain = layout_chain(graph, end)
    b = graph.tensors[end]
    for k in range(len(chain)):
        start = chain[k].inputs[0]
        a = graph.tensors[start]
        if (a.shape[-1:], a.dtype, a.quant) == (b.shape[-1:], b.dtype, b.quant) \
                and _is_identity(graph, chain[k:]):
            return start
    return None


def reroute(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with the readers of layout op ``node``'s output reading the start of the
    identity chain that ends there, or None where there is none."""
    if not is_layout(node):
        return None
    end = node.outputs[0]
    if end in graph.outputs or not graph.consumers(end):
        return None
    start = identity_start(graph, end)
    if start is None:
        return None
    edit = Edit(graph)
    edit.replace_uses(end, start)
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Make the readers of every identity chain of layout ops read its start (module
    docstring); the chain itself is left to DCE.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, reroute)
