"""The numpy reference executor: runs any graph of :mod:`fusion.ir.ops` ops.

hwgen's integer ops run bit-exactly as the hardware does (:mod:`fusion.reference.hwgen_ops`,
built on :mod:`hwgen.reference`, so the executor, the shadow check and the kernel builders share
one implementation). The ONNX-semantics ops run as the ONNX spec (and ``onnx.reference``)
defines them (:mod:`fusion.reference.onnx_ops`; the ops without an accelerator kernel in
:mod:`fusion.reference.onnx_host_ops`), so an imported graph runs before any pass
touched it (:func:`run` takes both kinds, mixed). Each op implementation is registered in
:mod:`fusion.reference.registry`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Tensor

# The op implementations register themselves when imported; the executor looks them up.
from fusion.reference import hwgen_ops, onnx_host_ops, onnx_ops  # noqa: F401
from fusion.reference.registry import IMPLEMENTATIONS, Ctx


def run(graph: Graph, inputs: Mapping[str, Any], *, keep: bool = False,
        float64: bool = False) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``inputs`` and return its outputs.

    Parameters
    ----------
    graph : Graph
        Any mix of ONNX-semantics and hwgen ops (an imported graph, or one after passes).
    inputs : mapping of str to array-like
        One value per graph input that is not an initializer. Values are converted to the
        declared dtype when that is lossless (floats to float32, integers in range).
    keep : bool
        Return every tensor computed, not only the graph outputs (for debugging and for
        shadow checks of single kernels).
    float64 : bool
        Hold the float32 tensors the graph computes in float64 (graph outputs are returned in
        float32). The real numbers between a ``DequantizeLinear`` and a ``QuantizeLinear``
        are then computed to about 1e-16 instead of 1e-7, so ``QuantizeLinear`` rounds the
        value the quantized model means: in float32, a value within float32 noise of a half
        rounds either way, and the next layers carry the 1 LSB on and grow it (MobileNet's
        bundled input: 1 element of one layer, 4 LSB at the output). The whole-model check
        (:mod:`fusion.runtime.whole_model`) evaluates the imported graph so.

    Returns
    -------
    dict of str to numpy.ndarray
        The graph outputs by name, in the declared dtypes (``keep``: float32 tensors in
        float64 with ``float64``).

    Raises
    ------
    GraphError
        For a missing, unknown or mistyped input, or an op the executor cannot run.
    """
    env: dict[str, np.ndarray] = dict(graph.initializers)
    env.update(coerce_inputs(graph, inputs))
    for node in graph.topo_order():
        evaluate_node(graph, node, env, float64=float64)
    if keep:
        return dict(env)
    return {name: env[name].astype(graph.tensors[name].dtype, copy=False)
            for name in graph.outputs}


def coerce_inputs(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The graph inputs' values in their declared dtypes (see :func:`run`).

    Raises
    ------
    GraphError
        For an unknown, missing or mistyped input.
    """
    unknown = sorted(set(inputs) - set(graph.inputs))
    if unknown:
        raise GraphError(f"input(s) {', '.join(unknown)} are not graph inputs; the graph "
                         f"inputs are {', '.join(graph.inputs) or 'none'}")
    env = {}
    for name in graph.inputs:
        if name in graph.initializers and name not in inputs:
            continue  # an input with a default value (an initializer of the same name)
        if name not in inputs:
            raise GraphError(f"graph input {name!r} has no value; pass it in inputs")
        env[name] = _coerce(graph.tensors[name], inputs[name])
    return env


def finite_inputs(inputs: Mapping[str, np.ndarray], *, saturate: bool) -> dict[str, np.ndarray]:
    """The inputs with their float values checked: NaN and infinities are refused, or with
    ``saturate`` made finite (an infinity becomes the largest float of its sign, which
    quantizing saturates, and NaN 0.0, which quantizes to the zero point: ONNX's
    QuantizeLinear leaves NaN undefined for integer outputs, and runtimes differ).

    Raises
    ------
    ValueError
        Naming the input and how many of its values are not finite.
    """
    out = dict(inputs)
    for name, value in inputs.items():
        value = np.asarray(value)
        if not np.issubdtype(value.dtype, np.floating):
            continue
        bad = int(value.size - np.count_nonzero(np.isfinite(value)))
        if not bad:
            continue
        if not saturate:
            raise ValueError(f"input {name!r} holds {bad:,} non-finite value(s) (NaN or "
                             f"infinity), which int8 cannot represent; fix the data, or pass "
                             f"--saturate-nonfinite to saturate infinities and read NaN as 0")
        big = np.finfo(value.dtype).max
        out[name] = np.nan_to_num(value, nan=0.0, posinf=big, neginf=-big)
    return out


def evaluate_node(graph: Graph, node: Node, env: dict[str, np.ndarray], *,
                  float64: bool = False) -> None:
    """Run one node on the values in ``env`` and store its outputs there (a float32 output
    in float64 with ``float64``: see :func:`run`).

    Raises
    ------
    GraphError
        If the executor has no implementation of the op.
    """
    fn = IMPLEMENTATIONS.get(node.op)
    if fn is None:
        ops.get(node.op)  # unsupported: the catalog's message lists the supported ops
        raise GraphError(f"node {node.name!r}: the executor has no implementation of {node.op}")
    ctx = Ctx(node, ops.node_attrs(node),
              tuple(graph.tensors[n] if n else None for n in node.inputs),
              tuple(graph.tensors[n] for n in node.outputs), float64)
    values = [env[n] if n else None for n in node.inputs]
    results = fn(ctx, *values)
    for tensor, value in zip(ctx.outputs, results, strict=True):
        dtype = np.float64 if float64 and tensor.dtype == "float32" else tensor.dtype
        env[tensor.name] = np.asarray(value).astype(dtype, copy=False)


def _coerce(tensor: Tensor, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if tuple(array.shape) != tensor.shape:
        raise GraphError(f"input {tensor.name!r} has shape {tuple(array.shape)}, but the graph "
                         f"declares {tensor.shape}")
    if array.dtype == tensor.dtype:
        return array
    if tensor.dtype == "float32" and array.dtype.kind in "fiu":
        return array.astype(np.float32)
    if tensor.dtype != "float32" and array.dtype.kind in "iu":
        lo, hi = ops.INT_RANGE[tensor.dtype]
        if array.size == 0 or (array.min() >= lo and array.max() <= hi):
            return array.astype(tensor.dtype)
    raise GraphError(f"input {tensor.name!r} is {array.dtype}, but the graph declares "
                     f"{tensor.dtype}; pass {tensor.dtype} values")
