"""Random quantized networks, for the calibration sweep's kernels of every kind.

A sweep of GEMMs alone teaches a cost model nothing about what a real network also runs: the
unfused epilogue passes (bias, requantization, residual adds on their own), max pools,
convolutions of every kernel size and stride through the load engine's window loads, and
depthwise convolutions. :func:`network` draws a small network with the ops and QDQ form of
``onnxruntime.quantization.quantize_static`` output (Q/DQ around every activation, int8
per-channel weights, int32 biases), its shapes log-uniform, from a seed alone:

- **CNNs** (batch 1, NCHW, 4 to 48 pixels a side, 1 to 16 input channels): two to five of a
  convolution (1x1, 3x3 or 5x5, stride 1 or 2, 4 to 96 filters), a depthwise 3x3 (stride 1
  or 2), a 2x2 max pool, a residual block (3x3 convolution and Add), then a Dense layer or
  two at times;
- **MLPs** (1 to 8 rows, 8 to 640 features): two to five Dense layers (Gemm, or MatMul and
  Add as converters write them) with Relu or none, and a residual Add where shapes meet.

Activation scales follow the values' expected spread (He-initialized weights keep it near
one), not a calibration run: the model's bytes depend on the seed alone, on any machine, so
the sweep's run keys do too. What the network computes does not matter; the hardware's
output is checked against hwgen's reference executor as for any model.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Opset of the networks (that of the bundled examples).
OPSET = 21
#: Largest Dense width and convolution filter count drawn.
MAX_UNITS, MAX_FILTERS = 256, 96


class _Builder:
    """Nodes, initializers and NCHW (or rows x features) shapes of one network."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.scales: dict[str, float] = {}  # of each dequantized activation
        self.n = 0

    def name(self, what: str) -> str:
        self.n += 1
        return f"{what}{self.n}"

    def log_uniform(self, lo: int, hi: int) -> int:
        return int(round(math.exp(self.rng.uniform(math.log(lo), math.log(hi)))))

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.shapes[out] = shape
        return out

    def qdq(self, x: str, scale: float, relu: bool = False) -> str:
        """Quantize and dequantize ``x``: int8 with zero point -128 after a Relu (as
        onnxruntime writes it), uint8 at zero at times, else int8 symmetric."""
        if relu and self.rng.random() < 0.5:
            dtype, zp = np.uint8, 0
        else:
            dtype, zp = np.int8, (-128 if relu else 0)
        name = self.name("act")
        s = self.const(f"{name}_scale", np.float32(scale))
        z = self.const(f"{name}_zp", np.array(zp, dtype))
        q = self.node("QuantizeLinear", [x, s, z], self.shapes[x])
        out = self.node("DequantizeLinear", [q, s, z], self.shapes[x])
        self.scales[out] = float(np.float32(scale))
        return out

    def weights(self, shape: tuple[int, ...], fan_in: int,
                transposed: bool = False) -> tuple[str, np.ndarray]:
        """Dequantized int8 weights, symmetric per output channel (axis 0), He-initialized;
        ``transposed``: a 2-D weight stored (in, out), its channels on axis 1, as MatMul
        takes it."""
        w = self.rng.normal(0, math.sqrt(2 / fan_in), shape)
        scale = (np.abs(w.reshape(shape[0], -1)).max(axis=1) / 127).astype(np.float32)
        scale = np.maximum(scale, np.float32(1e-6))
        q = np.clip(np.rint(w / scale.reshape((-1,) + (1,) * (len(shape) - 1))), -127, 127)
        q, axis = (q.T, 1) if transposed else (q, 0)
        name = self.name("w")
        ins = [self.const(f"{name}_q", q.astype(np.int8)), self.const(f"{name}_scale", scale),
               self.const(f"{name}_zp", np.zeros(shape[0], np.int8))]
        return self.node("DequantizeLinear", ins, q.shape, axis=axis), scale

    def bias(self, scale: np.ndarray) -> str:
        """An int32 bias at ``scale`` (input scale times weight scales), as QDQ writes it."""
        b = self.rng.normal(0, 0.05, scale.shape)
        name = self.name("b")
        ins = [self.const(f"{name}_q", np.rint(b / scale).astype(np.int32)),
               self.const(f"{name}_scale", scale.astype(np.float32)),
               self.const(f"{name}_zp", np.zeros(scale.shape, np.int32))]
        return self.node("DequantizeLinear", ins, scale.shape, axis=0)

    # -- layers: each takes and returns a dequantized activation (its scale in ``scales``) --

    def conv(self, x: str, filters: int, kernel: int, stride: int,
             depthwise: bool = False, relu: bool = True) -> str:
        n, c, h, w = self.shapes[x]
        filters = c if depthwise else filters
        cin = 1 if depthwise else c
        pad = kernel // 2
        oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
        wq, ws = self.weights((filters, cin, kernel, kernel), cin * kernel * kernel)
        y = self.node("Conv", [x, wq, self.bias(ws * self.scales[x])], (n, filters, oh, ow),
                      kernel_shape=[kernel, kernel], strides=[stride, stride],
                      pads=[pad] * 4, group=c if depthwise else 1)
        if relu:
            y = self.node("Relu", [y], self.shapes[y])
        return self.qdq(y, ACT_SCALE, relu)

    def dense(self, x: str, units: int, relu: bool) -> str:
        rows, k = self.shapes[x]
        gemm = self.rng.random() < 0.5
        wq, ws = self.weights((units, k), k, transposed=not gemm)
        b = self.bias(ws * self.scales[x])
        if gemm:
            y = self.node("Gemm", [x, wq, b], (rows, units), transB=1)
        else:
            y = self.node("Add", [self.node("MatMul", [x, wq], (rows, units)), b],
                          (rows, units))
        if relu:
            y = self.node("Relu", [y], self.shapes[y])
        return self.qdq(y, ACT_SCALE, relu)

    def add(self, a: str, b: str) -> str:
        # a calibrated sum's scale: not a power-of-two multiple of the operands' (that would
        # put half the sums on a rounding tie, where a float reference is a coin toss)
        return self.qdq(self.node("Add", [a, b], self.shapes[a]), ADD_SCALE * self.scales[a])

    def max_pool(self, x: str) -> str:
        n, c, h, w = self.shapes[x]
        y = self.node("MaxPool", [x], (n, c, h // 2, w // 2), kernel_shape=[2, 2],
                      strides=[2, 2])
        return self.qdq(y, self.scales[x])  # the input's scale, as quantizers keep it

    def flatten(self, x: str) -> str:
        y = self.node("Flatten", [x], (self.shapes[x][0], int(np.prod(self.shapes[x][1:]))))
        self.scales[y] = self.scales[x]
        return y


#: The activations' scale: values of spread about one (He initialization keeps them there)
#: in int8 with room for four standard deviations.
ACT_SCALE = 4.0 / 127
#: A residual sum's scale over its operands' (about the spread of a sum of two).
ADD_SCALE = 1.37


def _cnn(b: _Builder) -> tuple[str, str]:
    rng = b.rng
    shape = (1, int(rng.choice([1, 3, 4, 8, 16])), b.log_uniform(4, 48), b.log_uniform(4, 48))
    b.shapes["x"] = shape
    x = b.qdq("x", ACT_SCALE)
    for _ in range(int(rng.integers(2, 6))):
        _, c, h, w = b.shapes[x]
        layer = rng.choice(["conv", "conv", "depthwise", "pool", "residual"])
        if layer == "pool" and min(h, w) >= 2:
            x = b.max_pool(x)
        elif layer == "depthwise":
            x = b.conv(x, c, 3, int(rng.choice([1, 2])) if min(h, w) >= 3 else 1, True)
        elif layer == "residual":
            x = b.add(x, b.conv(x, c, 3, 1, relu=False))
        else:
            stride = int(rng.choice([1, 2])) if min(h, w) >= 3 else 1
            kernel = int(rng.choice([1, 3, 5]))
            x = b.conv(x, b.log_uniform(4, MAX_FILTERS), kernel, stride)
    if rng.random() < 0.5:
        x = b.flatten(x)
        for i in range(int(rng.integers(1, 3))):
            x = b.dense(x, b.log_uniform(2, MAX_UNITS), relu=i == 0)
    return "x", x


def _mlp(b: _Builder) -> tuple[str, str]:
    rng = b.rng
    b.shapes["x"] = (int(rng.choice([1, 1, 2, 4, 8])), b.log_uniform(8, 640))
    x = b.qdq("x", ACT_SCALE)
    for _ in range(int(rng.integers(2, 6))):
        rows, k = b.shapes[x]
        if rng.random() < 0.25:  # a residual: a layer of the same width, added back
            x = b.add(x, b.dense(x, k, relu=bool(rng.random() < 0.5)))
        else:
            x = b.dense(x, b.log_uniform(8, MAX_UNITS), relu=bool(rng.random() < 0.7))
    return "x", x


def network(seed: int) -> onnx.ModelProto:
    """A random quantized network (module docstring), the same for the same ``seed``.

    Returns
    -------
    onnx.ModelProto
        One float input ``x`` and one float output ``y``; checked by ``onnx.checker``.
    """
    b = _Builder(seed)
    kind = "cnn" if b.rng.random() < 0.7 else "mlp"
    inp, out = (_cnn if kind == "cnn" else _mlp)(b)
    b.nodes.append(helper.make_node("Identity", [out], ["y"], name="y"))
    graph = helper.make_graph(
        b.nodes, f"synthetic_{kind}_{seed}",
        [helper.make_tensor_value_info(inp, TensorProto.FLOAT, b.shapes[inp])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, b.shapes[out])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="hwgen sim/synthetic.py")
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model
