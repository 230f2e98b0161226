"""Node-level models of onnxruntime's QLinearMul, QLinearSigmoid, QLinearLeakyRelu and
QLinearConcat (ops hwgen runs on the host), in the form of :mod:`qlinear_pool_cases`: each
builder returns ``(model, feeds)``; run them with ``qlinear_pool_cases.exact_run``, ``ort_run`` and
``hwgen_run``."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.fusion.frontend.qlinear_pool_cases import _TYPES, MS, build


def _ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _zp(dtype, signed: int) -> np.generic:
    """A zero point: ``signed`` for int8, ``signed + 128`` for uint8."""
    return np.dtype(dtype).type(signed if dtype == "int8" else signed + 128)


def qlinear_mul(seed=0, dtype="int8", shape=(2, 6, 5, 5), b_shape=None,
                scales=(0.05, 0.025, 0.08)):
    rng = np.random.default_rng(seed)
    inits = {"as": np.float32(scales[0]), "az": _zp(dtype, 3), "bs": np.float32(scales[1]),
             "bz": _zp(dtype, -5), "cs": np.float32(scales[2]), "cz": _zp(dtype, 2)}
    node = helper.make_node("QLinearMul", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"],
                            domain=MS)
    feeds = {"a": _ints(rng, shape, dtype), "b": _ints(rng, b_shape or shape, dtype)}
    return build([node], feeds, inits, _TYPES[np.dtype(dtype)]), feeds


def qlinear_unary(op, dtype="int8", scales=(0.05, 1 / 256), y_zp=-128, **attrs):
    """``op`` (QLinearSigmoid or QLinearLeakyRelu) on every value of the 8-bit type."""
    info = np.iinfo(dtype)
    inits = {"xs": np.float32(scales[0]), "xz": _zp(dtype, -3), "ys": np.float32(scales[1]),
             "yz": _zp(dtype, y_zp)}
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    feeds = {"x": np.arange(info.min, info.max + 1).astype(dtype).reshape(2, 128)}
    return build([node], feeds, inits, _TYPES[np.dtype(dtype)]), feeds


def qlinear_concat(seed=0, dtype="int8", axis=1):
    """Three inputs: one quantized as the output (copied), two rescaled."""
    rng = np.random.default_rng(seed)
    inits = {"ys": np.float32(0.05), "yz": _zp(dtype, 1),
             "s0": np.float32(0.05), "z0": _zp(dtype, 1),
             "s1": np.float32(0.031), "z1": _zp(dtype, -7),
             "s2": np.float32(0.11), "z2": _zp(dtype, 0)}
    node = helper.make_node("QLinearConcat", ["ys", "yz", "x0", "s0", "z0", "x1", "s1", "z1",
                                              "x2", "s2", "z2"], ["y"], domain=MS, axis=axis)
    shapes = [(2, 3, 5, 5), (2, 4, 5, 5), (2, 1, 5, 5)]
    if axis in (-1, 3):
        shapes = [(2, 3, 5, 2), (2, 3, 5, 4), (2, 3, 5, 1)]
    feeds = {f"x{i}": _ints(rng, s, dtype) for i, s in enumerate(shapes)}
    return build([node], feeds, inits, _TYPES[np.dtype(dtype)]), feeds
