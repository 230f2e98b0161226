"""Build MLPerf Tiny-style reference networks, quantize them with onnxruntime, write them to
``examples/real/``.

The networks (float, NCHW, batch 1, batch-norm-free convolutions with bias, seeded random
weights: untrained, so their outputs mean nothing, but every op and shape is the reference's):

* ``resnet8``: ResNet-8 for CIFAR-10 (3x32x32): conv 3x3/16, three residual stacks of
  16/32/64 filters (the last two stride 2 with a 1x1 projection shortcut),
  GlobalAveragePool, Dense 10.
* ``ds_cnn``: DS-CNN small for keyword spotting (1x49x10 MFCCs): conv 10x4/64 stride 2
  ("same" padding), four depthwise-separable blocks of 64, AveragePool over the 25x5 map,
  Dense 12.
* ``mobilenet_v1_025``: MobileNetV1 with width 0.25 for visual wake words (3x96x96): conv
  3x3/8 stride 2, thirteen depthwise-separable blocks (16 to 256 filters), GlobalAveragePool,
  Dense 2.
* ``fc_autoencoder``: the anomaly-detection autoencoder (640 -> 128x4 -> 8 -> 128x4 -> 640),
  MatMul + Add as converters write Dense layers.
* ``lenet5``: LeNet-5 (1x28x28): conv 5x5/6 pad 2, MaxPool, conv 5x5/16, MaxPool, Dense 120,
  84, 10.

Each is run through ``onnxruntime.quantization.quant_pre_process`` then ``quantize_static``
(MinMax calibration on a seeded random batch, per-channel int8 weights, int8 activations):
QDQ format for all five, QOperator format (onnxruntime's ``com.microsoft`` ops) for resnet8
and lenet5. Beside each ``<model>_<format>.onnx`` goes ``<model>_<format>.npz``: a seeded
input ``x`` and the exact reference's output ``y`` for it (:mod:`examples.exact_reference`,
exact on every CPU; onnxruntime's float32 path is up to 4 LSB off it on MobileNet, and its
integer kernels, which run the QOperator models, saturate without VNNI).

The checked-in files are the source of truth. Calibration runs the float model in
onnxruntime, whose float kernels (MLAS) sum in an order that depends on the CPU's vector
width, so a scale's last bit, and so the file's bytes, can differ on another machine:
the tests load these files, never rebuild and compare them.

    .venv/bin/python -m examples.build_real_models
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from examples.exact_reference import reference_session

OUT = Path(__file__).resolve().parent / "real"
OPSET = 17
CALIBRATION_SAMPLES = 16
#: Model name -> (input shape, quantization formats).
MODELS = {
    "resnet8": ((1, 3, 32, 32), ("qdq", "qop")),
    "ds_cnn": ((1, 1, 49, 10), ("qdq",)),
    "mobilenet_v1_025": ((1, 3, 96, 96), ("qdq",)),
    "fc_autoencoder": ((1, 640), ("qdq",)),
    "lenet5": ((1, 1, 28, 28), ("qdq", "qop")),
}


def sample_input(name: str, seed: int) -> np.ndarray:
    """A seeded float input for model ``name`` (seed 0 and up calibrate; the .npz uses 1000)."""
    return np.random.default_rng(seed).normal(0, 1, MODELS[name][0]).astype(np.float32)


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's "same" padding (the extra pixel at the end), as Keras models have it."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class _Net:
    """Collects the nodes and seeded float initializers of one network, tracking NCHW shapes."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {}

    def _const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def _node(self, op: str, inputs: list[str], output: str, shape, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        self.shapes[output] = tuple(shape)
        return output

    def conv(self, x: str, name: str, filters: int, kernel, stride: int = 1, pads=None,
             depthwise: bool = False, relu: bool = True) -> str:
        """Conv + bias (+ Relu); ``pads`` default "same"; He-initialized weights."""
        n, c, h, w = self.shapes[x]
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        group, cin = (c, 1) if depthwise else (1, c)
        filters = c if depthwise else filters
        if pads is None:
            (t, b), (lft, r) = same_pads(h, kh, stride), same_pads(w, kw, stride)
            pads = [t, lft, b, r]
        weight = self.rng.normal(0, np.sqrt(2 / (cin * kh * kw)), (filters, cin, kh, kw))
        bias = self.rng.normal(0, 0.05, filters)
        oh = (h + pads[0] + pads[2] - kh) // stride + 1
        ow = (w + pads[1] + pads[3] - kw) // stride + 1
        y = self._node("Conv", [x, self._const(f"{name}_w", weight),
                                self._const(f"{name}_b", bias)], name, (n, filters, oh, ow),
                       kernel_shape=[kh, kw], strides=[stride, stride], pads=pads,
                       group=group)
        return self.relu(y) if relu else y

    def relu(self, x: str) -> str:
        return self._node("Relu", [x], f"{x}_relu", self.shapes[x])

    def add(self, a: str, b: str, name: str) -> str:
        return self._node("Add", [a, b], name, self.shapes[a])

    def separable(self, x: str, name: str, filters: int, stride: int = 1) -> str:
        """A depthwise 3x3 conv then a pointwise 1x1 conv, each with bias and Relu."""
        x = self.conv(x, f"{name}_dw", 0, 3, stride, depthwise=True)
        return self.conv(x, f"{name}_pw", filters, 1)

    def max_pool(self, x: str, name: str) -> str:
        n, c, h, w = self.shapes[x]
        return self._node("MaxPool", [x], name, (n, c, h // 2, w // 2), kernel_shape=[2, 2],
                          strides=[2, 2])

    def global_pool(self, x: str, name: str) -> str:
        """GlobalAveragePool then Flatten to (N, C)."""
        n, c = self.shapes[x][:2]
        pooled = self._node("GlobalAveragePool", [x], name, (n, c, 1, 1))
        return self._node("Flatten", [pooled], f"{name}_flat", (n, c))

    def flatten(self, x: str, name: str) -> str:
        n = self.shapes[x][0]
        return self._node("Flatten", [x], name, (n, int(np.prod(self.shapes[x][1:]))))

    def dense(self, x: str, name: str, units: int, relu: bool = True, gemm: bool = True) -> str:
        """A Dense layer: Gemm(transB) as PyTorch exports it, or MatMul + Add as tf2onnx does."""
        n, k = self.shapes[x]
        weight = self.rng.normal(0, np.sqrt(2 / k), (units, k))
        bias = self.rng.normal(0, 0.05, units)
        if gemm:
            y = self._node("Gemm", [x, self._const(f"{name}_w", weight),
                                    self._const(f"{name}_b", bias)], name, (n, units), transB=1)
        else:
            mm = self._node("MatMul", [x, self._const(f"{name}_w", weight.T)], f"{name}_mm",
                            (n, units))
            y = self._node("Add", [mm, self._const(f"{name}_b", bias)], name, (n, units))
        return self.relu(y) if relu else y

    def model(self, name: str, output: str, input_shape=None) -> onnx.ModelProto:
        """The network as a checked model: input ``x`` (``MODELS[name]``'s shape unless
        ``input_shape``), output ``y``."""
        self.nodes.append(helper.make_node("Identity", [output], ["y"], name="y"))
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                           input_shape or MODELS[name][0])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, self.shapes[output])],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="hwgen examples/build_real_models.py")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def resnet8() -> onnx.ModelProto:
    net = _Net(101)
    net.shapes["x"] = MODELS["resnet8"][0]
    x = net.conv("x", "conv0", 16, 3)
    for stack, filters in enumerate((16, 32, 64), start=1):
        stride = 1 if stack == 1 else 2
        y = net.conv(x, f"s{stack}_a", filters, 3, stride)
        y = net.conv(y, f"s{stack}_b", filters, 3, relu=False)
        if stride != 1:  # the projection shortcut
            x = net.conv(x, f"s{stack}_proj", filters, 1, stride, relu=False)
        x = net.relu(net.add(x, y, f"s{stack}_add"))
    x = net.global_pool(x, "pool")
    return net.model("resnet8", net.dense(x, "fc", 10, relu=False))


def ds_cnn() -> onnx.ModelProto:
    net = _Net(102)
    net.shapes["x"] = MODELS["ds_cnn"][0]
    x = net.conv("x", "conv0", 64, (10, 4), 2)
    for block in range(1, 5):
        x = net.separable(x, f"ds{block}", 64)
    _, _, h, w = net.shapes[x]
    x = net._node("AveragePool", [x], "pool", (1, 64, 1, 1), kernel_shape=[h, w])
    x = net.flatten(x, "pool_flat")
    return net.model("ds_cnn", net.dense(x, "fc", 12, relu=False))


def mobilenet_v1_025() -> onnx.ModelProto:
    net = _Net(103)
    net.shapes["x"] = MODELS["mobilenet_v1_025"][0]
    x = net.conv("x", "conv0", 8, 3, 2)
    blocks = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2)] + [(128, 1)] * 5 \
        + [(256, 2), (256, 1)]
    for i, (filters, stride) in enumerate(blocks, start=1):
        x = net.separable(x, f"b{i}", filters, stride)
    x = net.global_pool(x, "pool")
    return net.model("mobilenet_v1_025", net.dense(x, "fc", 2, relu=False))


def fc_autoencoder() -> onnx.ModelProto:
    net = _Net(104)
    net.shapes["x"] = MODELS["fc_autoencoder"][0]
    x = "x"
    for i, units in enumerate([128] * 4 + [8] + [128] * 4, start=1):
        x = net.dense(x, f"fc{i}", units, gemm=False)
    return net.model("fc_autoencoder", net.dense(x, "fc_out", 640, relu=False, gemm=False))


def lenet5() -> onnx.ModelProto:
    net = _Net(105)
    net.shapes["x"] = MODELS["lenet5"][0]
    x = net.max_pool(net.conv("x", "conv1", 6, 5, pads=[2, 2, 2, 2]), "pool1")
    x = net.max_pool(net.conv(x, "conv2", 16, 5, pads=[0, 0, 0, 0]), "pool2")
    x = net.flatten(x, "flat")
    x = net.dense(net.dense(x, "fc1", 120), "fc2", 84)
    return net.model("lenet5", net.dense(x, "fc3", 10, relu=False))


BUILDERS = {"resnet8": resnet8, "ds_cnn": ds_cnn, "mobilenet_v1_025": mobilenet_v1_025,
            "fc_autoencoder": fc_autoencoder, "lenet5": lenet5}


def quantize(name: str, float_model: onnx.ModelProto, fmt: str, path: Path,
             sample=None) -> None:
    """Pre-process and statically quantize ``float_model`` to ``path`` in format ``fmt``,
    calibrated on ``sample(seed)`` for seeds 0 to 15 (default: :func:`sample_input`)."""
    sample = sample or (lambda seed: sample_input(name, seed))
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_static,
    )

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.seeds = iter(range(CALIBRATION_SAMPLES))

        def get_next(self) -> dict[str, np.ndarray] | None:
            seed = next(self.seeds, None)
            return None if seed is None else {"x": sample(seed)}

    with tempfile.TemporaryDirectory() as tmp:
        raw, prepared = Path(tmp) / "float.onnx", Path(tmp) / "prepared.onnx"
        onnx.save(float_model, str(raw))
        # The shapes are static: ONNX shape inference does; the symbolic pass would need sympy.
        quant_pre_process(str(raw), str(prepared), skip_symbolic_shape=True)
        quantize_static(str(prepared), str(path), Batches(),
                        quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                        per_channel=True, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, build in BUILDERS.items():
        float_model = build()
        for fmt in MODELS[name][1]:
            path = OUT / f"{name}_{fmt}.onnx"
            quantize(name, float_model, fmt, path)
            x = sample_input(name, 1000)
            (y,) = reference_session(path).run(["y"], {"x": x})
            if y.dtype == np.float64:  # the reference computes in float64; the model says float
                y = y.astype(np.float32)
            np.savez(path.with_suffix(".npz"), x=x, y=y)
            print(f"wrote {path.relative_to(OUT.parent.parent)} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
