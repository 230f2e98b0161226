"""A channel permutation after a GEMM (ShuffleNet's channel shuffle) becomes the order of the
GEMM's own output columns.

ShuffleNet writes its channel shuffle as ``Reshape`` to ``(N, g, C/g, H, W)``, ``Transpose``
of axes 1 and 2, ``Reshape`` back to ``(N, C, H, W)``: a permutation of the channels and
nothing else. After conv legalization (:mod:`fusion.passes.conv_legalize`) it follows the
convolution's own layout change from the GEMM's rows ``Y`` ``[N, H*W, C]`` to NCHW, so the
chain ``Y -> NCHW -> shuffle`` is five host layout steps over the whole tensor, and the next
convolution's ``im2col`` cannot read ``Y`` where the GEMM stored it.

A permutation of output channels is free inside the GEMM: column ``c`` of the permuted result
is column ``p[c]`` of the weights, with that column's bias, per-channel requantize multiplier
and shift, and per-channel weight scale. This pass permutes those and replaces the chain by
the plain layout change of the new rows, which :mod:`fusion.passes.im2col_rows` and
:mod:`fusion.passes.layout_identity` then fold into the consumer as for any convolution.

Proof, not pattern matching (as :mod:`fusion.passes.layout_identity`): the layout chain making
the NCHW tensor ``end`` is pushed over the element indices of ``Y``; it is rewritten only when
the result is ``Y`` viewed as NCHW with its channels in some order ``p`` other than the identity,
with the same dtype and quantization.

What it refuses (and leaves to the host as before): a GEMM whose weights are not a constant
read by it alone; an op between the GEMM and ``Y`` other than ``bias_add`` (constant bias),
``requant``, ``relu`` and ``clamp`` along the last axis (a residual ``qadd`` would need its
other input permuted too); and any tensor from the GEMM's output to the chain's end that
something else also reads (it would see the permuted values), or that is a graph output.

The GEMM keeps its ``group`` attribute, which counts the MACs the model asks for
(:mod:`fusion.ir.ops`). A grouped convolution's permuted columns are no longer block-diagonal
in order, so it runs as a dense GEMM of block-diagonal weights
(:func:`fusion.compiler.kernels.grouping` says so in the plan): no order of the channels keeps
both the grouped convolution before the shuffle and the one after it grouped (each group
after it reads channels of every group before it), and the array's stores write whole column
blocks, so the permutation cannot be a strided store either. Where the groups save more
than a permutation costs (:func:`_keeps_groups`: ShuffleNet v1's stage-3 and -4 units), the
GEMM keeps its weights in their order, grouped, and the permutation is a GEMM of its own by
the 0/1 permutation matrix, requantized by 1 (exact: each output is one input), whose
multiply-accumulates the model does not ask for (``asked=0``: utilization does not count
them). In ShuffleNet v1 (3 groups, 64 px) a stage-3 unit's first grouped convolution is
then 6,751 predicted cycles and its permutation 4,217, where the dense GEMM took 16,215; a
stage-4 one 12,451 and 7,688 where it took 30,426. A stage-2 one stays dense (a group's 20
channels do not divide 8 columns).
"""

from __future__ import annotations

import numpy as np

from fusion.ir.graph import Graph, Node, Quant
from fusion.passes._edit import Edit, rewrite_each
from fusion.passes._selection import selection_gemm
from fusion.passes.im2col_rows import rows_orders
from fusion.passes.layout_identity import is_layout, layout_chain

#: Ops between the GEMM and its rows ``Y`` that act on each column alone.
_COLUMNWISE = frozenset({"bias_add", "requant", "relu", "clamp"})


def channel_order(graph: Graph, end: str) -> tuple[str, np.ndarray, list[Node]] | None:
    """The ``[N, H*W, C]`` rows ``Y``, the order ``p`` and the layout chain for which the NCHW
    ``end`` is ``Y`` viewed as NCHW with channel ``c`` taken from column ``p[c]``; None when the
    chain making ``end`` is no such permutation (or is the identity order)."""
    for start, k, order in rows_orders(graph, end):
        if not np.array_equal(order, np.arange(order.size)):
            return start, order, layout_chain(graph, end)[k:]
    return None


def _permuted(quant: Quant | None, order: np.ndarray, axis: int) -> Quant | None:
    """``quant`` with its per-channel entries along ``axis`` in ``order``."""
    if quant is None or quant.axis is None or quant.axis != axis:
        return quant
    return Quant(tuple(np.asarray(quant.scale)[order]),
                 tuple(np.asarray(quant.zero_point)[order]), axis)


def _permuted_attr(value, order: np.ndarray):
    """A per-tensor (int) or per-channel (tuple) requantize attribute, in ``order``."""
    return value if isinstance(value, int) else tuple(int(v) for v in np.asarray(value)[order])


def _producers(graph: Graph, rows: str) -> list[Node] | None:
    """The GEMM and the column-wise ops making ``rows``, GEMM first; None when anything else
    makes it or one of their outputs has another reader or is a graph output."""
    found: list[Node] = []
    cur = rows
    while True:
        node = graph.producer(cur)
        if node is None or cur in graph.outputs or len(graph.consumers(cur)) != 1:
            return None
        found.insert(0, node)
        if node.op == "qmatmul":
            return found
        if node.op not in _COLUMNWISE:
            return None
        rank = len(graph.tensors[cur].shape)
        if node.attr("axis", -1) not in (-1, rank - 1):
            return None
        if node.op == "bias_add" and node.inputs[1] not in graph.initializers:
            return None
        width = graph.tensors[cur].shape[-1]
        if node.op == "requant" and any(not isinstance(node.attr(a), int)
                                        and len(node.attr(a)) != width
                                        for a in ("mult", "shift")):
            return None
        cur = node.inputs[0]


def _rewrite(graph: Graph, node: Node) -> Graph | None:
    if not is_layout(node):
        return None
    end = node.outputs[0]
    if end in graph.outputs or not graph.consumers(end):
        return None
    found = channel_order(graph, end)
    if found is None:
        return None
    rows, order, chain = found
    makers = _producers(graph, rows)
    if makers is None:
        return None
    gemm = makers[0]
    weights = gemm.inputs[1]
    if weights not in graph.initializers or len(graph.consumers(weights)) != 1 \
            or graph.initializers[weights].ndim != 2:
        return None
    # every tensor between Y and the end is read by the chain alone: no one else sees the order
    if any(len(graph.consumers(op.outputs[0])) != 1 or op.outputs[0] in graph.outputs
           for op in chain[:-1]):
        return None
    quant = graph.tensors[rows].quant
    if quant is not None and not quant.per_channel and _keeps_groups(graph, gemm, order):
        return _permuting_gemm(graph, node, rows, order)
    edit = Edit(graph)
    edit.drop(*makers, node)
    wt = graph.tensors[weights]
    cur = edit.const(weights, graph.initializers[weights][:, order],
                     quant=_permuted(wt.quant, order, 1))
    for op in makers:  # each re-made under its own name, reading what it read
        out = graph.tensors[op.outputs[0]]
        rank = len(out.shape)
        attrs = dict(op.attrs)
        inputs = [cur if i == weights else i for i in op.inputs]
        if op.op == "bias_add":
            inputs[1] = edit.const(op.inputs[1], graph.initializers[op.inputs[1]][order],
                                   quant=graph.tensors[op.inputs[1]].quant)
        elif op.op == "requant":
            attrs["mult"] = _permuted_attr(attrs["mult"], order)
            attrs["shift"] = _permuted_attr(attrs["shift"], order)
        edit.node(op.name, op.op, inputs, output=op.outputs[0],
                  quant=_permuted(out.quant, order, rank - 1), **attrs)
    et = graph.tensors[end]
    moved = edit.node(f"{node.name}/transpose", "transpose", [rows], quant=et.quant,
                      perm=(0, 2, 1))
    edit.node(node.name, "reshape", [moved], output=end, shape=et.shape)
    return edit.apply()


def _keeps_groups(graph: Graph, gemm: Node, order: np.ndarray) -> bool:
    """Whether grouped ``gemm`` should stay grouped, its permutation a GEMM of its own
    (:func:`_permuting_gemm`): its weights are block-diagonal in their own order, each
    group's channels whole column blocks of 8 (so of any array up to 8 columns wide: the
    compiler then runs it as a grouped GEMM, :func:`fusion.compiler.kernels.grouping`),
    ``order`` mixes the groups, and the work the groups save, ``M*K*N*(G-1)/G``
    multiply-accumulates, is more than the permutation's ``M*N*N``. ShuffleNet v1's stage-3
    and -4 units (K = 240 to 960 over N = 120 and 240, 3 groups) keep their groups (with
    twice the permutation's work as the bar, their first units, K = 240 and 480, did not,
    and the model took 6,370 more predicted cycles); stage 2's (20 channels a group) do not."""
    group = int(gemm.attr("group", 1) or 1)
    w = graph.initializers[gemm.inputs[1]]
    if group <= 1 or w.ndim != 2 or w.shape[1] != order.size:
        return False
    k, n = w.shape
    if k % group or n % group or (n // group) % GROUP_COLUMNS:
        return False
    rows = np.arange(k)[:, None] // (k // group)
    cols = np.arange(n)[None, :] // (n // group)
    if np.any(w[rows != cols]) or np.array_equal(order // (n // group), cols[0]):
        return False
    return k * (group - 1) / group > n


#: The column blocks a group's channels must fill for :func:`_keeps_groups` (a pass sees no
#: variant): 8, the widest array the zoo runs on, so any array of up to 8 columns groups it.
GROUP_COLUMNS = 8


def _permuting_gemm(graph: Graph, node: Node, rows: str, order: np.ndarray) -> Graph:
    """``graph`` with the layout chain ending at ``node`` (a channel permutation of the
    GEMM rows ``rows``) as a GEMM of ``rows`` by the 0/1 permutation matrix, requantized by
    1 to ``rows``' own quantization (exact: each output is one input, less and plus the zero
    point), then the plain layout change to NCHW."""
    n = order.size
    matrix = np.zeros((n, n), np.int8)
    matrix[order, np.arange(n)] = 1
    edit = Edit(graph)
    edit.drop(node)
    base = node.name
    moved = selection_gemm(edit, base, rows, matrix, "permutation")
    et = graph.tensors[node.outputs[0]]
    nchw = edit.node(f"{base}/transpose", "transpose", [moved], quant=et.quant, perm=(0, 2, 1))
    edit.node(base, "reshape", [nchw], output=node.outputs[0], shape=et.shape)
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Move every channel permutation of a GEMM's output into the GEMM (module docstring).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, _rewrite)
