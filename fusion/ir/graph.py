"""The immutable graph IR of hwgen's compiler.

A :class:`Graph` holds :class:`Node` s, the :class:`Tensor` s they connect (shape, dtype and
quantization), its inputs and outputs, and constant tensors (initializers). Nothing in it can
be changed in place: passes build new graphs (:meth:`Graph.replace`). The op vocabulary —
names, attributes, semantics — lives in :mod:`fusion.ir.ops`; this module only knows structure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

#: Element types a tensor may have.
DTYPES = ("int8", "uint8", "int32", "int64", "float32")


class GraphError(ValueError):
    """A graph that is malformed: the message names the node or tensor and the fix."""


#: Attribute items kept as they are (exact types: numpy scalars are converted).
_PLAIN = frozenset({int, float, str, bool, type(None)})


def _freeze_attr(value: Any) -> Any:
    if isinstance(value, list | tuple):
        if all(type(v) in _PLAIN for v in value):  # the usual attribute: every node edit
            return tuple(value)                     # remakes the node (ResNet-50's passes)
        return tuple(_freeze_attr(v) for v in value)
    if isinstance(value, np.ndarray):
        return tuple(_freeze_attr(v) for v in value.tolist())
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    raise GraphError(f"attribute value {value!r} is not an int, float, str or a tuple of them")


@dataclass(frozen=True)
class Quant:
    """Affine quantization ``real = scale * (q - zero_point)``.

    Per tensor when ``axis`` is None (one scale and zero point); per channel along ``axis``
    otherwise (one per channel).
    """

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    def __post_init__(self) -> None:
        # as arrays, not element by element: ResNet-50's passes make 800 of ~270 channels
        scale = np.ravel(np.asarray(self.scale, dtype=np.float64))
        object.__setattr__(self, "scale", tuple(scale.tolist()))
        zero = np.ravel(self.zero_point)
        object.__setattr__(self, "zero_point", tuple(zero.tolist()) if zero.dtype.kind in "iu"
                           else tuple(int(z) for z in zero))
        if not self.scale or len(self.scale) != len(self.zero_point):
            raise GraphError(f"quantization needs as many scales as zero points, not "
                             f"{len(self.scale)} and {len(self.zero_point)}")
        if not bool(np.all((scale > 0) & np.isfinite(scale))):
            raise GraphError(f"quantization scales must be positive and finite, not {self.scale}")
        if self.axis is None and len(self.scale) != 1:
            raise GraphError("per-tensor quantization has one scale; give `axis` for per-channel")

    @property
    def per_channel(self) -> bool:
        return self.axis is not None


@dataclass(frozen=True)
class Tensor:
    """A value in the graph: its name, static shape, element type and quantization."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    quant: Quant | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.dtype not in DTYPES:
            raise GraphError(f"tensor {self.name!r} has dtype {self.dtype!r}; "
                             f"supported dtypes are {', '.join(DTYPES)}")
        if any(d < 0 for d in self.shape):
            raise GraphError(f"tensor {self.name!r} has a negative dimension: {self.shape}")


@dataclass(frozen=True)
class Node:
    """One operation: ``op`` (a name from :mod:`fusion.ir.ops`), inputs, outputs, attributes."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        attrs = dict(self.attrs) if not isinstance(self.attrs, Mapping) else self.attrs
        object.__setattr__(self, "attrs",
                           tuple(sorted((k, _freeze_attr(v)) for k, v in attrs.items())))

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name``, or ``default``."""
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


@dataclass(frozen=True, eq=False)
class Graph:
    """An immutable dataflow graph.

    Parameters
    ----------
    nodes : tuple of Node
        In any order; :meth:`topo_order` sorts them.
    tensors : mapping of str to Tensor
        Every tensor the nodes, inputs, outputs and initializers name.
    inputs, outputs : tuple of str
        Graph input and output tensor names.
    initializers : mapping of str to numpy.ndarray
        Constant tensors; stored read-only.
    name : str
    """

    nodes: tuple[Node, ...]
    tensors: Mapping[str, Tensor]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    initializers: Mapping[str, np.ndarray] = field(default_factory=dict)
    name: str = "graph"

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "tensors", MappingProxyType(dict(self.tensors)))
        frozen = {}
        for key, value in dict(self.initializers).items():
            if (isinstance(value, np.ndarray) and value.flags.owndata
                    and not value.flags.writeable):
                array = value  # frozen already (another graph's, a pass's edit): not copied
            else:  # every graph edit makes a graph: copying ResNet-50's weights each time
                array = np.array(value, copy=True)  # was a third of its passes
                array.setflags(write=False)
            frozen[key] = array
        object.__setattr__(self, "initializers", MappingProxyType(frozen))
        self._check()

    # -- structure ---------------------------------------------------------------------

    def _check(self) -> None:
        for role, listed in (("input", self.inputs), ("output", self.outputs)):
            if not all(isinstance(n, str) and n for n in listed):
                raise GraphError(f"graph {role}s need names, not {list(listed)}")
            twice = sorted({n for n in listed if listed.count(n) > 1})
            if twice:
                raise GraphError(f"graph {role} {twice[0]!r} is listed twice; list each once")
        names = set()
        for node in self.nodes:
            if node.name in names:
                raise GraphError(f"two nodes are named {node.name!r}; node names must be unique")
            names.add(node.name)
        produced: dict[str, str] = {}
        for node in self.nodes:
            for out in node.outputs:
                if out in produced:
                    raise GraphError(f"tensor {out!r} is produced by both {produced[out]!r} and "
                                     f"{node.name!r}; every tensor has one producer")
                if out in self.initializers or out in self.inputs:
                    raise GraphError(f"node {node.name!r} writes {out!r}, which is a graph "
                                     f"input or initializer")
                produced[out] = node.name
        for name in self._all_names():
            if name not in self.tensors:
                raise GraphError(f"tensor {name!r} is used but not declared; add it to tensors")
        available = set(self.inputs) | set(self.initializers) | set(produced)
        for node in self.nodes:
            for name in node.inputs:
                if name and name not in available:
                    raise GraphError(
                        f"node {node.name!r} reads {name!r}, which no node produces and which is "
                        f"neither a graph input nor an initializer (a missing initializer?)")
        for name in self.outputs:
            if name not in available:
                raise GraphError(f"graph output {name!r} is never produced")
        self.topo_order()  # raises on a cycle

    def _all_names(self) -> Iterable[str]:
        yield from self.inputs
        yield from self.outputs
        yield from self.initializers
        for node in self.nodes:
            yield from (n for n in node.inputs if n)
            yield from node.outputs

    @cached_property
    def _producers(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs}

    @cached_property
    def _consumers(self) -> dict[str, tuple[Node, ...]]:
        users: dict[str, list[Node]] = {}
        for node in self.topo_order():
            for name in node.inputs:
                users.setdefault(name, []).append(node)
        return {k: tuple(v) for k, v in users.items()}

    def producer(self, tensor: str) -> Node | None:
        """The node that writes ``tensor`` (None for inputs and initializers)."""
        return self._producers.get(tensor)

    def consumers(self, tensor: str) -> tuple[Node, ...]:
        """The nodes that read ``tensor``, in topological order."""
        return self._consumers.get(tensor, ())

    def sole_reader(self, tensor: str, op: str | None = None) -> Node | None:
        """The one node that reads ``tensor`` (an ``op`` node, when given); None when it has
        none or several, or is a graph output (whose value must stay as it is)."""
        readers = self.consumers(tensor)
        if len(readers) != 1 or tensor in self.outputs or op not in (None, readers[0].op):
            return None
        return readers[0]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node named {name!r}")

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r}") from None

    def topo_order(self) -> tuple[Node, ...]:
        """The nodes, producers before consumers; ties keep the stored order.

        Raises
        ------
        GraphError
            If the graph has a cycle (naming the nodes on it).
        """
        cached = self.__dict__.get("_topo")
        if cached is not None:
            return cached
        # Kahn's algorithm, computing each node's level (1 + the deepest producer); sorting by
        # (level, stored index) gives the same order as peeling ready "waves" in stored order,
        # in O(nodes + edges) rather than O(depth * nodes).
        producers = {out: i for i, node in enumerate(self.nodes) for out in node.outputs}
        users: list[list[int]] = [[] for _ in self.nodes]
        missing = [0] * len(self.nodes)
        for i, node in enumerate(self.nodes):
            for dep in {producers[name] for name in node.inputs if name in producers}:
                users[dep].append(i)
                missing[i] += 1
        level = [0] * len(self.nodes)
        ready = [i for i, count in enumerate(missing) if count == 0]
        seen = 0
        while ready:
            i = ready.pop()
            seen += 1
            for j in users[i]:
                level[j] = max(level[j], level[i] + 1)
                missing[j] -= 1
                if missing[j] == 0:
                    ready.append(j)
        if seen != len(self.nodes):
            stuck = ", ".join(sorted(n.name for i, n in enumerate(self.nodes) if missing[i]))
            raise GraphError(f"the graph has a cycle through nodes {stuck}; "
                             f"a dataflow graph must be acyclic")
        order = [self.nodes[i] for i in sorted(range(len(self.nodes)),
                                                key=lambda i: (level[i], i))]
        result = tuple(order)
        object.__setattr__(self, "_topo", result)
        return result

    # -- identity -------------------------------------------------------------------------

    def canonical(self) -> dict[str, Any]:
        """A JSON-able description with nodes in topological order (initializers hashed)."""
        def tensor(t: Tensor) -> dict[str, Any]:
            q = t.quant
            return {"shape": list(t.shape), "dtype": t.dtype,
                    "quant": None if q is None else
                    {"scale": list(q.scale), "zero_point": list(q.zero_point), "axis": q.axis}}
        return {
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs),
                       "outputs": list(n.outputs), "attrs": [[k, v] for k, v in n.attrs]}
                      for n in self.topo_order()],
            "tensors": {k: tensor(v) for k, v in sorted(self.tensors.items())},
            "initializers": {k: [str(v.dtype), list(v.shape),
                                 hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()]
                             for k, v in sorted(self.initializers.items())},
        }

    def signature(self) -> str:
        """A stable content hash (16 hex digits) for cache keys; the graph name is left out."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def structurally_equal(self, other: Graph) -> bool:
        """Same nodes, tensors, inputs, outputs and constant values (names included)."""
        return isinstance(other, Graph) and self.canonical() == other.canonical()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.structurally_equal(other)

    def __hash__(self) -> int:
        return hash(self.signature())

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled as its fields (its mappings are read-only views, which do not pickle): a
        # compile on a forked process sends its plan, graph included, back this way
        return (Graph, (self.nodes, dict(self.tensors), self.inputs, self.outputs,
                        dict(self.initializers), self.name))

    # -- building new graphs --------------------------------------------------------------

    def replace(self, **changes: Any) -> Graph:
        """A new graph with some fields changed; tensors nobody uses any more are dropped."""
        graph = replace(self, **changes)
        used = set(graph._all_names())
        if set(graph.tensors) - used:
            graph = replace(graph, tensors={k: v for k, v in graph.tensors.items() if k in used})
        return graph
