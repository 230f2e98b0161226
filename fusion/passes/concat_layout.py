"""Join before the layout change: ``qconcat(L(a_0), L(a_1), ...)`` along channels becomes
``L(qconcat(a_0, a_1, ...))`` along the rows' last axis.

Conv legalization ends every convolution with a layout change ``L`` from the GEMM's rows
``[N, H*W, C]`` to NCHW (:mod:`fusion.passes.conv_legalize`). A ``qconcat`` of such outputs
along the channel axis (SqueezeNet's fire modules, Inception's branches, DenseNet's dense
layers) then reads NCHW tensors that no kernel writes. The pixel rows of the join are the
rows of the inputs side by side: joining the ``[N, H*W, C_i]`` rows along their last axis and
changing the layout once gives the same tensor element for element. The join can then run on
the accelerator over the tensors the convolutions stored (:mod:`fusion.kernels.concat`), and
the next convolution reads its rows where they lie (:func:`fusion.passes.im2col_rows.
rows_start` finds them through the new ``L``).

Each input's rows are found by :func:`~fusion.passes.im2col_rows.rows_start`, which proves
that the layout chain making the NCHW input only renames them (whatever made the chain). When the
inputs that have rows hold at least half the join's channels, an input that has none (a host
op's NCHW output, or a pool's: ShuffleNet's average pools of its stride-2 units) gets them
from a pointwise ``im2col``, one layout step over that input alone; left in NCHW, the join's
output and the stream after it would be NCHW, with layout steps around the kernels that read
it (ShuffleNet: its residual adds, which need both inputs in one layout). When most of the
channels have no rows the join is left as it is: DenseNet's first dense layers join a max
pool's output, and their batch-norm affines run on the window unit over NCHW for half the
cycles of the grouped GEMM they would be over rows. The old layout changes stay
where something else reads them; DCE removes the rest.
"""

from __future__ import annotations

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each
from fusion.passes.im2col_rows import rows_start


def _channels(graph: Graph, inputs: list[str], found: list, rows: bool) -> int:
    """The channels of the join's ``inputs`` that have rows (``rows``), or that have none."""
    return sum(graph.tensors[x].shape[1] for x, f in zip(inputs, found, strict=True)
               if (f is not None) == rows)


def _rewrite(graph: Graph, node: Node) -> Graph | None:
    if node.op != "qconcat":
        return None
    out = graph.tensors[node.outputs[0]]
    if len(out.shape) != 4 or node.attr("axis") != 1:
        return None
    n, c, h, w = out.shape
    inputs = [x for x in node.inputs if x]
    found = [rows_start(graph, x) for x in inputs]
    if any(f is not None and f[1] != (h, w) for f in found) \
            or _channels(graph, inputs, found, True) < _channels(graph, inputs, found, False):
        return None
    edit = Edit(graph)
    edit.drop(node)
    starts = [f[0] if f is not None else
              edit.node(f"{x}/rows", "im2col", [x], quant=graph.tensors[x].quant,
                        kernel_shape=(1, 1))
              for x, f in zip(inputs, found, strict=True)]
    attrs = dict(node.attrs)
    attrs["axis"] = 2
    rows = edit.node(f"{node.name}/rows", "qconcat", starts, quant=out.quant, **attrs)
    moved = edit.node(f"{node.name}/transpose", "transpose", [rows], quant=out.quant,
                      perm=(0, 2, 1))
    edit.node(f"{node.name}/reshape", "reshape", [moved], output=node.outputs[0],
              shape=(n, c, h, w))
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Move the layout change of every ``qconcat`` the module docstring describes.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    graph : Graph
    changed : bool
    """
    return rewrite_each(graph, _rewrite)
