"""Import ONNX models (QOperator and QDQ form) into the :mod:`fusion.ir` graph, node for node.

Every ONNX node becomes one IR node with the same op name, inputs (scales and zero points
included), outputs and attributes, so the imported graph means exactly what the model means and
:func:`fusion.reference.executor.run` runs it with ONNX semantics. On top of that the importer

* turns ``Constant`` nodes into initializers;
* infers every shape statically with :func:`fusion.ir.ops.infer` (ONNX's own inference is not
  needed), refusing dynamic input dimensions unless ``input_shapes`` fixes them;
* annotates integer tensors with their :class:`~fusion.ir.graph.Quant`
  (:mod:`fusion.frontend.onnx_quant`), which the Q/DQ folding pass reads;
* validates the result (:func:`fusion.ir.validation.validate`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fusion.frontend.batch import batch_graph, check_batch
from fusion.frontend.onnx_quant import annotate
from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Tensor
from fusion.ir.validation import validate as validate_graph

_DTYPES = {TensorProto.FLOAT: "float32", TensorProto.UINT8: "uint8", TensorProto.INT8: "int8",
           TensorProto.INT32: "int32", TensorProto.INT64: "int64"}
#: Element types that are widened to float32 when they only serve as scales (exactly).
_SCALE_TYPES = {TensorProto.FLOAT16: "float32", TensorProto.DOUBLE: "float32"}
#: onnxruntime's quantized operators (domain ``com.microsoft``) that hwgen imports, under their
#: own names: the catalog defines them with onnxruntime's semantics.
CONTRIB_OPS = ("QGemm", "QLinearAdd", "QLinearAveragePool", "QLinearConcat",
               "QLinearGlobalAveragePool", "QLinearLeakyRelu", "QLinearMul", "QLinearSigmoid",
               "QLinearSoftmax")
_CONTRIB_DOMAIN = "com.microsoft"


def import_onnx(model: str | os.PathLike | onnx.ModelProto,
                input_shapes: Mapping[str, Sequence[int]] | None = None, *,
                validate: bool = True, batch: int = 1) -> Graph:
    """Import an ONNX model.

    Parameters
    ----------
    model : path or onnx.ModelProto
    input_shapes : mapping of str to sequence of int, optional
        Static shapes for graph inputs, required for inputs with dynamic dimensions.
    validate : bool
        Run :func:`fusion.ir.validation.validate` on the result (default). Turn it off only to
        inspect a model that hwgen cannot run.
    batch : int
        Inferences per run: every graph input's leading dimension (1 in the model, or given
        by ``input_shapes``) becomes ``batch``, and shapes follow
        (:mod:`fusion.frontend.batch`). 1 (the default) imports the model as it is.

    Returns
    -------
    Graph

    Raises
    ------
    GraphError
        Naming the node or tensor and the fix: unreadable model, unsupported op or element
        type, missing initializer, dynamic shape, cycle, dtype mismatch, non-int8 weights,
        zero point out of range; with ``batch``, an input without a leading batch axis of 1 or
        a node that moves the batch axis.
    """
    batch = check_batch(batch)
    proto = _load(model)
    g = proto.graph
    constants: dict[str, np.ndarray] = {}
    for init in g.initializer:
        constants[init.name] = _array(init, init.name)
    nodes: list[Node] = []
    names: set[str] = set()
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 21)
    for index, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{index}"
        while name in names:
            name = f"{name}_{index}"
        names.add(name)
        _check_domain(n, name)
        if n.op_type == "Softmax" and opset < 13:
            raise GraphError(f"node {name!r} is Softmax of opset {opset}, which flattens the "
                             f"input to 2-D at axis; hwgen has opset 13's Softmax (one axis): "
                             f"convert the model to opset 13 or later "
                             f"(onnx.version_converter)")
        if n.op_type == "Constant":
            constants[n.output[0]] = _constant(n, name)
            continue
        attrs = {a.name: _attr(a, name) for a in n.attribute}
        if n.op_type == "Clip" and ("min" in attrs or "max" in attrs):  # opset < 11
            inputs = [n.input[0]]
            for key, default in (("min", -np.inf), ("max", np.inf)):
                constants[f"{name}_{key}"] = np.array(attrs.pop(key, default), np.float32)
                inputs.append(f"{name}_{key}")
            nodes.append(Node(name, "Clip", tuple(inputs), tuple(n.output), attrs))
            continue
        nodes.append(Node(name, n.op_type, tuple(n.input), tuple(n.output), attrs))
    for node in nodes:
        if node.op not in ops.ONNX_OPS:
            _unsupported(node)
    graph_inputs = [v for v in g.input if v.name not in constants]
    tensors: dict[str, Tensor] = {}
    scale_only = _scale_only(nodes)
    for v in graph_inputs:
        tensors[v.name] = Tensor(v.name, _input_shape(v, input_shapes, batch),
                                 _elem(v.type.tensor_type.elem_type, v.name, v.name in scale_only))
    unknown = sorted(set(input_shapes or {}) - {v.name for v in graph_inputs})
    if unknown:
        raise GraphError(f"input_shapes names {', '.join(unknown)}, which are not graph inputs; "
                         f"the inputs are {', '.join(v.name for v in graph_inputs)}")
    for key, array in constants.items():
        constants[key] = array.astype(_elem_np(array, key, key in scale_only))
        tensors[key] = Tensor(key, array.shape, str(constants[key].dtype))
    nodes = _topo_sort(nodes, set(tensors))
    given = dict(tensors)
    for node in nodes:
        inputs = [tensors[i] if i else None for i in node.inputs]
        for out, t in zip(node.outputs, _infer(node, inputs, constants), strict=True):
            tensors[out] = t
    if batch != 1:
        nodes, tensors = batch_graph(nodes, given, constants, tensors, batch, _infer)
    _check_outputs(g, tensors)
    quants = annotate(nodes, {k: len(t.shape) for k, t in tensors.items()}, constants)
    for key, quant in quants.items():
        t = tensors[key]
        tensors[key] = Tensor(t.name, t.shape, t.dtype, quant)
    used = {i for node in nodes for i in node.inputs}
    graph = Graph(nodes=tuple(nodes), tensors=tensors,
                  inputs=tuple(v.name for v in graph_inputs),
                  outputs=tuple(o.name for o in g.output),
                  initializers={k: v for k, v in constants.items() if k in used},
                  name=g.name or "onnx")
    if validate:
        validate_graph(graph)
    return graph


def _infer(node: Node, inputs: Sequence[Tensor | None], constants: Mapping[str, np.ndarray]
           ) -> list[Tensor]:
    return [Tensor(out, t.shape, t.dtype)
            for out, t in zip(node.outputs, ops.infer(node, inputs, constants), strict=True)]


def _load(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    if not path.is_file():
        raise GraphError(f"no ONNX model at {path}")
    try:
        return onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError and friends
        raise GraphError(f"{path} is not a readable ONNX model ({exc})") from None


def _check_domain(n: onnx.NodeProto, name: str) -> None:
    """Standard ops from the default domain, onnxruntime's :data:`CONTRIB_OPS` from theirs."""
    if n.domain in ("", "ai.onnx"):
        if n.op_type in CONTRIB_OPS:
            raise GraphError(f"node {name!r} is {n.op_type} in the standard ONNX domain, but "
                             f"{n.op_type} is onnxruntime's: give it domain {_CONTRIB_DOMAIN!r}")
        return
    if n.domain == _CONTRIB_DOMAIN and n.op_type in CONTRIB_OPS:
        return
    raise GraphError(f"node {name!r} is {n.domain}::{n.op_type}, which hwgen does not "
                     f"support; hwgen imports the standard ONNX ops "
                     f"{', '.join(o for o in ops.ONNX_OPS if o not in CONTRIB_OPS)} and "
                     f"{_CONTRIB_DOMAIN}'s {', '.join(CONTRIB_OPS)}")


def _unsupported(node: Node) -> None:
    raise GraphError(f"node {node.name!r} is {node.op}, which hwgen does not support; "
                     f"supported ONNX ops are {', '.join(ops.ONNX_OPS)}")


def _scale_only(nodes: Sequence[Node]) -> set[str]:
    """Tensors read only through scale inputs (where float16/double widen exactly)."""
    scale, other = set(), set()
    for node in nodes:
        slots = ops.get(node.op).slots if node.op in ops.SUPPORTED_OPS else ()
        for slot, name in zip(slots, node.inputs, strict=False):
            (scale if slot.endswith("scale") else other).add(name)
    return scale - other


def _elem(elem: int, name: str, widen: bool = False) -> str:
    if elem in _DTYPES:
        return _DTYPES[elem]
    if widen and elem in _SCALE_TYPES:
        return _SCALE_TYPES[elem]
    raise GraphError(f"tensor {name!r} has element type {TensorProto.DataType.Name(elem)}; "
                     f"hwgen supports {', '.join(_DTYPES.values())} (float16 or double only as "
                     f"scales): re-export the model with those types")


def _elem_np(array: np.ndarray, name: str, widen: bool) -> str:
    return _elem(helper.np_dtype_to_tensor_dtype(array.dtype), name, widen)


def _array(tensor: onnx.TensorProto, name: str) -> np.ndarray:
    if tensor.data_location == TensorProto.EXTERNAL:
        raise GraphError(f"initializer {name!r} is stored externally; load the model with its "
                         f"external data (onnx.load(path, load_external_data=True))")
    return np.array(numpy_helper.to_array(tensor))


def _constant(node, name: str) -> np.ndarray:
    attrs = {a.name: a for a in node.attribute}
    if "value" in attrs:
        return _array(attrs["value"].t, name)
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(helper.get_attribute_value(attrs[key]), dtype)
    raise GraphError(f"Constant node {name!r} has no supported value attribute "
                     f"(value, value_float(s), value_int(s))")


def _attr(a: onnx.AttributeProto, node: str):
    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        if value and isinstance(value[0], bytes):
            return tuple(v.decode() for v in value)
        if not all(isinstance(v, int | float) for v in value):
            raise GraphError(f"node {node!r}: attribute {a.name!r} holds tensors or graphs, "
                             f"which hwgen does not support")
        return tuple(value)
    if not isinstance(value, int | float | str):
        raise GraphError(f"node {node!r}: attribute {a.name!r} holds a tensor or graph, "
                         f"which hwgen does not support")
    return value


def _input_shape(v: onnx.ValueInfoProto, given: Mapping[str, Sequence[int]] | None,
                 batch: int = 1):
    """The input's static shape at batch 1: declared, or ``given``; with a ``batch``, a
    dynamic leading dimension (the batch) reads as 1 (:mod:`fusion.frontend.batch` sets it)."""
    if not v.type.HasField("tensor_type"):
        raise GraphError(f"graph input {v.name!r} is not a tensor (a sequence or optional); "
                         f"hwgen imports tensors only")
    dims = v.type.tensor_type.shape.dim
    declared = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                     for d in dims)
    if given and v.name in given:
        shape = tuple(int(d) for d in given[v.name])
        if len(shape) != len(declared) or any(
                isinstance(d, int) and d != s for d, s in zip(declared, shape, strict=True)):
            raise GraphError(f"input_shapes gives {shape} for {v.name!r}, which the model "
                             f"declares as {declared}; give a shape that fits")
        return shape
    if batch != 1 and declared and not isinstance(declared[0], int) and all(
            isinstance(d, int) for d in declared[1:]):
        return (1, *declared[1:])
    if not v.type.tensor_type.HasField("shape") or any(not isinstance(d, int) for d in declared):
        shown = declared if v.type.tensor_type.HasField("shape") else "unknown rank"
        raise GraphError(f"graph input {v.name!r} has a dynamic shape {shown}; hwgen needs "
                         f"static shapes: pass input_shapes={{{v.name!r}: (...)}} "
                         f"(CLI: --input-shape {v.name}=D0,D1,...)")
    return declared


def _topo_sort(nodes: list[Node], available: set[str]) -> list[Node]:
    """Nodes in dependency order; names neither available nor produced are missing inputs."""
    produced = {o for n in nodes for o in n.outputs}
    for node in nodes:
        for name in node.inputs:
            if name and name not in available and name not in produced:
                raise GraphError(f"node {node.name!r} ({node.op}) reads {name!r}, which is no "
                                 f"graph input, initializer or node output: missing "
                                 f"initializer; add {name!r} to the model's initializers")
    # Waves: wave 0 is every node whose inputs are all available, wave k+1 every other node
    # whose inputs are done once wave k has run; the order is by wave, then stored order. A
    # name is done when its first producer has run. One pass over the edges, where peeling
    # waves off a pending list costs nodes x depth (minutes for a 20,000-node chain).
    readers: dict[str, list[int]] = {}
    missing = [0] * len(nodes)
    for i, node in enumerate(nodes):
        for name in {x for x in node.inputs if x and x not in available}:
            readers.setdefault(name, []).append(i)
            missing[i] += 1
    wave = [i for i, count in enumerate(missing) if count == 0]
    level, done = 0, set(available)
    order: list[tuple[int, int]] = []
    while wave:
        following = []
        for i in wave:
            order.append((level, i))
            for name in nodes[i].outputs:
                if name in done:
                    continue
                done.add(name)
                for j in readers.get(name, ()):
                    missing[j] -= 1
                    if missing[j] == 0:
                        following.append(j)
        wave, level = following, level + 1
    if len(order) != len(nodes):
        placed = {i for _, i in order}
        stuck = ", ".join(sorted(n.name for i, n in enumerate(nodes) if i not in placed))
        raise GraphError(f"the graph has a cycle through nodes {stuck}; a dataflow graph "
                         f"must be acyclic")
    return [nodes[i] for _, i in sorted(order)]


def _check_outputs(g: onnx.GraphProto, tensors: Mapping[str, Tensor]) -> None:
    for out in g.output:
        if out.name not in tensors:
            raise GraphError(f"graph output {out.name!r} is never produced")
        tt = out.type.tensor_type
        if tt.elem_type and tt.elem_type in _DTYPES and _DTYPES[tt.elem_type] != \
                tensors[out.name].dtype:
            raise GraphError(f"graph output {out.name!r} is declared "
                             f"{_DTYPES[tt.elem_type]} but computes as "
                             f"{tensors[out.name].dtype}: dtype mismatch; fix the declaration")
