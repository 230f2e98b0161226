"""Relayout copies in the graph: a tensor copied, exactly, into the layout some readers take
(:mod:`fusion.compiler.relayout` decides which, from a plan's repacks).

``gemm``: ``qmatmul`` of the rows by the identity (one channel a group, ``asked=0``: not the
model's work), ``requant`` by 1 to the tensor's own quantization; each output is its input,
less and plus the zero point. ``window``: a 1x1 ``maxpool`` of an NCHW tensor; the max of one
element is that element. The copy's readers read it instead of the tensor, and a reader of an
NCHW view that only renames the tensor's rows (:func:`fusion.passes.im2col_rows.rows_start`)
reads the same view of the copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.ir.graph import Graph, Node
from fusion.passes._edit import Edit
from fusion.passes._selection import selection_gemm
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
    by: str

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


def reads(graph: Graph, node: Node, tensor: str) -> bool:
    """Does ``node`` read ``tensor``, or an NCHW view that only renames its rows (a window
    pool reads the rows where they lie, :func:`fusion.passes.im2col_rows.rows_start`)?"""
    return any(i == tensor or _view_of(graph, i) == tensor for i in node.inputs if i)


def _view_of(graph: Graph, name: str) -> str | None:
    """The GEMM rows whose NCHW view tensor ``name`` is, or None."""
    if name not in graph.tensors or len(graph.tensors[name].shape) != 4:
        return None
    found = rows_start(graph, name)
    return found[0] if found else None


def copy_problem(graph: Graph, tensor: str, by: str) -> str | None:
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
    """``graph`` with each copy inserted (module docstring), read by the copy's reader nodes
    instead of the tensor: ``by="gemm"``, ``qmatmul`` of the tensor by the identity (one
    channel a group, ``asked=0``) and ``requant`` by 1 to the tensor's own quantization;
    ``by="window"``, a 1x1 ``maxpool`` of the NCHW tensor.

    Raises
    ------
    ValueError
        If a copy names a tensor that cannot be copied so, or a reader that does not read it
        (a plan whose ``relayouts`` are not its graph's).
    """
    edit = Edit(graph)
    nodes = {n.name: n for n in graph.nodes}
    for copy in copies:
        problem = copy_problem(graph, copy.tensor, copy.by)
        if problem is not None:
            raise ValueError(f"relayout: {problem}")
        t = graph.tensors[copy.tensor]
        for name in copy.readers:
            node = nodes.get(name)
            if node is None or not reads(graph, node, copy.tensor) or len(node.outputs) != 1:
                raise ValueError(f"relayout of {copy.tensor!r}: {name!r} is no single-output "
                                 f"node of the graph reading it")
        base = f"{copy.tensor}/relayout"
        if copy.by == "window":  # the max of one element: each copied element is its input
            copied = edit.node(f"{base}/maxpool", "maxpool", [copy.tensor], quant=t.quant,
                               kernel_shape=(1, 1))
            _reroute(edit, nodes, copy, copied)
            continue
        channels = t.shape[-1]
        copied = selection_gemm(edit, base, copy.tensor, np.eye(channels, dtype=np.int8),
                                "identity", group=channels)
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
