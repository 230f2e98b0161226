"""hwgen's JSON graph format: a versioned, self-contained text form of a graph.

It stores a :class:`fusion.ir.graph.Graph`; ``docs/graph_json.md`` documents it. Constants are
stored inline as base64 of their little-endian bytes with their dtype and shape, so a file needs
nothing beside it and loading it never runs code (no pickle).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from fusion.ir.graph import Graph, GraphError, Node, Quant, Tensor
from hwgen.files import dumps_json, loads_json, read_text

#: The value of the ``format`` key of every hwgen graph file.
FORMAT = "hwgen-graph"
#: The format version this module writes, and the newest it reads.
VERSION = 1
#: Element types an initializer may have in a file (numpy names).
ARRAY_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                "uint64", "float16", "float32", "float64")


class GraphFormatError(GraphError):
    """A graph file that cannot be read: the message names the file, the place and the fix."""


# -- writing ------------------------------------------------------------------------------


def _attr_to_json(node: str, key: str, value: Any) -> Any:
    if isinstance(value, tuple):
        return [_attr_to_json(node, key, v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no inf or nan; a silent "Infinity" would make files other tools reject.
        raise GraphFormatError(f"node {node!r} attribute {key!r} holds {value!r}, which JSON "
                               f"cannot represent; use a finite bound")
    return value


def _array_to_json(name: str, array: np.ndarray) -> dict[str, Any]:
    dtype = array.dtype
    if dtype.name not in ARRAY_DTYPES:
        raise GraphFormatError(f"initializer {name!r} has dtype {dtype}; the JSON format stores "
                               f"{', '.join(ARRAY_DTYPES)}")
    data = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<")).tobytes()
    return {"dtype": dtype.name, "shape": list(array.shape),
            "data": base64.b64encode(data).decode("ascii")}


def _quant_to_json(quant: Quant | None) -> dict[str, Any] | None:
    if quant is None:
        return None
    return {"scale": list(quant.scale), "zero_point": list(quant.zero_point), "axis": quant.axis}


def to_dict(graph: Graph) -> dict[str, Any]:
    """The JSON-able form of ``graph`` (what :func:`save_json` writes).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    dict
        Nodes in their stored order, tensors and initializers sorted by name.
    """
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": graph.name,
        "inputs": list(graph.inputs),
        "outputs": list(graph.outputs),
        "tensors": {name: {"shape": list(t.shape), "dtype": t.dtype,
                           "quant": _quant_to_json(t.quant)}
                    for name, t in sorted(graph.tensors.items())},
        "nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs),
                   "outputs": list(n.outputs),
                   "attrs": {k: _attr_to_json(n.name, k, v) for k, v in n.attrs}}
                  for n in graph.nodes],
        "initializers": {name: _array_to_json(name, a)
                         for name, a in sorted(graph.initializers.items())},
    }


def save_json(graph: Graph, path: str | Path) -> None:
    """Write ``graph`` to ``path`` in the hwgen JSON graph format (``docs/graph_json.md``).

    Parameters
    ----------
    graph : Graph
    path : str or Path

    Raises
    ------
    GraphFormatError
        If an attribute or initializer cannot be stored (a non-finite float attribute, an
        unsupported array dtype).
    """
    Path(path).write_text(to_text(graph))


def to_text(graph: Graph) -> str:
    """The text :func:`save_json` writes: :func:`to_dict` as indented JSON, each list of
    numbers on one line (:func:`hwgen.files.dumps_json`).

    Raises
    ------
    GraphFormatError
        As :func:`save_json`.
    """
    return dumps_json(to_dict(graph)) + "\n"


# -- reading ------------------------------------------------------------------------------


class _Reader:
    """Checks each field as it reads it, so an error can name the JSON path that is wrong."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> GraphFormatError:
        return GraphFormatError(f"{self.source}: {where}: {message}")

    def get(self, obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str,
            default: Any = ...) -> Any:
        if key not in obj:
            if default is not ...:
                return default
            raise self.fail(where, f"missing key {key!r}")
        value = obj[key]
        # bool is an int in Python, but never a valid count, shape or zero point here.
        if isinstance(value, bool) and bool not in _as_tuple(kind):
            raise self.fail(f"{where}.{key}", f"expected {_kind_name(kind)}, not {value!r}")
        if not isinstance(value, kind):
            raise self.fail(f"{where}.{key}", f"expected {_kind_name(kind)}, not "
                                              f"{type(value).__name__} {_short(value)}")
        return value

    def str_list(self, obj: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
        items = self.get(obj, key, list, where)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.fail(f"{where}.{key}[{i}]", f"expected a tensor name (a string), "
                                                       f"not {_short(item)}")
        return tuple(items)

    def int_list(self, obj: dict[str, Any], key: str, where: str) -> tuple[int, ...]:
        items = self.get(obj, key, list, where)
        for i, item in enumerate(items):
            if not isinstance(item, int) or isinstance(item, bool):
                raise self.fail(f"{where}.{key}[{i}]", f"expected an integer, not {_short(item)}")
        return tuple(items)

    def quant(self, obj: Any, where: str) -> Quant | None:
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected an object or null, not {_short(obj)}")
        scale = self.get(obj, "scale", list, where)
        for i, s in enumerate(scale):
            if not isinstance(s, int | float) or isinstance(s, bool):
                raise self.fail(f"{where}.scale[{i}]", f"expected a number, not {_short(s)}")
        zero_point = self.int_list(obj, "zero_point", where)
        axis = self.get(obj, "axis", (int, type(None)), where, default=None)
        try:
            return Quant(tuple(scale), zero_point, axis)
        except GraphError as exc:
            raise self.fail(where, str(exc)) from None

    def tensor(self, name: str, obj: Any, where: str) -> Tensor:
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected an object, not {_short(obj)}")
        shape = self.int_list(obj, "shape", where)
        dtype = self.get(obj, "dtype", str, where)
        quant = self.quant(obj.get("quant"), f"{where}.quant")
        try:
            return Tensor(name, shape, dtype, quant)
        except GraphError as exc:
            raise self.fail(where, str(exc)) from None

    def attr(self, value: Any, where: str) -> Any:
        if isinstance(value, list):
            return tuple(self.attr(v, f"{where}[{i}]") for i, v in enumerate(value))
        if value is None or isinstance(value, bool | int | float | str):
            return value
        raise self.fail(where, f"attribute values are numbers, strings, booleans, null or "
                               f"lists of them, not {_short(value)}")

    def node(self, obj: Any, where: str) -> Node:
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected an object, not {_short(obj)}")
        name = self.get(obj, "name", str, where)
        op = self.get(obj, "op", str, where)
        inputs = self.str_list(obj, "inputs", where)
        outputs = self.str_list(obj, "outputs", where)
        attrs = self.get(obj, "attrs", dict, where, default={})
        return Node(name, op, inputs, outputs,
                    {k: self.attr(v, f"{where}.attrs.{k}") for k, v in attrs.items()})

    def array(self, obj: Any, where: str) -> np.ndarray:
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected an object, not {_short(obj)}")
        dtype = self.get(obj, "dtype", str, where)
        if dtype not in ARRAY_DTYPES:
            raise self.fail(f"{where}.dtype", f"unknown dtype {dtype!r}; the format stores "
                                              f"{', '.join(ARRAY_DTYPES)}")
        shape = self.int_list(obj, "shape", where)
        if any(d < 0 for d in shape):
            raise self.fail(f"{where}.shape", f"dimensions must not be negative: {list(shape)}")
        text = self.get(obj, "data", str, where)
        try:
            data = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise self.fail(f"{where}.data", "is not valid base64") from None
        little = np.dtype(dtype).newbyteorder("<")
        expected = math.prod(shape) * little.itemsize
        if len(data) != expected:
            raise self.fail(f"{where}.data", f"holds {len(data)} bytes, but shape {list(shape)} "
                                             f"of {dtype} needs {expected}")
        return np.frombuffer(data, dtype=little).astype(np.dtype(dtype)).reshape(shape)


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer",
             float: "a number", type(None): "null", bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def from_dict(data: Any, source: str = "<graph>") -> Graph:
    """Build a graph from its JSON-able form (what :func:`load_json` reads).

    Parameters
    ----------
    data : object
        The parsed JSON document.
    source : str
        Named in error messages (the file path).

    Returns
    -------
    Graph

    Raises
    ------
    GraphFormatError
        If the document is not an hwgen graph, has an unsupported version, or a field is
        missing or malformed (the message gives its JSON path), or the graph it describes is
        inconsistent (an undeclared tensor, a cycle, ...).
    """
    r = _Reader(source)
    if not isinstance(data, dict):
        raise r.fail("top level", f"expected an object, not {_short(data)}")
    if data.get("format") != FORMAT:
        raise r.fail("format", f"this is not an hwgen graph file: expected "
                               f"\"format\": \"{FORMAT}\", found {_short(data.get('format'))}")
    version = r.get(data, "version", int, "top level")
    if version > VERSION or version < 1:
        raise r.fail("version", f"the file has format version {version}, but this hwgen reads "
                                f"versions 1 to {VERSION}; write it with a matching hwgen or "
                                f"upgrade hwgen")
    name = r.get(data, "name", str, "top level", default="graph")
    inputs = r.str_list(data, "inputs", "top level")
    outputs = r.str_list(data, "outputs", "top level")
    tensors = {k: r.tensor(k, v, f"tensors.{k}")
               for k, v in r.get(data, "tensors", dict, "top level").items()}
    nodes = [r.node(obj, f"nodes[{i}]")
             for i, obj in enumerate(r.get(data, "nodes", list, "top level"))]
    initializers = {k: r.array(v, f"initializers.{k}")
                    for k, v in r.get(data, "initializers", dict, "top level", default={}).items()}
    try:
        return Graph(nodes, tensors, inputs, outputs, initializers, name)
    except GraphError as exc:
        raise GraphFormatError(f"{source}: {exc}") from None


def load_json(path: str | Path) -> Graph:
    """Read a graph written by :func:`save_json` (``docs/graph_json.md``).

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Graph

    Raises
    ------
    GraphFormatError
        If the file is not valid JSON, not an hwgen graph, of an unsupported version, or
        malformed; the message names the file and the place.
    OSError
        If the file cannot be read.
    """
    path = Path(path)
    try:
        text = read_text(path, "graph")
    except FileNotFoundError:
        raise FileNotFoundError(f"no graph file at {path}") from None
    try:
        data = loads_json(text)  # NaN and Infinity are not JSON (nor the format)
    except ValueError as exc:  # JSONDecodeError too
        raise GraphFormatError(f"{path}: not valid JSON: {exc}") from None
    return from_dict(data, str(path))
