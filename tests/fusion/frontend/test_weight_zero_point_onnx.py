"""Quantized weights with zero points, in every ONNX matmul and conv form, against ONNX.

Node-level models built with ``onnx.helper``: QLinearMatMul, MatMulInteger, QLinearConv,
ConvInteger and QDQ (``DequantizeLinear`` weights into MatMul and Conv), with per-tensor and
per-channel weight zero points, int8 and uint8 weights, zero points chosen so that the
folded weights fit int8 (``fit``), need two int8 parts (``split2``) or three (``split3``). Each
is imported, run through the passes (:mod:`fusion.passes.weight_zero_point` folds the zero
points) and run by hwgen's reference executor:

- against ``onnx.reference.ReferenceEvaluator``: integer outputs exactly; requantized outputs
  within one LSB, 99% exact (hwgen's fixed-point requantize against ONNX's float one);
- against the same graph before the weight pass: bit for bit (the fold itself is exact).
"""

import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

from fusion.frontend import import_onnx
from fusion.passes import weight_zero_point
from fusion.passes.driver import legalize_pipeline, optimize, prune_pipeline, run_to_fixed_point
from fusion.reference import executor
from tests.fusion.passes.test_qdq_fold_onnx import model, node, sample

I8, U8, I32 = TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32
K, N, C, M = 12, 5, 3, 4  # matmul K x N; conv C -> M channels
#: (weight dtype, zero-point kind) -> the int8 parts the folded weights need.
ZERO_POINTS = {("uint8", "fit"): 1, ("uint8", "split2"): 2, ("uint8", "split3"): 3,
               ("int8", "fit"): 1, ("int8", "split2"): 2, ("int8", "split3"): 3}


def weights(dtype, kind, shape, channels, axis, seed):
    """Weights and zero points (per tensor: ``channels`` 0) of the kind's folded range."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    w = rng.integers(lo, hi + 1, shape)
    mid = (lo + hi + 1) // 2  # 128 or 0: w - mid is int8
    zp = {"fit": mid, "split2": mid + 60, "split3": lo}[kind]
    zps = np.full(max(channels, 1), zp)
    if channels:
        zps = zps + rng.integers(-3, 1, channels) * (kind == "fit")  # fit: small offsets...
        if kind == "fit":  # ...with weights kept where w - zp fits int8
            index = [slice(None)] * len(shape)
            for ch in range(channels):
                index[axis] = ch
                w[tuple(index)] = np.clip(w[tuple(index)], zps[ch] - 128, zps[ch] + 127)
    if kind == "split3":  # w - zp = 255 (uint8 zp 0, or int8 127 - (-128)) somewhere
        w.flat[0] = hi
    zp_value = zps.astype(dtype) if channels else np.array(zps[0], dtype)
    return w.astype(dtype), zp_value


def matmul_integer(w_dtype, kind, per_channel):
    w, wz = weights(w_dtype, kind, (K, N), N if per_channel else 0, 1, 1)
    inits = {"w": w, "az": np.int8(-7), "wz": wz}
    return model([node("MatMulInteger", ["x", "w", "az", "wz"], "y")], inits, (3, K), (3, N),
                 I8, I32), (3, K), "int8"


def conv_integer(w_dtype, kind, per_channel):
    w, wz = weights(w_dtype, kind, (M, C, 3, 3), M if per_channel else 0, 0, 2)
    inits = {"w": w, "xz": np.uint8(120), "wz": wz}
    return model([node("ConvInteger", ["x", "w", "xz", "wz"], "y", pads=[1, 1, 0, 1])], inits,
                 (1, C, 5, 6), (1, M, 4, 6), U8, I32), (1, C, 5, 6), "uint8"


def qlinear_matmul(w_dtype, kind, per_channel):
    w, wz = weights(w_dtype, kind, (K, N), N if per_channel else 0, 1, 3)
    ws = np.linspace(0.004, 0.009, N, dtype=np.float32) if per_channel else np.float32(0.006)
    inits = {"xs": np.float32(0.05), "xz": np.int8(4), "w": w, "ws": ws, "wz": wz,
             "ys": np.float32(0.9), "yz": np.int8(-3)}
    return model([node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], "y")],
                 inits, (3, K), (3, N), I8, I8), (3, K), "int8"


def qlinear_conv(w_dtype, kind, per_channel):
    w, wz = weights(w_dtype, kind, (M, C, 3, 3), M if per_channel else 0, 0, 4)
    ws = np.linspace(0.004, 0.009, M, dtype=np.float32) if per_channel else np.float32(0.006)
    inits = {"xs": np.float32(0.05), "xz": np.uint8(128), "w": w, "ws": ws, "wz": wz,
             "ys": np.float32(0.6), "yz": np.uint8(100),
             "b": np.arange(-200, -200 + 150 * M, 150, dtype=np.int32)}
    return model([node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], "y",
                       strides=[1, 2], pads=[1, 0, 1, 1])],
                 inits, (1, C, 5, 6), (1, M, 5, 3), U8, U8), (1, C, 5, 6), "uint8"


def qdq(op):
    def build(w_dtype, kind, per_channel):
        conv = op == "Conv"
        shape, channels, axis = ((M, C, 3, 3), M, 0) if conv else ((K, N), N, 1)
        w, wz = weights(w_dtype, kind, shape, channels if per_channel else 0, axis, 5)
        ws = (np.linspace(0.004, 0.009, channels, dtype=np.float32) if per_channel
              else np.float32(0.006))
        inits = {"xs": np.float32(0.04), "xz": np.int8(2), "w": w, "ws": ws, "wz": wz,
                 "ys": np.float32(0.5), "yz": np.int8(5)}
        x_shape, y_shape = ((1, C, 5, 6), (1, M, 5, 6)) if conv else ((3, K), (3, N))
        nodes = [node("QuantizeLinear", ["x", "xs", "xz"], "xq"),
                 node("DequantizeLinear", ["xq", "xs", "xz"], "xd"),
                 node("DequantizeLinear", ["w", "ws", "wz"], "wd", axis=axis),
                 node(op, ["xd", "wd"], "acc", **({"pads": [1, 1, 1, 1]} if conv else {})),
                 node("QuantizeLinear", ["acc", "ys", "yz"], "y")]
        return model(nodes, inits, x_shape, y_shape), x_shape, "float32"
    return build


FORMS = {"MatMulInteger": matmul_integer, "ConvInteger": conv_integer,
         "QLinearMatMul": qlinear_matmul, "QLinearConv": qlinear_conv,
         "QDQ-MatMul": qdq("MatMul"), "QDQ-Conv": qdq("Conv")}
INTEGER_OUT = ("MatMulInteger", "ConvInteger")


def folded_weights(graph):
    return [graph.tensors[n.inputs[1]] for n in graph.nodes if n.op == "qmatmul"]


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize(("w_dtype", "kind"), sorted(ZERO_POINTS))
@pytest.mark.parametrize("form", sorted(FORMS))
def test_weight_zero_points_fold_exactly(form, w_dtype, kind, per_channel):
    proto, shape, x_dtype = FORMS[form](w_dtype, kind, per_channel)
    imported = import_onnx(proto)
    before = run_to_fixed_point(run_to_fixed_point(imported, prune_pipeline()),
                                [p for p in legalize_pipeline() if p is not weight_zero_point.run])
    after = optimize(imported)
    (wt,) = folded_weights(after)
    assert wt.dtype == "int8" and not any(wt.quant.zero_point)
    parts = ZERO_POINTS[w_dtype, kind]
    assert wt.shape[0] == parts * folded_weights(before)[0].shape[0]
    assert [n.op for n in after.nodes].count("repeat") == (parts > 1)
    reference = ReferenceEvaluator(proto)
    diffs = []
    for seed in range(6):
        x = sample(shape, x_dtype, seed)
        got = executor.run(after, {"x": x})["y"]
        assert np.array_equal(got, executor.run(before, {"x": x})["y"])
        want = reference.run(None, {"x": x})[0]
        diffs.append((got.astype(np.int64) - want.astype(np.int64)).ravel())
    diffs = np.concatenate(diffs)
    if form in INTEGER_OUT:
        assert not diffs.any(), "integer outputs must match ONNX exactly"
    assert np.abs(diffs).max() <= 1
    assert np.mean(diffs == 0) >= 0.99


def test_uint8_weights_pass_validation():
    proto, _, _ = matmul_integer("uint8", "fit", False)
    assert import_onnx(proto).tensors  # validated: uint8 weights are accepted
