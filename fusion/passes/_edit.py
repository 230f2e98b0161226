"""A batch of changes to an immutable graph, applied at once (shared by the passes).

A pass collects its rewrite in an :class:`Edit` (nodes to drop, nodes and constants to add,
tensors to rename or re-annotate) and calls :meth:`Edit.apply` for the new graph. New nodes take
the stored position of the first node they replace, so a rewritten graph lists its nodes in
the order a person would have built it, and ``before``/``expected`` tests stay readable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Quant, Tensor


class Edit:
    """Pending changes to ``graph``; nothing happens to it until :meth:`apply`."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.tensors: dict[str, Tensor] = dict(graph.tensors)
        self.initializers: dict[str, np.ndarray] = dict(graph.initializers)
        self.dropped: list[str] = []
        self.added: list[Node] = []
        self.rename: dict[str, str] = {}
        self._node_names = {n.name for n in graph.nodes}
        self._tensor_names = set(graph.tensors)

    # -- names --------------------------------------------------------------------------

    def fresh(self, base: str, *, tensor: bool = True) -> str:
        """``base`` if it is free, else ``base_1``, ``base_2`` ...

        The name is free when no node has it (a dropped node's name is free again, so a node
        can be replaced under its own name) and, with ``tensor``, no tensor has it either.
        """
        name, n = base, 0
        while name in self._node_names or (tensor and name in self._tensor_names):
            n += 1
            name = f"{base}_{n}"
        self._node_names.add(name)
        if tensor:
            self._tensor_names.add(name)
        return name

    # -- changes ------------------------------------------------------------------------

    def drop(self, *nodes: Node) -> None:
        """Remove ``nodes``; their outputs must be re-produced or no longer read."""
        self.dropped.extend(n.name for n in nodes)
        self._node_names.difference_update(n.name for n in nodes)

    def node(self, base: str, op: str, inputs: Sequence[str], *, output: str | None = None,
             quant: Quant | None = None, **attrs: Any) -> str:
        """Add a node named ``base`` (made unique) with one output, its type inferred.

        Parameters
        ----------
        base : str
            The node's name (and its output's, unless ``output`` is given).
        op : str
        inputs : sequence of str
        output : str, optional
            The output's name. An existing tensor is re-produced (its producer must be
            dropped) and its declared type must match the inferred one; a new name makes a
            new tensor.
        quant : Quant, optional
            The output's quantization (kept from the existing tensor when None).
        **attrs
            Node attributes.

        Returns
        -------
        str
            The output tensor's name.
        """
        name = self.fresh(base, tensor=output is None)
        if output is not None:
            self._tensor_names.add(output)
        out = output if output is not None else name
        node = Node(name, op, tuple(inputs), (out,), attrs)
        (inferred,) = ops.infer(node, [self.tensors[i] if i else None for i in inputs],
                                self.initializers)
        if output is not None and output in self.tensors:
            have = self.tensors[output]
            if (have.shape, have.dtype) != (inferred.shape, inferred.dtype):
                raise GraphError(f"rewrite of {output!r} would change it from {have.dtype} "
                                 f"{have.shape} to {inferred.dtype} {inferred.shape}")
            quant = have.quant if quant is None else quant
        self.tensors[out] = Tensor(out, inferred.shape, inferred.dtype, quant)
        self.added.append(node)
        return out

    def const(self, base: str, value: np.ndarray, *, quant: Quant | None = None) -> str:
        """Add an initializer named ``base`` (made unique)."""
        name = self.fresh(base)
        array = np.asarray(value)
        self.tensors[name] = Tensor(name, array.shape, array.dtype.name, quant)
        self.initializers[name] = array
        return name

    def annotate(self, name: str, quant: Quant) -> str | None:
        """Give tensor ``name`` the quantization ``quant``.

        Returns
        -------
        str or None
            Why not, when the tensor already has a different quantization.
        """
        have = self.tensors[name]
        if have.quant is not None and have.quant != quant:
            return (f"tensor {name!r} is quantized both as {describe_quant(have.quant)} and "
                    f"{describe_quant(quant)}; one integer tensor cannot carry two "
                    f"quantizations")
        self.tensors[name] = Tensor(name, have.shape, have.dtype, quant)
        return None

    def replace_uses(self, old: str, new: str) -> None:
        """Make every reader of ``old`` (nodes and graph outputs) read ``new`` instead."""
        self.rename[old] = new

    # -- result -------------------------------------------------------------------------

    def apply(self) -> Graph:
        """The new graph (unused tensors and initializers are dropped)."""
        dropped = set(self.dropped)
        nodes: list[Node] = []
        inserted = False
        for node in self.graph.nodes:
            if node.name in dropped:
                if not inserted:
                    nodes.extend(self.added)
                    inserted = True
                continue
            nodes.append(node)
        if not inserted:
            nodes.extend(self.added)
        if self.rename:
            nodes = [self._renamed(n) for n in nodes]
        outputs = tuple(self._resolve(o) for o in self.graph.outputs)
        # Build the graph once (construction checks and sorts it): drop what nothing uses.
        read = set(outputs) | set(self.graph.inputs) | {i for n in nodes for i in n.inputs if i}
        used = read | {o for n in nodes for o in n.outputs}
        return Graph(nodes, {k: v for k, v in self.tensors.items() if k in used},
                     self.graph.inputs, outputs,
                     {k: v for k, v in self.initializers.items() if k in read},
                     self.graph.name)

    def _resolve(self, name: str) -> str:
        seen: dict[str, None] = {}
        while name in self.rename and name not in seen:
            seen[name] = None
            name = self.rename[name]
        if name not in self.rename:  # the end of the chain (not a cycle): remember it, so
            for passed in seen:  # that a chain of N renames resolves in N steps, not N * N
                self.rename[passed] = name
        return name

    def _renamed(self, node: Node) -> Node:
        inputs = tuple(self._resolve(i) if i else i for i in node.inputs)
        if inputs == node.inputs:
            return node
        return Node(node.name, node.op, inputs, node.outputs, node.attrs)


def describe_quant(quant: Quant | None) -> str:
    """``scale=0.05 zp=-3`` (per tensor) or ``axis=1 scale=[...] zp=[...]`` (per channel)."""
    if quant is None:
        return "-"
    if not quant.per_channel:
        return f"scale={quant.scale[0]:.6g} zp={quant.zero_point[0]}"
    scales = ", ".join(f"{s:.4g}" for s in quant.scale[:4])
    zps = ", ".join(str(z) for z in quant.zero_point[:4])
    more = ", ..." if len(quant.scale) > 4 else ""
    return f"axis={quant.axis} scale=[{scales}{more}] zp=[{zps}{more}]"


def bypass(graph: Graph, node: Node, src: str, dst: str) -> Graph | None:
    """Remove ``node``, whose output ``dst`` holds the same value as ``src``.

    Readers of ``dst`` read ``src`` instead. When ``dst`` is a graph output, ``src``'s producer
    writes ``dst`` instead (the interface keeps its names). Returns None when neither works:
    ``dst`` is a graph output and ``src`` is a graph input, an initializer or an output too.
    """
    edit = Edit(graph)
    edit.drop(node)
    if dst not in graph.outputs:
        edit.replace_uses(dst, src)
        return edit.apply()
    producer = graph.producer(src)
    if producer is None or src in graph.outputs:
        return None
    renamed = Node(producer.name, producer.op, producer.inputs,
                   tuple(dst if o == src else o for o in producer.outputs), producer.attrs)
    t = graph.tensors[src]
    edit.tensors[dst] = Tensor(dst, t.shape, t.dtype, t.quant)
    edit.drop(producer)
    edit.added.append(renamed)
    edit.replace_uses(src, dst)
    # The producer keeps its stored position: re-insert at the first dropped node's place.
    edit.dropped.sort(key=[n.name for n in graph.nodes].index)
    return edit.apply()


def reads_constants(graph: Graph, node: Node) -> bool:
    """True when every present input of ``node`` is an initializer (and it has some)."""
    present = [i for i in node.inputs if i]
    return bool(present) and all(i in graph.initializers for i in present)


def rewrite_each(graph: Graph, rewrite: Callable[[Graph, Node], Graph | None]
                 ) -> tuple[Graph, bool]:
    """Offer every node, in topological order, to ``rewrite`` until none is rewritten.

    ``rewrite(graph, node)`` returns the rewritten graph, or None to leave the node. After a
    rewrite the walk starts again on the new graph, and every node gets another look (a
    rewrite can make a pattern appear upstream of it); a node left alone is not offered
    again until something changes.

    Returns
    -------
    graph : Graph
    changed : bool
    """
    changed = False
    left: set[str] = set()
    while True:
        for node in graph.topo_order():
            if node.name in left:
                continue
            result = rewrite(graph, node)
            if result is None:
                left.add(node.name)
                continue
            graph, changed = result, True
            left.clear()
            break
        else:
            return graph, changed
