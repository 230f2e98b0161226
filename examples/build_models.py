"""Build the bundled example models with ``onnx.helper`` and write them beside this script.

* ``qop_mlp.onnx``: a QOperator MLP. QuantizeLinear (uint8) -> QLinearMatMul (int8 weights,
  per-column scales, uint8 out) -> QLinearMatMul (uint8 out, zero point 128). Output: uint8.
  (ONNX allows an int8 output from a uint8 input, but onnxruntime, the tests' reference, has
  QLinearMatMul kernels only for an output of the input's type.)
* ``qdq_mlp_residual.onnx``: a QDQ MLP as static quantizers write it, with a residual add:
  Reshape -> Q/DQ -> MatMul+bias -> Relu -> Q/DQ -> MatMul+bias -> Clip(0, 6) -> Q/DQ ->
  Add(the two dequantized branches) -> Q -> DQ. Output: float32 (its int8 source is
  ``y_q``).
* ``qdq_pot_residual.onnx``: a QDQ residual block with power-of-two scales, as Brevitas- and
  FINN-style quantizers make them: Q/DQ -> MatMul+bias -> Relu -> Q/DQ -> MatMul+bias ->
  Q/DQ -> Add(the two branches) -> Q -> DQ. Every scale ratio is a power of two, so many sums
  and requantized accumulators land exactly on a half: it exercises the rounding rule
  (half to even, as QuantizeLinear) where calibrated scales never do. Output: float32.
* ``qdq_cnn.onnx``: a small QDQ CNN: Conv(3x3, pad 1)+bias -> Relu -> Q/DQ -> MaxPool 2x2 ->
  Q/DQ -> depthwise Conv(3x3) -> Relu -> Q/DQ -> Flatten -> Gemm(transB) -> Q -> DQ. Output:
  float32 (its int8 source is ``y_q``).

Weights are int8, symmetric, per output channel; activation scales are calibrated on a fixed
random batch with the float model, so the quantized models are faithful. Everything is
seeded, and the calibration's dot products are exact sums (``math.fsum``) rather than BLAS
calls, whose summation order (and so the last bit of a scale) depends on the CPU: running the
script again, on any x86-64 machine, writes the same bytes.

    .venv/bin/python -m examples.build_models     (or: .venv/bin/python examples/build_models.py)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
OPSET = 21
#: Input shapes and a seeded calibration/test batch for each model.
INPUTS = {"qop_mlp": (8, 64), "qdq_mlp_residual": (2, 4, 32), "qdq_cnn": (2, 3, 12, 12),
          "qdq_pot_residual": (8, 32)}


def sample_input(name: str, seed: int = 1) -> np.ndarray:
    """A float input batch for model ``name`` (the tests use the same one)."""
    return np.random.default_rng(seed).normal(0, 1, INPUTS[name]).astype(np.float32)


class _Model:
    """A tiny helper that collects nodes and initializers."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs, output: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output

    def weights(self, shape, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Random float weights, quantized int8 symmetric per channel of ``axis``."""
        w = self.rng.normal(0, 1 / np.sqrt(np.prod(shape) / shape[axis]), shape)
        other = tuple(i for i in range(len(shape)) if i != axis)
        scale = (np.abs(w).max(axis=other) / 127).astype(np.float32)
        bshape = [1] * len(shape)
        bshape[axis] = -1
        q = np.clip(np.rint(w / scale.reshape(bshape)), -127, 127).astype(np.int8)
        return q, scale, (q * scale.reshape(bshape)).astype(np.float32)

    def qdq(self, x: str, name: str, scale: float, zp: int = 0, dtype=np.int8) -> str:
        """QuantizeLinear then DequantizeLinear of ``x`` (the activation quantization)."""
        s = self.const(f"{name}_scale", np.float32(scale))
        z = self.const(f"{name}_zp", np.array(zp, dtype))
        q = self.node("QuantizeLinear", [x, s, z], f"{name}_q")
        return self.node("DequantizeLinear", [q, s, z], f"{name}_dq")

    def dq_weights(self, name: str, q: np.ndarray, scale: np.ndarray, axis: int) -> str:
        self.const(f"{name}_q", q)
        self.const(f"{name}_scale", scale)
        self.const(f"{name}_zp", np.zeros(scale.shape, np.int8))
        return self.node("DequantizeLinear", [f"{name}_q", f"{name}_scale", f"{name}_zp"],
                         f"{name}_dq", axis=axis)

    def dq_bias(self, name: str, bias: np.ndarray, scale: np.ndarray) -> str:
        """An int32 bias quantized with ``in_scale * w_scale`` (zero point 0), as QDQ does."""
        self.const(f"{name}_q", np.rint(bias / scale).astype(np.int32))
        self.const(f"{name}_scale", scale.astype(np.float32))
        self.const(f"{name}_zp", np.zeros(scale.shape, np.int32))
        return self.node("DequantizeLinear", [f"{name}_q", f"{name}_scale", f"{name}_zp"],
                         f"{name}_dq", axis=0)

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="hwgen examples/build_models.py")
        model.ir_version = 10
        onnx.checker.check_model(model, full_check=True)
        return model


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float64, each element the correctly rounded sum of its products.

    Elementwise products are IEEE-exact on every CPU; only the order of a sum differs between
    BLAS kernels, and ``math.fsum`` does not depend on the order.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.array([[math.fsum(a[i] * b[:, j]) for j in range(b.shape[1])]
                     for i in range(a.shape[0])])


def _scale(values: np.ndarray, signed: bool = True) -> float:
    return float(np.abs(values).max() / 127) if signed else float(values.max() / 255)


def qop_mlp() -> onnx.ModelProto:
    m = _Model(10)
    x = sample_input("qop_mlp", seed=0)
    w1, s1, f1 = m.weights((64, 32), axis=1)
    w2, s2, f2 = m.weights((32, 10), axis=1)
    h = np.maximum(_matmul(x, f1), 0)  # calibration: the hidden layer's float range
    xs, hs, ys = _scale(x), _scale(h, signed=False), _scale(_matmul(h, f2))
    c = m.const
    xq = m.node("QuantizeLinear", ["x", c("x_scale", np.float32(xs)),
                                   c("x_zp", np.uint8(128))], "x_q")
    hq = m.node("QLinearMatMul", [xq, "x_scale", "x_zp", c("w1", w1), c("w1_scale", s1),
                                  c("w1_zp", np.zeros(32, np.int8)), c("h_scale", np.float32(hs)),
                                  c("h_zp", np.uint8(0))], "h_q")
    m.node("QLinearMatMul", [hq, "h_scale", "h_zp", c("w2", w2), c("w2_scale", s2),
                             c("w2_zp", np.zeros(10, np.int8)), c("y_scale", np.float32(ys)),
                             c("y_zp", np.uint8(128))], "y")
    return m.model("qop_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (8, 64))],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, (8, 10))])


def qdq_mlp_residual() -> onnx.ModelProto:
    m = _Model(20)
    x = sample_input("qdq_mlp_residual", seed=0).reshape(8, 32)
    w1, s1, f1 = m.weights((32, 32), axis=1)
    w2, s2, f2 = m.weights((32, 32), axis=1)
    b1, b2 = m.rng.normal(0, 0.1, 32), m.rng.normal(0, 0.1, 32)
    h1 = np.maximum(_matmul(x, f1) + b1, 0)
    h2 = np.clip(_matmul(h1, f2) + b2, 0, 6)
    xs, h1s, h2s, ys = _scale(x), _scale(h1), _scale(h2), _scale(h1 + h2)
    flat = m.node("Reshape", ["x", m.const("shape", np.array([8, 32], np.int64))], "x_flat")
    a = m.qdq(flat, "xa", xs)
    mm1 = m.node("MatMul", [a, m.dq_weights("w1", w1, s1, 1)], "mm1")
    r1 = m.node("Relu", [m.node("Add", [mm1, m.dq_bias("b1", b1, xs * s1)], "add1")], "relu1")
    h1dq = m.qdq(r1, "h1", h1s)
    mm2 = m.node("MatMul", [h1dq, m.dq_weights("w2", w2, s2, 1)], "mm2")
    add2 = m.node("Add", [mm2, m.dq_bias("b2", b2, h1s * s2)], "add2")
    clip = m.node("Clip", [add2, m.const("lo", np.float32(0)), m.const("hi", np.float32(6))],
                  "clip2")
    h2dq = m.qdq(clip, "h2", h2s)
    res = m.node("Add", [h1dq, h2dq], "residual")
    y = m.qdq(res, "y", ys)
    m.node("Identity", [y], "y")
    return m.model("qdq_mlp_residual",
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 4, 32))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, (8, 32))])


def _pot(values: np.ndarray) -> float:
    """The power-of-two scale that fits ``values`` in int8 (the smallest 2**e >= max/127)."""
    return float(2.0 ** math.ceil(math.log2(float(np.abs(values).max()) / 127)))


def qdq_pot_residual() -> onnx.ModelProto:
    m = _Model(30)
    x = sample_input("qdq_pot_residual", seed=0)
    w1, w2 = (m.rng.normal(0, 1 / np.sqrt(32), (32, 32)) for _ in range(2))
    ws1, ws2 = _pot(w1), _pot(w2)
    q1, q2 = (np.clip(np.rint(w / s), -127, 127).astype(np.int8) for w, s in ((w1, ws1),
                                                                                 (w2, ws2)))
    f1, f2 = q1 * np.float32(ws1), q2 * np.float32(ws2)
    b1, b2 = m.rng.normal(0, 0.1, 32), m.rng.normal(0, 0.1, 32)
    h1 = np.maximum(_matmul(x, f1) + b1, 0)
    h2 = _matmul(h1, f2) + b2
    # one scale for both branches, twice that for their sum: every ratio a power of two
    xs, hs = _pot(x), max(_pot(h1), _pot(h2))
    ys = 2 * hs
    a = m.qdq("x", "xa", xs)
    mm1 = m.node("MatMul", [a, m.dq_weights("w1", q1, np.array([ws1], np.float32), 1)], "mm1")
    r1 = m.node("Relu", [m.node("Add", [mm1, m.dq_bias("b1", b1, np.array([xs * ws1]))],
                                "add1")], "relu1")
    h1dq = m.qdq(r1, "h1", hs)
    mm2 = m.node("MatMul", [h1dq, m.dq_weights("w2", q2, np.array([ws2], np.float32), 1)],
                 "mm2")
    h2dq = m.qdq(m.node("Add", [mm2, m.dq_bias("b2", b2, np.array([hs * ws2]))], "add2"),
                 "h2", hs)
    y = m.qdq(m.node("Add", [h1dq, h2dq], "residual"), "y", ys)
    m.node("Identity", [y], "y")
    return m.model("qdq_pot_residual",
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (8, 32))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, (8, 32))])


def _conv(x: np.ndarray, w: np.ndarray, pad: int, group: int = 1) -> np.ndarray:
    """Float NCHW convolution for calibration (stride 1), by im2col and :func:`_matmul`."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, m, oh, ow))
    per_group = m // group
    for g in range(group):
        # Rows: (n, y, x) positions; columns: (channel, ky, kx) of this group's inputs.
        cols = np.stack([xp[:, g * cg:(g + 1) * cg, i:i + oh, j:j + ow]
                         for i in range(kh) for j in range(kw)], axis=2)  # n, cg, kh*kw, oh, ow
        cols = cols.transpose(0, 3, 4, 1, 2).reshape(n * oh * ow, cg * kh * kw)
        weights = w[g * per_group:(g + 1) * per_group].reshape(per_group, cg * kh * kw)
        y = _matmul(cols, weights.T).reshape(n, oh, ow, per_group)
        out[:, g * per_group:(g + 1) * per_group] = y.transpose(0, 3, 1, 2)
    return out


def qdq_cnn() -> onnx.ModelProto:
    m = _Model(30)
    x = sample_input("qdq_cnn", seed=0)
    w1, s1, f1 = m.weights((8, 3, 3, 3), axis=0)
    w2, s2, f2 = m.weights((8, 1, 3, 3), axis=0)
    w3, s3, f3 = m.weights((10, 8 * 4 * 4), axis=0)
    b1, b2, b3 = (m.rng.normal(0, 0.1, n) for n in (8, 8, 10))
    c1 = np.maximum(_conv(x, f1, 1) + b1.reshape(1, -1, 1, 1), 0)
    p1 = c1.reshape(2, 8, 6, 2, 6, 2).max(axis=(3, 5))
    c2 = np.maximum(_conv(p1, f2, 0, group=8) + b2.reshape(1, -1, 1, 1), 0)
    y = _matmul(c2.reshape(2, -1), f3.T) + b3
    xs, c1s, c2s, ys = _scale(x), _scale(c1, signed=False), _scale(c2), _scale(y)
    a = m.qdq("x", "xa", xs)
    conv1 = m.node("Conv", [a, m.dq_weights("w1", w1, s1, 0), m.dq_bias("b1", b1, xs * s1)],
                   "conv1", pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    c1dq = m.qdq(m.node("Relu", [conv1], "relu1"), "c1", c1s, 0, np.uint8)
    pool = m.node("MaxPool", [c1dq], "pool", kernel_shape=[2, 2], strides=[2, 2])
    p1dq = m.qdq(pool, "p1", c1s, 0, np.uint8)
    conv2 = m.node("Conv", [p1dq, m.dq_weights("w2", w2, s2, 0),
                            m.dq_bias("b2", b2, c1s * s2)], "conv2", group=8)
    c2dq = m.qdq(m.node("Relu", [conv2], "relu2"), "c2", c2s)
    flat = m.node("Flatten", [c2dq], "flat")
    gemm = m.node("Gemm", [flat, m.dq_weights("w3", w3, s3, 0), m.dq_bias("b3", b3, c2s * s3)],
                  "fc", transB=1)
    out = m.qdq(gemm, "y", ys)
    m.node("Identity", [out], "y")
    return m.model("qdq_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             (2, 3, 12, 12))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 10))])


MODELS = {"qop_mlp": qop_mlp, "qdq_mlp_residual": qdq_mlp_residual, "qdq_cnn": qdq_cnn,
          "qdq_pot_residual": qdq_pot_residual}


def main() -> None:
    for name, build in MODELS.items():
        path = HERE / f"{name}.onnx"
        onnx.save(build(), str(path))
        print(f"wrote {path.relative_to(HERE.parent)} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
