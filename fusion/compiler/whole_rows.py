"""A convolution that computes whole blocks of output columns for the max pool that reads it.

A window convolution (:mod:`fusion.kernels.conv`) computes its output ``R`` pixels (the
array's rows) a block. When an output row is not whole blocks, blocks span output rows and
their window loads repeat only every ``lcm(OW, R) / R`` blocks, so the program folds into
few loops: SqueezeNet's 7x7 stride-2 stem at 64 px (``OW`` 29) needs 11,958 instructions
against an instruction memory of 2,048, and its windows are gathered on the host. With 3
more output columns, computed from padding, each output row is 4 whole blocks, and the
program is one loop: 1,147 instructions.

Those columns are only free where the reader never looks at them. A max pool can skip them
by itself: hwgen's ``maxpool`` reads a negative end pad as that many trailing columns
cropped (:func:`fusion.ir.shapes.crop_ends`), and on the window unit they are simply
columns no window reaches (``WCFG``'s input width is the padded one, the pool's output
width the same as before). This rewrite, which the compiler runs for a variant
(:func:`for_variant`), does it where all of these hold:

- a ``maxpool`` reads the NCHW view (``transpose`` then ``reshape``, nothing else reading
  them) of the rows of a GEMM over an ``im2col`` (with only column-wise epilogue ops
  between: bias, requantize, relu, clamp, each read by the next alone);
- the pool's windows do not reach past the convolution's last column (no end padding or
  ``ceil_mode`` overhang there: in the padded tensor those columns hold data);
- the convolution's output rows are not whole blocks of the variant's rows, the window
  convolution refuses its program as too long, and takes the padded one
  (:func:`fusion.compiler.kernels.spec_for` and the kind's legality, the compiler's own
  check, on both graphs).

Exact: the pool reads the same values (the padded columns are computed but never read), and
every other value is the same computation over more rows.
"""

from __future__ import annotations

from fusion.compiler.kernels import spec_for
from fusion.compiler.lower import chains
from fusion.compiler.spec import KernelSpec
from fusion.ir import ops
from fusion.ir.graph import Graph, Node, Tensor
from fusion.passes.im2col_rows import rows_start
from hwgen.config import VariantConfig

#: Epilogue ops that act on each row of a GEMM's output alone (per column parameters).
COLUMNWISE = frozenset({"bias_add", "requant", "relu", "clamp"})


def for_variant(graph: Graph, config: VariantConfig) -> Graph:
    """``graph`` with every convolution that qualifies (module docstring) computing whole
    blocks of output columns for ``config``'s rows, and its max pool cropping them.

    Parameters
    ----------
    graph : Graph
        Through the passes (:func:`fusion.passes.driver.optimize`).
    config : VariantConfig

    Returns
    -------
    Graph
    """
    for pool in [n for n in graph.topo_order() if n.op == "maxpool"]:
        padded = rewrite(graph, pool, config)
        if padded is not None:
            graph = padded
    return graph


def _chain(graph: Graph, pool: Node) -> list[Node] | None:
    """The nodes from the ``im2col`` to the ``pool`` (module docstring), or None."""
    found = rows_start(graph, pool.inputs[0])
    if found is None:
        return None
    rows = found[0]
    back: list[Node] = []
    node = graph.producer(rows)
    while node is not None and node.op in COLUMNWISE:
        back.append(node)
        node = graph.producer(node.inputs[0])
    if node is None or node.op != "qmatmul" or (node.attr("group", 1) or 1) != 1:
        return None
    windows = graph.producer(node.inputs[0])
    if windows is None or windows.op != "im2col":
        return None
    nodes = [windows, node, *reversed(back)]
    transpose = graph.sole_reader(rows)
    reshape = transpose and graph.sole_reader(transpose.outputs[0])
    if (transpose is None or transpose.op != "transpose" or tuple(transpose.attr("perm"))
            != (0, 2, 1) or reshape is None or reshape.op != "reshape"
            or reshape.outputs[0] != pool.inputs[0]
            or graph.sole_reader(reshape.outputs[0]) is not pool):
        return None
    if any(graph.sole_reader(n.outputs[0]) is None for n in nodes):
        return None
    return [*nodes, transpose, reshape, pool]


def rewrite(graph: Graph, pool: Node, config: VariantConfig) -> Graph | None:
    """``graph`` with the convolution ``pool`` reads computing whole blocks of output
    columns and ``pool`` cropping them, or None where that does not qualify (module
    docstring)."""
    nodes = _chain(graph, pool)
    if nodes is None or (pool.attr("dilations") or (1, 1)) != (1, 1):
        return None
    windows = nodes[0]
    n, c, oh, ow = graph.tensors[pool.inputs[0]].shape
    wide = -(-ow // config.rows) * config.rows
    pads = tuple(pool.attr("pads") or (0, 0, 0, 0))
    (_, kw), (_, sx) = pool.attr("kernel_shape"), tuple(pool.attr("strides") or (1, 1))
    out_w = graph.tensors[pool.outputs[0]].shape[3]
    # the pool's last window ends inside the convolution's columns (nor does it crop)
    if ow == wide or pads[3] != 0 or (out_w - 1) * sx + kw - pads[1] > ow:
        return None
    if _refusal(graph, config, windows) != "program_too_long":  # it fits as it is
        return None
    csx = tuple(windows.attr("strides") or (1, 1))[1]
    cpads = tuple(windows.attr("pads") or (0, 0, 0, 0))
    more = (wide - ow) * csx  # right pad columns: a stride's worth a more output column
    attrs = {node.name: dict(node.attr_dict) for node in nodes}
    # the columns past ``ow``: work done, not asked for (fusion.runtime.run_report)
    attrs[windows.name].update(pads=(*cpads[:3], cpads[3] + more), cropped=wide - ow)
    attrs[nodes[-2].name]["shape"] = (n, c, oh, wide)
    attrs[pool.name]["pads"] = (*pads[:3], ow - wide)
    tensors, made = dict(graph.tensors), {}
    for node in nodes:  # in order: each one's output type from its inputs' new ones
        remade = Node(node.name, node.op, node.inputs, node.outputs, attrs[node.name])
        (typed,) = ops.infer(remade, [tensors[i] for i in node.inputs], graph.initializers)
        out = graph.tensors[node.outputs[0]]
        tensors[out.name] = Tensor(out.name, typed.shape, typed.dtype, out.quant)
        made[node.name] = remade
    padded = Graph([made.get(node.name, node) for node in graph.nodes], tensors, graph.inputs,
                   graph.outputs, graph.initializers, graph.name)
    return None if _refusal(padded, config, windows) is not None else padded


def _refusal(graph: Graph, config: VariantConfig, windows: Node) -> str | None:
    """The window convolution's refusal (its short reason) of the chain the ``im2col``
    ``windows`` starts in ``graph``, or None when it takes it: the compiler's own check."""
    chain = next((ch for ch in chains(graph)[0] if ch.prefix and ch.prefix[0].name ==
                  windows.name), None)
    if chain is None:
        return "no_chain"
    spec = spec_for(graph, config, chain, 0, len(chain.prefix) + 1 + len(chain.ops))
    if not isinstance(spec, KernelSpec):
        return spec.reason
    found = spec.kind.legality(config, spec.params)
    return None if found is None else found.reason
