"""Host ops across each pixel's channels on a GEMM's rows, where the host needs no
transpose first.

LRN stays on the host by design (a power of a sum of squares across channels), and a
BatchNormalization that no int8 weight reproduces exactly as well (DenseNet's after two of
its joins: :mod:`fusion.passes.batchnorm`), each as ``dequantize -> op -> quantize``. After a
convolution (or a join), the op's input is the NCHW view of the GEMM's ``[N, H*W, C]`` rows
(a ``transpose`` and ``reshape``), so the host moved every value into NCHW for an op that
reads each pixel's channels, and the next kernel read it back as rows: Inception-v1's conv2,
two host steps of 49,152 elements each beside the LRN's one.

These ops need the channels only in some axis. This pass, where the view's only reader is
the ``dequantize``, the op's only reader a per-tensor ``quantize``:

    rows -> transpose -> reshape -> dequantize -> op -> quantize -> y

makes it

    rows -> dequantize -> op'(axis=2) -> quantize -> transpose -> reshape -> y

with ``op'`` hwgen's form of ``op`` over the channels of any axis (:data:`ON_ROWS`:
``lrn``, :func:`fusion.reference.onnx_host_ops.lrn`; ``batchnorm``,
:func:`~fusion.reference.onnx_host_ops.batch_normalization`). Every value is the same:
dequantize and quantize are per element with one scale and zero point, and the op does the
same operations on each pixel's channels in either layout. The view now follows the
quantize, where the next kernel reads the rows as they are
(:mod:`fusion.passes.layout_identity`, :mod:`fusion.passes.im2col_rows`).
"""

from __future__ import annotations

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit, rewrite_each
from fusion.passes.im2col_rows import rows_start

#: The ONNX ops across (or per) channels, and hwgen's form of each on any axis with the
#: attributes it keeps.
ON_ROWS = {"LRN": ("lrn", ("size", "alpha", "beta", "bias")),
           "BatchNormalization": ("batchnorm", ("epsilon",))}


def rewrite(graph: Graph, node: Node) -> Graph | None:
    """``graph`` with the op the ``dequantize`` ``node`` feeds run on the rows its NCHW
    input renames, or None where it is not that pattern (module docstring)."""
    if node.op != "dequantize":
        return None
    x = graph.tensors[node.inputs[0]]
    found = rows_start(graph, x.name)
    if found is None or len(x.shape) != 4 or graph.sole_reader(x.name) is not node:
        return None
    rows = graph.tensors[found[0]]
    op = graph.sole_reader(node.outputs[0])
    quantize = op and graph.sole_reader(op.outputs[0], "quantize")
    if quantize is None or op.op not in ON_ROWS or op.inputs[0] != node.outputs[0]:
        return None
    name, keep = ON_ROWS[op.op]
    y = graph.tensors[quantize.outputs[0]]
    if rows.quant != x.quant or x.quant is None or x.quant.per_channel \
            or y.quant is None or y.quant.per_channel:
        return None
    edit = Edit(graph)
    edit.drop(node, op, quantize)
    # the nodes keep their names (the host steps the plan lists), their outputs are rows
    real = edit.node(node.name, "dequantize", (rows.name,), output=edit.fresh(
        f"{node.outputs[0]}/rows"), **node.attr_dict)
    normed = edit.node(op.name, name, (real, *op.inputs[1:]),
                       output=edit.fresh(f"{op.outputs[0]}/rows"), axis=2,
                       **{k: v for k, v in op.attr_dict.items() if k in keep})
    q = edit.node(quantize.name, "quantize", (normed,), quant=y.quant,
                  output=edit.fresh(f"{y.name}/rows"), **quantize.attr_dict)
    nchw = edit.node(f"{quantize.name}/transpose", "transpose", (q,), perm=(0, 2, 1))
    edit.node(f"{quantize.name}/reshape", "reshape", (nchw,), output=y.name,
              shape=y.shape)
    return edit.apply()


def run(graph: Graph) -> tuple[Graph, bool]:
    """Run every LRN and host BatchNormalization after a GEMM on its rows (module
    docstring).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    (Graph, bool)
        The graph, and whether it changed.
    """
    return rewrite_each(graph, rewrite)
