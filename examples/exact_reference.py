"""A quantized ONNX model's outputs as the ONNX specification defines them, on any x86-64 CPU.

The tests compare hwgen with this, never with onnxruntime's integer kernels. Those are not exact
on every CPU: without VNNI, onnxruntime's u8 x s8 products are summed in pairs in saturating
int16 (``MatMulInteger`` of a 4x16 matrix of 255 by a 16x4 matrix of 127 gives 262,136 where
the exact sum is 518,160; ``reduce_range`` exists for this), so a test that trusts them passes
or fails with the CPU it runs on. onnxruntime's float path (QDQ with its optimizations off) is
exact on every CPU but computes in float32: MobileNetV1-0.25's logits sit up to 4 LSB from the
exact ones, after a convolution lands a few ulps on the wrong side of a rounding half.

:func:`reference_session` runs a model (QDQ or QOperator) in ``onnx.reference.ReferenceEvaluator``
with the operators below in place of its own:

- ``DequantizeLinear`` gives float64 (an 8- or 32-bit integer times a float32 scale is exact
  there), so the float operators between DequantizeLinear and QuantizeLinear compute in
  float64: their sums of products are off the exact value by about 1e-16 of it, far from
  float32's 1e-7, so a value on the wrong side of a rounding half is practically never seen;
- ``QuantizeLinear`` rounds half to even and saturates, at every opset (the evaluator
  implements only the newest versions of both); ``MaxPool`` of an integer tensor pools it
  exactly (the evaluator's pads it with NaN); ``LRN`` sums the squares over channels (the
  evaluator's sums over the batch);
- onnxruntime's ``com.microsoft`` quantized operators (``QGemm``, ``QLinearAdd``, the quantized
  pools...) from their documentation (ContribOperators.md): products accumulated in exact
  integers, everything else in float64 on the dequantized values, then quantized as
  ``QuantizeLinear`` does. The standard integer operators (``QLinearConv``,
  ``QLinearMatMul``, ``MatMulInteger``...) are the evaluator's own, which accumulate in int32
  without saturating.

The bound hwgen is held to against it is :func:`examples.real_check.within_one_lsb`: float64
sums may still differ in their last bit between CPUs (BLAS), so no test compares their bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

MS = "com.microsoft"


def reference_session(model: onnx.ModelProto | str | Path) -> ReferenceEvaluator:
    """An exact reference for ``model`` (a ``ModelProto`` or a path): see the module's text.

    Parameters
    ----------
    model
        A quantized ONNX model, QDQ or QOperator (``com.microsoft`` operators included).

    Returns
    -------
    onnx.reference.ReferenceEvaluator
        Its ``run(names, feeds)`` gives the outputs, like an onnxruntime session's (float
        outputs in float64).
    """
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    return ReferenceEvaluator(model, new_ops=list(OPERATORS))


# -- exact arithmetic -------------------------------------------------------------------------

def _along(value, ndim: int, axis: int) -> np.ndarray:
    """A quantization parameter shaped to broadcast over an ``ndim`` tensor: a per-channel
    (1-D) one along ``axis``, a per-tensor one as it is."""
    value = np.asarray(value)
    if value.ndim == 1 and ndim > 1:
        shape = [1] * ndim
        shape[axis] = value.size
        return value.reshape(shape)
    return value


def dequantize(x: np.ndarray, scale, zero_point=None, axis: int = 1) -> np.ndarray:
    """``(x - zero_point) * scale`` in float64: exact (8-bit integers times a float32 scale),
    per tensor or per channel along ``axis``."""
    scale = _along(np.asarray(scale, np.float64), x.ndim, axis)
    zp = 0 if zero_point is None else _along(np.asarray(zero_point, np.int64), x.ndim, axis)
    return (x.astype(np.int64) - zp).astype(np.float64) * scale


def quantize(value: np.ndarray, scale, zero_point) -> np.ndarray:
    """ONNX ``QuantizeLinear`` of a float64 ``value``: round half to even, add the zero point,
    saturate to the zero point's type (uint8 when it is absent)."""
    zp = np.asarray(np.uint8(0) if zero_point is None else zero_point)
    info = np.iinfo(zp.dtype)
    q = np.rint(np.asarray(value, np.float64) / np.asarray(scale, np.float64))
    q += zp.astype(np.float64)
    return np.clip(q, info.min, info.max).astype(zp.dtype)


def _float_node(op: str, inputs: list[np.ndarray], **attrs) -> np.ndarray:
    """The standard ``op`` on float64 inputs, by ONNX's own reference implementation."""
    names = [f"i{k}" for k in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["o"], **attrs)], op,
        [helper.make_tensor_value_info(n, onnx.TensorProto.DOUBLE, None) for n in names],
        [helper.make_tensor_value_info("o", onnx.TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True)))[0]


# -- com.microsoft's quantized operators (onnxruntime's ContribOperators.md) -------------------

class QGemm(OpRun):
    """``alpha * ((A - za)(B - zb) + C) * a_scale * b_scale``: the products and the int32 bias
    ``C`` (quantized with scale ``a_scale * b_scale``) accumulated in int64, ``alpha`` scaling
    both, as onnxruntime computes it; quantized when ``y_scale`` is given, else float."""

    op_domain = MS

    def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None,
             alpha=1.0, transA=0, transB=0):  # noqa: N803 (the attributes' ONNX names)
        a = a.astype(np.int64) - np.asarray(a_zp, np.int64)
        zb = np.asarray(b_zp, np.int64)  # per output column: a row of B when transposed
        b = b.astype(np.int64) - (zb.reshape(-1, 1) if transB else zb.reshape(1, -1))
        acc = (a.T if transA else a) @ (b.T if transB else b)
        if c is not None:
            acc = acc + c.astype(np.int64)
        value = acc.astype(np.float64) * np.float64(alpha) * np.float64(a_scale) \
            * np.asarray(b_scale, np.float64)
        if y_scale is None:
            return (value,)
        return (quantize(value, y_scale, y_zp),)


class _Binary(OpRun):
    op_domain = MS
    op = ""

    def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
        value = _float_node(self.op, [dequantize(a, a_scale, a_zp), dequantize(b, b_scale, b_zp)])
        return (quantize(value, c_scale, c_zp),)


class QLinearAdd(_Binary):
    op = "Add"


class QLinearMul(_Binary):
    op = "Mul"


class _Unary(OpRun):
    """``op`` on the dequantized input, quantized: ``channels_last`` (the pools) moves the
    channels to axis 1 and back; ``opset`` (QLinearSoftmax's) is onnxruntime's alone."""

    op_domain = MS
    op = ""

    def _run(self, x, x_scale, x_zp, y_scale, y_zp=None, channels_last=0, opset=None, **attrs):
        attrs = {k: v for k, v in attrs.items() if v is not None}
        value = dequantize(x, x_scale, x_zp)
        if channels_last:
            value = np.moveaxis(value, -1, 1)
        value = _float_node(self.op, [value], **attrs)
        if channels_last:
            value = np.moveaxis(value, 1, -1)
        return (quantize(value, y_scale, y_zp),)


class QLinearGlobalAveragePool(_Unary):
    op = "GlobalAveragePool"


class QLinearAveragePool(_Unary):
    op = "AveragePool"


class QLinearSigmoid(_Unary):
    op = "Sigmoid"


class QLinearLeakyRelu(_Unary):
    op = "LeakyRelu"


class QLinearSoftmax(_Unary):
    op = "Softmax"


class QLinearConcat(OpRun):
    op_domain = MS

    def _run(self, y_scale, y_zp, *triples, axis=None):
        values = [dequantize(*triples[i:i + 3]) for i in range(0, len(triples), 3)]
        return (quantize(np.concatenate(values, axis=axis), y_scale, y_zp),)


# -- ONNX's own Q/DQ, at every opset (the evaluator implements only the newest versions) ------

class DequantizeLinear(OpRun):
    op_domain = ""

    def _run(self, x, x_scale, x_zp=None, axis=1, block_size=None, output_dtype=None):
        return (dequantize(x, x_scale, x_zp, axis),)  # float64: see the module's text


class QuantizeLinear(OpRun):
    op_domain = ""

    def _run(self, x, y_scale, y_zp=None, axis=1, saturate=None, block_size=None,
             output_dtype=None, precision=None):
        zp = None if y_zp is None else _along(y_zp, x.ndim, axis)
        return (quantize(x, _along(y_scale, x.ndim, axis), zp),)


class MaxPool(OpRun):
    """ONNX ``MaxPool`` of an integer tensor (QOperator models pool int8 directly): computed on
    float64, which holds every integer exactly, since the evaluator's own pads integers with
    NaN."""

    op_domain = ""

    def _run(self, x, **attrs):
        attrs = {k: v for k, v in attrs.items() if v is not None}
        return (_float_node("MaxPool", [x.astype(np.float64)], **attrs).astype(x.dtype),)


class LRN(OpRun):
    """ONNX ``LRN`` as its specification defines it (the sum of squares over channels
    ``c - floor((size-1)/2)`` to ``c + ceil((size-1)/2)``), in float64: the evaluator's own
    (onnx 1.x ``op_lrn.py``) loops over the batch axis where it means the channels, so that
    with one image only channel 0 is normalized."""

    op_domain = ""

    def _run(self, x, alpha=None, beta=None, bias=None, size=None):
        x64 = np.asarray(x, np.float64)
        before, after = (size - 1) // 2, -(-(size - 1) // 2)
        squares = np.pad(np.square(x64), [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
        total = sum(squares[:, i:i + x.shape[1]] for i in range(size))
        return ((x64 / (bias + alpha / size * total) ** beta).astype(x.dtype),)


OPERATORS = (DequantizeLinear, QuantizeLinear, MaxPool, LRN, QGemm, QLinearAdd, QLinearMul,
             QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearSigmoid,
             QLinearLeakyRelu, QLinearSoftmax)
