"""Relayout copies: the accelerator copies a tensor into the layout some readers take,
instead of the host repacking it between kernels.

One store cannot serve every reader (:mod:`fusion.compiler.store_layout`): a ResNet block's
input is the residual of its last convolution (row-major tiles, read by the epilogue) and the
A operand of its first (K-major); a ShuffleNet unit's, the same. The reader the store does not
serve gets its region from the host (a repack, :mod:`fusion.compiler.repack`: a host op, and
the tensor over the bus twice). A GEMM can make the other layout itself: A read K-major, times
the identity, requantized by 1, stored as tiles. Each output is its input, less and plus the
zero point (exact), and with the identity's blocks as groups of one channel
(:func:`fusion.compiler.kernels.grouping`) each tile reduces over 8 rows: a few cycles a tile,
where the repack costs the host a call and every element. Its multiply-accumulates are not the
model's (``qmatmul asked=0``, as for a channel shuffle), so utilization does not count them.
The other way, an NCHW tensor stored as tiles (Inception's stride-2 max pools, read by the
branch's max pool and by three convolutions) is copied K-major by a 1x1 max pool on the window
unit, which reads tiles and stores K-major: the max of one element is that element.

The compiler plans the model, asks :func:`requests` which repacked tensors a copy would serve
(the producer can store K-major, and both layouts have in-place readers), inserts the copies
with :func:`apply` (the readers of tiles read the copy; the producer's store then serves the
rest K-major, and the copy reads it in place) and plans again; it keeps the plan predicted
cheaper, kernels and host together. The plan records its copies (``plan.json``
``relayouts``), so that reading it with its model applies them to the graph the passes give.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.compiler.memplan import aliases
from fusion.ir import ops
from fusion.ir.graph import Graph, Node, Quant
from fusion.kernels import layout
from fusion.passes._edit import Edit
from fusion.passes.im2col_rows import rows_start

#: How a copy is made: ``gemm``, K-major to tiles (the GEMM of the identity, for readers of
#: tiles); ``window``, tiles to K-major (a 1x1 max pool on the window unit, which reads tiles
#: and stores K-major, for the readers of K-major).
BY = ("gemm", "window")


@dataclass(frozen=True)
class Relayout:
    """A copy of ``tensor`` on the accelerator, made ``by`` (:data:`BY`), that the graph
    nodes ``readers`` read instead of it."""

    tensor: str
    readers: tuple[str, ...]
    by: str = "gemm"

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "readers": list(self.readers), "by": self.by}

    @classmethod
    def from_dict(cls, data: Any) -> Relayout:
        """A plan's record; ValueError naming what is wrong."""
        if not isinstance(data, dict) or set(data) != {"tensor", "readers", "by"} or \
                not isinstance(data["tensor"], str) or not isinstance(data["readers"], list) \
                or not data["readers"] or not all(isinstance(r, str) for r in data["readers"]) \
                or data["by"] not in BY:
            raise ValueError(f"a relayout must be {{'tensor': name, 'readers': [node, ...], "
                             f"'by': one of {', '.join(BY)}}}, not {data!r}")
        return cls(data["tensor"], tuple(data["readers"]), data["by"])


def requests(compiled: Any) -> list[Relayout]:
    """The copies that would spare ``compiled`` (a :class:`fusion.compiler.plan.
    CompiledModel`) its repacks: for each repacked tensor whose producer can store it K-major,
    that it holds as GEMM rows, and that kernels read in place both ways, a copy for the graph
    nodes of the kernels that read it as tiles."""
    config, graph = compiled.config, compiled.graph
    window = config.window_unit and compiled.options.window_unit
    stored_by = {k.spec.output: k.spec for k in compiled.kernels}
    found = []
    for tensor in dict.fromkeys(r.tensor for r in compiled.repacks):
        spec = stored_by[tensor]
        if not hasattr(spec.params, "kmajor_out"):
            continue
        tiles = spec.with_params(dataclasses.replace(spec.params, kmajor_out=False))
        kmajor = spec.with_params(dataclasses.replace(spec.params, kmajor_out=True))
        shape = tuple(graph.tensors[tensor].shape)
        as_tiles, as_kmajor = [], []
        for k in compiled.kernels:
            regions = [region for region, index in
                       k.spec.kind.inputs_in_place(k.spec.params).items()
                       if index < len(k.spec.inputs) and k.spec.inputs[index] == tensor]
            reads_kmajor = any(aliases(config, k.spec, r, kmajor, shape) for r in regions)
            reads_tiles = any(aliases(config, k.spec, r, tiles, shape) for r in regions)
            # a kernel reading it both ways (a GEMM whose residual is its own A) has nodes
            # that a copy cannot tell apart: it stays repacked
            if reads_kmajor != reads_tiles:
                nodes = [n for n in k.spec.nodes if _reads(graph, graph.node(n), tensor)]
                (as_kmajor if reads_kmajor else as_tiles).extend(nodes)
        if not (as_tiles and as_kmajor):
            continue
        if _copy_problem(graph, tensor, "gemm") is None and \
                kmajor.kind.legality(config, kmajor.params) is None and \
                tiles.kind.region_view(tiles.params, "out", shape) == layout.ROWS:
            found.append(Relayout(tensor, tuple(dict.fromkeys(as_tiles)), "gemm"))
        elif window and _copy_problem(graph, tensor, "window") is None:
            found.append(Relayout(tensor, tuple(dict.fromkeys(as_kmajor)), "window"))
    return found


def _reads(graph: Graph, node: Node, tensor: str) -> bool:
    """Does ``node`` read ``tensor``, or an NCHW view that only renames its rows (a window
    pool reads the rows where they lie, :func:`fusion.passes.im2col_rows.rows_start`)?"""
    return any(i == tensor or _view_of(graph, i) == tensor for i in node.inputs if i)


def _view_of(graph: Graph, name: str) -> str | None:
    """The GEMM rows whose NCHW view tensor ``name`` is, or None."""
    if name not in graph.tensors or len(graph.tensors[name].shape) != 4:
        return None
    found = rows_start(graph, name)
    return found[0] if found else None


def _copy_problem(graph: Graph, tensor: str, by: str) -> str | None:
    """Why ``tensor`` cannot be copied ``by`` a GEMM of the identity (GEMM rows) or a 1x1
    max pool (an NCHW tensor); None when it can."""
    t = graph.tensors.get(tensor)
    if t is None:
        return f"no tensor {tensor!r}"
    if t.dtype not in ("int8", "uint8") or t.quant is None or t.quant.per_channel:
        return f"tensor {tensor!r} is not an 8-bit tensor quantized per tensor"
    if by == "gemm" and len(t.shape) not in (2, 3):
        return f"tensor {tensor!r} is not GEMM rows (2-D or 3-D), it is {t.shape}"
    if by == "window" and len(t.shape) != 4:
        return f"tensor {tensor!r} is not NCHW, it is {t.shape}"
    return None


def apply(graph: Graph, copies: Sequence[Relayout]) -> Graph:
    """``graph`` with each copy inserted: ``qmatmul`` of the tensor by the identity (one
    channel a group, ``asked=0``), ``requant`` by 1 to the tensor's own quantization, read by
    the copy's reader nodes instead of the tensor.

    Raises
    ------
    ValueError
        If a copy names a tensor that cannot be copied so, or a reader that does not read it
        (a plan whose ``relayouts`` are not its graph's).
    """
    edit = Edit(graph)
    nodes = {n.name: n for n in graph.nodes}
    for copy in copies:
        problem = _copy_problem(graph, copy.tensor, copy.by)
        if problem is not None:
            raise ValueError(f"relayout: {problem}")
        t = graph.tensors[copy.tensor]
        for name in copy.readers:
            node = nodes.get(name)
            if node is None or not _reads(graph, node, copy.tensor) or len(node.outputs) != 1:
                raise ValueError(f"relayout of {copy.tensor!r}: {name!r} is no single-output "
                                 f"node of the graph reading it")
        base = f"{copy.tensor}/relayout"
        if copy.by == "window":  # the max of one element: each copied element is its input
            copied = edit.node(f"{base}/maxpool", "maxpool", [copy.tensor], quant=t.quant,
                               kernel_shape=(1, 1))
            _reroute(edit, nodes, copy, copied)
            continue
        channels = t.shape[-1]
        identity = edit.const(f"{base}/identity", np.eye(channels, dtype=np.int8),
                              quant=Quant(1.0, 0))
        acc = edit.node(f"{base}/qmatmul", "qmatmul", [copy.tensor, identity],
                        group=channels, asked=0, quant=Quant(float(t.quant.scale[0]), 0))
        copied = edit.node(f"{base}/requant", "requant", [acc], quant=t.quant,
                           **ops.requant_attrs(1.0, int(t.quant.zero_point[0]),
                                               out_dtype=t.dtype, round_even=True))
        _reroute(edit, nodes, copy, copied)
    return edit.apply()


def _reroute(edit: Edit, nodes: dict[str, Node], copy: Relayout, copied: str) -> None:
    """Make the copy's readers read ``copied`` instead of its tensor, and an NCHW view of
    the tensor's rows the same view of the copy's (made once per shape)."""
    graph, views = edit.graph, {}

    def instead(name: str) -> str:
        if name == copy.tensor:
            return copied
        if not name or _view_of(graph, name) != copy.tensor:
            return name
        view = graph.tensors[name]
        if view.shape not in views:
            nchw = edit.node(f"{copied}/transpose", "transpose", [copied], quant=view.quant,
                             perm=(0, 2, 1))
            views[view.shape] = edit.node(f"{copied}/reshape", "reshape", [nchw],
                                          quant=view.quant, shape=view.shape)
        return views[view.shape]

    for name in copy.readers:
        node = nodes[name]
        edit.drop(node)
        edit.node(node.name, node.op, [instead(i) for i in node.inputs],
                  output=node.outputs[0], **node.attr_dict)
