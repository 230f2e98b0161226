"""The numpy reference executor: runs any graph of :mod:`fusion.ir.ops` ops.

hwgen's integer ops run bit-exactly as the hardware does: every one of them calls
:mod:`hwgen.reference` (requantize, int32 bias saturation, relu, clamp, the int32 GEMM wrap), so
the executor, the shadow check and the kernel builders share one implementation. The
ONNX-semantics ops run as the ONNX spec (and ``onnx.reference``) defines them, so an imported
graph runs before any pass touched it (:func:`run` takes both kinds, mixed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.ir import ops
from fusion.ir import windows as _windows
from fusion.ir.graph import Graph, GraphError, Node, Tensor
from hwgen import reference as ref


@dataclass(frozen=True)
class Ctx:
    """What a kernel sees besides its input values: the node, attributes, tensor metadata."""

    node: Node
    attrs: dict[str, Any]
    inputs: tuple[Tensor | None, ...]
    outputs: tuple[Tensor, ...]

    def error(self, message: str) -> GraphError:
        return GraphError(f"node {self.node.name!r} ({self.node.op}): {message}")


Kernel = Callable[..., tuple[np.ndarray, ...]]
KERNELS: dict[str, Kernel] = {}


def kernel(*names: str) -> Callable[[Kernel], Kernel]:
    """Register a kernel ``fn(ctx, *input_values) -> tuple of arrays`` for ops ``names``."""
    def register(fn: Kernel) -> Kernel:
        for name in names:
            KERNELS[name] = fn
        return fn
    return register


def run(graph: Graph, inputs: Mapping[str, Any], *, keep: bool = False) -> dict[str, np.ndarray]:
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

    Returns
    -------
    dict of str to numpy.ndarray
        The graph outputs by name, in the declared dtypes.

    Raises
    ------
    GraphError
        For a missing, unknown or mistyped input, or an op the executor cannot run.
    """
    env: dict[str, np.ndarray] = dict(graph.initializers)
    env.update(coerce_inputs(graph, inputs))
    for node in graph.topo_order():
        evaluate_node(graph, node, env)
    names = env if keep else graph.outputs
    return {name: env[name] for name in names}


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


def evaluate_node(graph: Graph, node: Node, env: dict[str, np.ndarray]) -> None:
    """Run one node on the values in ``env`` and store its outputs there.

    Raises
    ------
    GraphError
        If the executor has no kernel for the op.
    """
    fn = KERNELS.get(node.op)
    if fn is None:
        ops.get(node.op)  # unsupported: the catalog's message lists the supported ops
        raise GraphError(f"node {node.name!r}: the executor has no kernel for {node.op}")
    ctx = Ctx(node, ops.node_attrs(node),
              tuple(graph.tensors[n] if n else None for n in node.inputs),
              tuple(graph.tensors[n] for n in node.outputs))
    values = [env[n] if n else None for n in node.inputs]
    results = fn(ctx, *values)
    for tensor, value in zip(ctx.outputs, results, strict=True):
        env[tensor.name] = np.asarray(value).astype(tensor.dtype, copy=False)


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


# -- quantization parameters of tensors ------------------------------------------------------


def zero_point(tensor: Tensor | None, rank: int | None = None) -> np.ndarray:
    """The zero point of ``tensor`` as int64, shaped to broadcast against it (0 without Quant)."""
    q = None if tensor is None else tensor.quant
    if q is None:
        return np.int64(0)
    zp = np.array(q.zero_point, dtype=np.int64)
    if q.axis is None:
        return zp.reshape(())
    rank = len(tensor.shape) if rank is None else rank
    dims = [1] * rank
    dims[q.axis % rank] = zp.size
    return zp.reshape(dims)


def scale(tensor: Tensor) -> np.ndarray:
    """The scale of ``tensor`` as float32, shaped to broadcast against it."""
    q = tensor.quant
    s = np.array(q.scale, dtype=np.float32)
    if q.axis is None:
        return s.reshape(())
    dims = [1] * len(tensor.shape)
    dims[q.axis % len(tensor.shape)] = s.size
    return s.reshape(dims)


# -- hwgen integer ops -------------------------------------------------------------------------


@kernel("qmatmul")
def _qmatmul(ctx: Ctx, a, b):
    a64 = a.astype(np.int64) - zero_point(ctx.inputs[0])
    b64 = b.astype(np.int64) - zero_point(ctx.inputs[1])
    if a64.ndim == 2 and b64.ndim == 2:
        return (ref.gemm(a64, b64),)
    return (np.matmul(a64, b64).astype(np.int32),)  # exact in int64, wrapped like ref.gemm


@kernel("qconv2d")
def _qconv2d(ctx: Ctx, x, w):
    a = ctx.attrs
    xzp = zero_point(ctx.inputs[0])
    if xzp.ndim:
        raise ctx.error("x must be quantized per tensor")
    w64 = w.astype(np.int64) - zero_point(ctx.inputs[1])
    # Padding with x's zero point makes it contribute (zp - zp) * w = 0, as in ONNX.
    acc = _windows.conv2d(x.astype(np.int64) - xzp, w64, group=a["group"],
                          strides=a["strides"], dilations=a["dilations"], pads=a["pads"], fill=0)
    return (acc.astype(np.int32),)


@kernel("bias_add")
def _bias_add(ctx: Ctx, x, bias):
    moved = np.moveaxis(x, ctx.attrs["axis"], -1)
    return (np.moveaxis(ref.bias_add(moved, bias), -1, ctx.attrs["axis"]),)


def requant(x: np.ndarray, mult, shift, zp: int, out_dtype: str, axis: int = -1) -> np.ndarray:
    """The ``requant`` op on int32 values (see :mod:`fusion.ir.ops`), per tensor or per channel.

    uint8 runs the int8 requantize with ``zp - 128`` and adds 128 (the hardware's sign-bit
    flip): ``sat_u8(y + zp) == sat_s8(y + zp - 128) + 128`` for every integer ``y``.
    """
    offset = 128 if out_dtype == "uint8" else 0
    if not isinstance(mult, tuple):
        out = ref.requantize(x, mult, shift, zp - offset)
    else:
        moved = np.moveaxis(np.asarray(x), axis, 0)
        out = np.stack([ref.requantize(moved[c], m, s, zp - offset)
                        for c, (m, s) in enumerate(zip(mult, shift, strict=True))])
        out = np.moveaxis(out, 0, axis)
    return (out + offset).astype(out_dtype)


@kernel("requant")
def _requant(ctx: Ctx, x):
    a = ctx.attrs
    return (requant(x, a["mult"], a["shift"], a["zp"], a["out_dtype"], a["axis"]),)


@kernel("relu")
def _relu(ctx: Ctx, x):
    return (ref.relu(x),)


@kernel("clamp")
def _clamp(ctx: Ctx, x):
    return (ref.clamp(x, ctx.attrs["lo"], ctx.attrs["hi"]),)


@kernel("qadd")
def _qadd(ctx: Ctx, a, b):
    at = ctx.attrs
    acc = ref.sat((a.astype(np.int64) - zero_point(ctx.inputs[0])) * at["a_mult"]
                  + (b.astype(np.int64) - zero_point(ctx.inputs[1])) * at["b_mult"], 32)
    return (requant(acc, at["mult"], at["shift"], at["zp"], at["out_dtype"]),)


@kernel("maxpool")
def _maxpool(ctx: Ctx, x):
    a = ctx.attrs
    return (_windows.maxpool(x, a["kernel_shape"], a["strides"], a["dilations"], a["pads"],
                             ceil_mode=a["ceil_mode"]),)


@kernel("flatten")
def _flatten(ctx: Ctx, x):
    return (x.reshape(ctx.outputs[0].shape),)


@kernel("reshape")
def _reshape(ctx: Ctx, x):
    return (x.reshape(ctx.outputs[0].shape),)


@kernel("transpose")
def _transpose(ctx: Ctx, x):
    return (np.transpose(x, ctx.attrs["perm"]),)


@kernel("quantize")
def _quantize(ctx: Ctx, x):
    out = ctx.outputs[0]
    if out.quant is None:
        raise ctx.error(f"its output {out.name!r} has no quantization; give it a Quant")
    lo, hi = ops.INT_RANGE[out.dtype]
    # ONNX QuantizeLinear: float32 division, round half to even, saturate.
    q = np.rint(x.astype(np.float32) / scale(out))
    q = np.clip(q, -(2.0**40), 2.0**40).astype(np.int64) + zero_point(out)  # cast-safe
    return (np.clip(q, lo, hi),)


@kernel("dequantize")
def _dequantize(ctx: Ctx, x):
    t = ctx.inputs[0]
    if t.quant is None:
        raise ctx.error(f"its input {t.name!r} has no quantization; give it a Quant")
    return ((x.astype(np.float32) - zero_point(t).astype(np.float32)) * scale(t),)


@kernel("im2col")
def _im2col(ctx: Ctx, x):
    a = ctx.attrs
    fill = zero_point(ctx.inputs[0])
    if fill.ndim:
        raise ctx.error("x must be quantized per tensor")
    return (_windows.im2col(x, a["kernel_shape"], a["strides"], a["dilations"], a["pads"],
                            int(fill)),)


from fusion.reference import onnx_ops  # noqa: E402,F401  (registers the ONNX-semantics kernels)
