"""Kernel positions that read only padding, dropped from a convolution.

A convolution over a plane about as small as its kernel has taps that never reach the input:
ResNet-50's last 3x3 convolutions see a 1x1 plane at a 32-pixel input (padding 1), so for
their one output pixel eight of the nine taps read padding, and DenseNet-121's and
ShuffleNet's last blocks likewise. ``qconv2d`` computes ``(x - x_zp) * (w - w_zp)`` and its
padding holds ``x_zp``, so such a tap adds exactly nothing, for every output; in GEMM form it
is still ``Cin`` rows of K, which the array multiplies and the port streams (res5's 4,608 rows
where 512 reach the input: 9 times the weights and MACs).

Per spatial axis, a tap ``k`` reads the input for output ``o`` when
``0 <= o*stride + k - pad_begin < size``; the taps that do for some output form a run
``[k0, k1]``. The convolution keeps that run of taps with the padding cut by what was
dropped (``pad_begin - k0`` before, ``pad_end - (kernel - 1 - k1)`` after): every output
then reads the same input pixels, the padding ones included, so the result is bit for bit the
same. Only for dilation 1 (with dilation the dropped padding could be negative), and only
where a whole row or column of taps is dead.
"""

from __future__ import annotations

from fusion.ir import shapes
from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each


def live_taps(size: int, kernel: int, stride: int, pad_begin: int, out: int) -> range:
    """The taps of one axis that read the input for some output (a run, possibly empty)."""
    live = [k for k in range(kernel)
            if any(0 <= o * stride + k - pad_begin < size for o in range(out))]
    return range(live[0], live[-1] + 1) if live else range(0)


def _rewrite(graph: Graph, node: Node) -> Graph | None:
    if node.op != "qconv2d" or node.inputs[1] not in graph.initializers:
        return None
    if tuple(node.attr("dilations") or (1, 1)) != (1, 1):
        return None
    x_shape = graph.tensors[node.inputs[0]].shape
    w = graph.initializers[node.inputs[1]]
    strides = tuple(node.attr("strides") or (1, 1))
    pads = tuple(node.attr("pads") or (0, 0, 0, 0))
    out, _, _ = shapes.window(x_shape[2:], w.shape[2:], strides, (1, 1), pads)
    runs = [live_taps(x_shape[2 + a], w.shape[2 + a], strides[a], pads[a], out[a])
            for a in range(2)]
    if not all(runs) or all(len(r) == w.shape[2 + a] for a, r in enumerate(runs)):
        return None  # no tap reads the input (all padding: leave it), or every tap does
    begin = tuple(pads[a] - runs[a].start for a in range(2))
    end = tuple(pads[2 + a] - (w.shape[2 + a] - runs[a].stop) for a in range(2))
    edit = Edit(graph)
    weights = w[:, :, runs[0].start:runs[0].stop, runs[1].start:runs[1].stop]
    kept = edit.const(f"{node.inputs[1]}/live", weights,
                      quant=graph.tensors[node.inputs[1]].quant)
    edit.drop(node)
    # the output's shape is kept (see the module docstring): Edit.node checks it
    edit.node(node.name, "qconv2d", [node.inputs[0], kept], output=node.outputs[0],
              **{**node.attr_dict, "pads": (*begin, *end)})
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Drop the taps of every constant-weight ``qconv2d`` that read only padding.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, _rewrite)
