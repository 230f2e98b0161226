"""Build well-known third-party CNNs from their published layer definitions, quantize them with
onnxruntime, write them to ``examples/zoo/`` (small) or a folder of your choice (full).

These are the operators and patterns of the ONNX model zoo's classics, which MLPerf Tiny's
networks do not have (issue 32): ``Sum`` residuals as opset-9-era exporters wrote them,
``BatchNormalization`` that cannot fold (DenseNet's, after each Concat), ``LRN``
(Inception-v1), Concat (fire modules, inception modules, dense blocks), non-global average
pools (``count_include_pad`` both ways), ceil-mode max pools, grouped convolutions and the
channel shuffle (Reshape, Transpose, Reshape), and a Softmax at the end.

* ``squeezenet``: SqueezeNet 1.0 (Iandola et al. 2016): conv 7x7/96 stride 2, ceil-mode max
  pools, fire modules 2 to 9 (squeeze 1x1, expand 1x1 and 3x3, Concat), conv 1x1 to the
  classes, GlobalAveragePool, Softmax.
* ``inception_v1``: GoogLeNet (Szegedy et al. 2015): conv 7x7/64 stride 2, LRN, conv 1x1/64,
  conv 3x3/192, LRN, inception modules 3a to 5b (1x1; 1x1-3x3; 1x1-5x5; max pool-1x1, Concat),
  GlobalAveragePool, Dense, Softmax.
* ``inception_v2``: BN-Inception (Ioffe and Szegedy 2015): every convolution with a
  BatchNormalization (folded by ``quant_pre_process``), double 3x3 branches, average-pool
  projections, stride-2 modules 3c and 4e with a max pool pass-through.
* ``resnet50``: ResNet-50 (He et al. 2016, torchvision's v1.5 strides): bottlenecks
  [3, 4, 6, 3], BatchNormalization after each convolution, ``Sum`` residuals.
* ``shufflenet``: ShuffleNet v1 with 3 groups (Zhang et al. 2018): grouped 1x1 convolutions, the
  channel shuffle, depthwise 3x3, ``Sum`` residuals, and stride-2 units that Concat an
  average-pooled shortcut (``count_include_pad=0``).
* ``densenet121``: DenseNet-121 (Huang et al. 2017): dense blocks [6, 12, 24, 16] of
  BN-ReLU-conv 1x1/128-BN-ReLU-conv 3x3/32 joined by Concat, transitions BN-ReLU-conv
  1x1-AveragePool 2x2. The BatchNormalization after each Concat has no convolution to fold
  into.

``full`` sizes are the published widths and depths at 32 to 64 pixels, 1000 classes
(``make bench`` builds them, :mod:`bench.zoo_models`); ``small`` sizes keep every pattern at a
fraction of the width and depth, 10 classes, for ``make test``. Weights and batch-norm
statistics are seeded random (untrained); every model is quantized as ``examples/
build_real_models.py`` does (``quant_pre_process``, ``quantize_static``, per-channel int8):
QDQ for all, QOperator also for SqueezeNet and ShuffleNet. Beside each model goes an ``.npz``
with a seeded input ``x`` and the exact reference's output ``y``.

    .venv/bin/python -m examples.build_zoo_models              # small, into examples/zoo
    .venv/bin/python -m examples.build_zoo_models --full DIR   # full, into DIR
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import onnx

from examples.build_real_models import _Net, quantize
from examples.exact_reference import reference_session

OUT = Path(__file__).resolve().parent / "zoo"
#: Model name -> quantization formats.
FORMATS = {"squeezenet": ("qdq", "qop"), "inception_v1": ("qdq",), "inception_v2": ("qdq",),
           "resnet50": ("qdq",), "shufflenet": ("qdq", "qop"), "densenet121": ("qdq",)}
#: Model name -> input side in pixels, (full, small).
SIDES = {"squeezenet": (64, 32), "inception_v1": (64, 32), "inception_v2": (64, 32),
         "resnet50": (32, 32), "shufflenet": (64, 32), "densenet121": (32, 32)}


def input_shape(name: str, full: bool, side: int | None = None) -> tuple[int, int, int, int]:
    """The input's NCHW shape: its :data:`SIDES` side, or ``side`` pixels when given."""
    side = side or SIDES[name][0 if full else 1]
    return (1, 3, side, side)


def sample(name: str, full: bool, seed: int, side: int | None = None) -> np.ndarray:
    """A seeded float input (seeds 0 to 15 calibrate; the .npz uses 1000)."""
    shape = input_shape(name, full, side)
    return np.random.default_rng(seed).normal(0, 1, shape).astype(np.float32)


def _pooled(size: int, kernel: int, stride: int, pads: tuple[int, int], ceil: bool) -> int:
    span = size + pads[0] + pads[1] - kernel
    return (math.ceil(span / stride) if ceil else span // stride) + 1


class _ZooNet(_Net):
    """:class:`examples.build_real_models._Net` with the layers of the model zoo's classics."""

    def __init__(self, seed: int, shape: tuple[int, ...], width: float) -> None:
        super().__init__(seed)
        self.shapes["x"] = shape
        self.width = width

    def ch(self, filters: int) -> int:
        """``filters`` scaled by the width multiplier, a multiple of 3 (ShuffleNet's groups)."""
        return filters if self.width == 1 else max(3, int(round(filters * self.width / 3)) * 3)

    def gconv(self, x: str, name: str, filters: int, kernel: int, stride: int = 1,
              pad: int | None = None, group: int = 1, bn: bool = False,
              relu: bool = True) -> str:
        """Conv (``group`` groups, "same"-style symmetric ``pad``) + bias, then optionally a
        BatchNormalization and a Relu."""
        n, c, h, w = self.shapes[x]
        pad = kernel // 2 if pad is None else pad
        weight = self.rng.normal(0, np.sqrt(2 / (c // group * kernel * kernel)),
                                 (filters, c // group, kernel, kernel))
        out = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
        y = self._node("Conv", [x, self._const(f"{name}_w", weight),
                                self._const(f"{name}_b", self.rng.normal(0, 0.05, filters))],
                       name, (n, filters, *out), kernel_shape=[kernel, kernel],
                       strides=[stride, stride], pads=[pad] * 4, group=group)
        if bn:
            y = self.bn(y, f"{name}_bn")
        return self.relu(y) if relu else y

    def bn(self, x: str, name: str) -> str:
        """Inference BatchNormalization with seeded statistics."""
        c = self.shapes[x][1]
        params = [self.rng.uniform(0.5, 1.5, c), self.rng.normal(0, 0.1, c),
                  self.rng.normal(0, 0.1, c), self.rng.uniform(0.5, 1.5, c)]
        names = [self._const(f"{name}_{k}", v) for k, v in
                 zip(("scale", "bias", "mean", "var"), params, strict=True)]
        return self._node("BatchNormalization", [x, *names], name, self.shapes[x],
                          epsilon=1e-5)

    def pool(self, x: str, name: str, op: str, kernel: int, stride: int, pad: int = 0,
             ceil: bool = False, **attrs) -> str:
        n, c, h, w = self.shapes[x]
        out = (_pooled(h, kernel, stride, (pad, pad), ceil),
               _pooled(w, kernel, stride, (pad, pad), ceil))
        return self._node(op, [x], name, (n, c, *out), kernel_shape=[kernel, kernel],
                          strides=[stride, stride], pads=[pad] * 4, ceil_mode=int(ceil),
                          **attrs)

    def lrn(self, x: str, name: str) -> str:
        return self._node("LRN", [x], name, self.shapes[x], size=5, alpha=1e-4, beta=0.75,
                          bias=1.0)

    def concat(self, xs: list[str], name: str) -> str:
        n, _, h, w = self.shapes[xs[0]]
        return self._node("Concat", xs, name, (n, sum(self.shapes[x][1] for x in xs), h, w),
                          axis=1)

    def sum(self, xs: list[str], name: str) -> str:
        return self._node("Sum", xs, name, self.shapes[xs[0]])

    def shuffle(self, x: str, name: str, groups: int) -> str:
        """The channel shuffle: Reshape to (N, g, C/g, H, W), swap axes 1 and 2, Reshape."""
        n, c, h, w = self.shapes[x]
        split = (n, groups, c // groups, h, w)
        y = self._node("Reshape", [x, self._shape(f"{name}_split", split)], f"{name}_split",
                       split)
        y = self._node("Transpose", [y], f"{name}_t", (n, c // groups, groups, h, w),
                       perm=[0, 2, 1, 3, 4])
        return self._node("Reshape", [y, self._shape(f"{name}_join", (n, c, h, w))], name,
                          (n, c, h, w))

    def _shape(self, name: str, shape: tuple[int, ...]) -> str:
        self.inits.append(onnx.numpy_helper.from_array(np.array(shape, np.int64),
                                                       f"{name}_shape"))
        return f"{name}_shape"

    def head(self, x: str, classes: int, dense: bool = True) -> str:
        """GlobalAveragePool, Flatten, (Dense,) Softmax."""
        x = self.global_pool(x, "pool")
        if dense:
            x = self.dense(x, "fc", classes, relu=False)
        return self._node("Softmax", [x], "prob", self.shapes[x], axis=1)


def squeezenet(full: bool, side: int | None = None) -> onnx.ModelProto:
    # the small width keeps every expand layer a multiple of 24 channels: each Concat then
    # joins whole column blocks of the 4x4 and 8x8 arrays (fusion.kernels.concat)
    net = _ZooNet(201, input_shape("squeezenet", full, side), 1 if full else 0.375)
    x = net.gconv("x", "conv1", net.ch(96), 7, 2, pad=0)
    x = net.pool(x, "pool1", "MaxPool", 3, 2, ceil=True)
    fires = [(16, 64), (16, 64), (32, 128), "pool", (32, 128), (48, 192), (48, 192),
             (64, 256), "pool", (64, 256)]
    for i, fire in enumerate(fires, start=2):
        if fire == "pool":
            x = net.pool(x, f"pool{i}", "MaxPool", 3, 2, ceil=True)
            continue
        s = net.gconv(x, f"fire{i}_squeeze", net.ch(fire[0]), 1)
        x = net.concat([net.gconv(s, f"fire{i}_e1", net.ch(fire[1]), 1),
                        net.gconv(s, f"fire{i}_e3", net.ch(fire[1]), 3)], f"fire{i}")
    classes = 1000 if full else 10
    x = net.gconv(x, "conv10", classes, 1)
    return net.model("squeezenet", net.head(x, classes, dense=False), net.shapes["x"])


def _inception_v1_module(net: _ZooNet, x: str, name: str, f: tuple[int, ...]) -> str:
    b1 = net.gconv(x, f"{name}_1x1", net.ch(f[0]), 1)
    b2 = net.gconv(net.gconv(x, f"{name}_3r", net.ch(f[1]), 1), f"{name}_3x3", net.ch(f[2]), 3)
    b3 = net.gconv(net.gconv(x, f"{name}_5r", net.ch(f[3]), 1), f"{name}_5x5", net.ch(f[4]), 5)
    b4 = net.gconv(net.pool(x, f"{name}_pool", "MaxPool", 3, 1, 1), f"{name}_pp",
                   net.ch(f[5]), 1)
    return net.concat([b1, b2, b3, b4], name)


def inception_v1(full: bool, side: int | None = None) -> onnx.ModelProto:
    net = _ZooNet(202, input_shape("inception_v1", full, side), 1 if full else 0.25)
    x = net.gconv("x", "conv1", net.ch(64), 7, 2)
    x = net.lrn(net.pool(x, "pool1", "MaxPool", 3, 2, ceil=True), "lrn1")
    x = net.gconv(net.gconv(x, "conv2r", net.ch(64), 1), "conv2", net.ch(192), 3)
    x = net.pool(net.lrn(x, "lrn2"), "pool2", "MaxPool", 3, 2, ceil=True)
    modules = {"3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
               "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
               "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
               "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
               "5b": (384, 192, 384, 48, 128, 128)}
    if not full:
        modules = {k: modules[k] for k in ("3a", "3b", "4a")}
    for name, filters in modules.items():
        if name in ("4a", "5a"):
            x = net.pool(x, f"pool_{name}", "MaxPool", 3 if name == "4a" else 2, 2, ceil=True)
        x = _inception_v1_module(net, x, f"inc{name}", filters)
    return net.model("inception_v1", net.head(x, 1000 if full else 10), net.shapes["x"])


def _inception_v2_module(net: _ZooNet, x: str, name: str, f: tuple, stride: int) -> str:
    """BN-Inception's module: 1x1 (none when f[0] is 0); 1x1-3x3; 1x1-3x3-3x3; a pool
    (f[6]: "avg" or "max") with a 1x1 projection (none when f[7] is 0)."""
    def conv(y: str, tag: str, filters: int, kernel: int, s: int = 1) -> str:
        return net.gconv(y, f"{name}_{tag}", net.ch(filters), kernel, s, bn=True)
    branches = [conv(x, "1x1", f[0], 1)] if f[0] else []
    branches.append(conv(conv(x, "3r", f[1], 1), "3x3", f[2], 3, stride))
    d = conv(conv(x, "d3r", f[3], 1), "d3a", f[4], 3)
    branches.append(conv(d, "d3b", f[5], 3, stride))
    op = "AveragePool" if f[6] == "avg" else "MaxPool"
    extra = {"count_include_pad": 1} if op == "AveragePool" else {}
    pooled = net.pool(x, f"{name}_pool", op, 3, stride, 1, **extra)
    branches.append(conv(pooled, "pp", f[7], 1) if f[7] else pooled)
    return net.concat(branches, name)


def inception_v2(full: bool, side: int | None = None) -> onnx.ModelProto:
    net = _ZooNet(203, input_shape("inception_v2", full, side), 1 if full else 0.25)
    x = net.gconv("x", "conv1", net.ch(64), 7, 2, bn=True)
    x = net.pool(x, "pool1", "MaxPool", 3, 2, 1)
    x = net.gconv(net.gconv(x, "conv2r", net.ch(64), 1, bn=True), "conv2", net.ch(192), 3,
                  bn=True)
    x = net.pool(x, "pool2", "MaxPool", 3, 2, 1)
    modules = [("3a", (64, 64, 64, 64, 96, 96, "avg", 32), 1),
               ("3b", (64, 64, 96, 64, 96, 96, "avg", 64), 1),
               ("3c", (0, 128, 160, 64, 96, 96, "max", 0), 2),
               ("4a", (224, 64, 96, 96, 128, 128, "avg", 128), 1),
               ("4b", (192, 96, 128, 96, 128, 128, "avg", 128), 1),
               ("4c", (160, 128, 160, 128, 160, 160, "avg", 128), 1),
               ("4d", (96, 128, 192, 160, 192, 192, "avg", 128), 1),
               ("4e", (0, 128, 192, 192, 256, 256, "max", 0), 2),
               ("5a", (352, 192, 320, 160, 224, 224, "avg", 128), 1),
               ("5b", (352, 192, 320, 192, 224, 224, "max", 128), 1)]
    if not full:
        modules = modules[:4]
    for name, filters, stride in modules:
        x = _inception_v2_module(net, x, f"inc{name}", filters, stride)
    return net.model("inception_v2", net.head(x, 1000 if full else 10), net.shapes["x"])


def resnet50(full: bool, side: int | None = None) -> onnx.ModelProto:
    net = _ZooNet(204, input_shape("resnet50", full, side), 1 if full else 0.125)
    x = net.gconv("x", "conv1", net.ch(64), 7, 2, bn=True)
    x = net.pool(x, "pool1", "MaxPool", 3, 2, 1)
    stages = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]
    if not full:
        stages = [(64, 2, 1), (128, 2, 2)]
    for s, (width, blocks, stride) in enumerate(stages, start=2):
        for b in range(blocks):
            name, st = f"res{s}_{b}", stride if b == 0 else 1
            y = net.gconv(x, f"{name}_a", net.ch(width), 1, bn=True)
            y = net.gconv(y, f"{name}_b", net.ch(width), 3, st, bn=True)
            y = net.gconv(y, f"{name}_c", net.ch(4 * width), 1, bn=True, relu=False)
            if b == 0:
                x = net.gconv(x, f"{name}_proj", net.ch(4 * width), 1, st, bn=True,
                              relu=False)
            x = net.relu(net.sum([x, y], f"{name}_sum"))
    return net.model("resnet50", net.head(x, 1000 if full else 10), net.shapes["x"])


def shufflenet(full: bool, side: int | None = None) -> onnx.ModelProto:
    groups = 3
    net = _ZooNet(205, input_shape("shufflenet", full, side), 1 if full else 0.25)
    x = net.gconv("x", "conv1", 24, 3, 2, bn=True)
    x = net.pool(x, "pool1", "MaxPool", 3, 2, 1)
    stages = [(240, 4), (480, 8), (960, 4)] if full else [(240, 2), (480, 2)]
    for s, (out, units) in enumerate(stages, start=2):
        out = net.ch(out)
        for u in range(units):
            name, stride = f"stage{s}_{u}", 2 if u == 0 else 1
            c = net.shapes[x][1]
            mid = net.ch(out // 4)
            first = 1 if s == 2 and u == 0 else groups  # the 24 stem channels: one group
            y = net.gconv(x, f"{name}_g1", mid, 1, group=first, bn=True)
            y = net.shuffle(y, f"{name}_shuffle", groups)
            y = net.gconv(y, f"{name}_dw", mid, 3, stride, group=mid, bn=True, relu=False)
            y = net.gconv(y, f"{name}_g2", out - c if stride == 2 else out, 1, group=groups,
                          bn=True, relu=False)
            if stride == 2:
                short = net.pool(x, f"{name}_avg", "AveragePool", 3, 2, 1,
                                 count_include_pad=0)
                x = net.relu(net.concat([short, y], f"{name}_cat"))
            else:
                x = net.relu(net.sum([x, y], f"{name}_sum"))
    return net.model("shufflenet", net.head(x, 1000 if full else 10), net.shapes["x"])


def densenet121(full: bool, side: int | None = None) -> onnx.ModelProto:
    net = _ZooNet(206, input_shape("densenet121", full, side), 1 if full else 0.25)
    growth = 32 if full else 8
    x = net.gconv("x", "conv0", net.ch(64), 7, 2, bn=True)
    x = net.pool(x, "pool0", "MaxPool", 3, 2, 1)
    blocks = (6, 12, 24, 16) if full else (2, 3)
    for b, layers in enumerate(blocks, start=1):
        for i in range(layers):
            name = f"block{b}_{i}"
            y = net.relu(net.bn(x, f"{name}_bn1"))
            y = net.gconv(y, f"{name}_conv1", 4 * growth, 1, bn=True)
            y = net.gconv(y, f"{name}_conv2", growth, 3, relu=False)
            x = net.concat([x, y], f"{name}_cat")
        if b < len(blocks):
            y = net.relu(net.bn(x, f"trans{b}_bn"))
            y = net.gconv(y, f"trans{b}_conv", net.shapes[x][1] // 2, 1, relu=False)
            x = net.pool(y, f"trans{b}_pool", "AveragePool", 2, 2)
    x = net.relu(net.bn(x, "norm5"))
    return net.model("densenet121", net.head(x, 1000 if full else 10), net.shapes["x"])


BUILDERS = {"squeezenet": squeezenet, "inception_v1": inception_v1,
            "inception_v2": inception_v2, "resnet50": resnet50, "shufflenet": shufflenet,
            "densenet121": densenet121}


def build(name: str, fmt: str, out: Path, full: bool, side: int | None = None) -> Path:
    """Build, quantize and write ``<out>/<name>_<fmt>.onnx`` and its ``.npz``; the path. With
    ``side``, the input is that many pixels a side (not :data:`SIDES`'), and the files are
    ``<name>_<fmt>_<side>px``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / (f"{name}_{fmt}_{side}px.onnx" if side else f"{name}_{fmt}.onnx")
    quantize(name, BUILDERS[name](full, side), fmt, path,
             lambda seed: sample(name, full, seed, side))
    x = sample(name, full, 1000, side)
    (y,) = reference_session(path).run(["y"], {"x": x})
    np.savez(path.with_suffix(".npz"), x=x, y=y.astype(np.float32))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", type=Path, metavar="DIR",
                        help="build the full-size models into DIR (default: small ones into "
                             "examples/zoo)")
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help=f"which to build (default: all of {', '.join(BUILDERS)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(BUILDERS))
    if unknown:
        parser.error(f"no model {', '.join(unknown)}; the models are {', '.join(BUILDERS)}")
    for name in args.models or BUILDERS:
        for fmt in FORMATS[name]:
            path = build(name, fmt, args.full or OUT, args.full is not None)
            print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
