"""The host's ops between a dequantize and a quantize read and write the 8-bit tensors
themselves: one host op where there were three, every value the same in float32 and in
float64, the plan's reason for a BatchNormalization unchanged, and near misses left alone."""

import numpy as np
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import batchnorm, dce, host_quantized, host_rows
from fusion.reference import executor
from tests.helpers.pass_testing import assert_unchanged

C, H, W = 12, 4, 5
QX, QY = Quant(0.05, -3), Quant(0.004, -128)
LRN = {"size": 5, "alpha": 1e-4 * 400, "beta": 0.75, "bias": 1.0}


def host_op(op: str, *, also_read: str = "", x_quant: Quant = QX):
    """``x -> dequantize -> op -> quantize``, as Q/DQ folding leaves a model's Softmax, LRN
    or exactness-bound BatchNormalization (whose scale and bias are int8 constants'
    dequantizes, as onnxruntime's quantizer writes them); ``also_read``: a tensor an output
    also reads."""
    b = GraphBuilder("g")
    shape = (2, 10) if op == "Softmax" else (1, C, H, W)
    x = b.input("x", shape, "int8", quant=x_quant)
    real = b.dequantize(x, name="dq")
    if op == "Softmax":
        y = b.op("Softmax", real, name="op", axis=-1)
    elif op == "LRN":
        y = b.op("LRN", real, name="op", **LRN)
    else:
        rng = np.random.default_rng(5)
        scale = b.dequantize(b.const("scale_q", rng.integers(60, 127, C).astype(np.int8),
                                     quant=Quant(0.013, 0)), name="scale_dq")
        shift = b.dequantize(b.const("shift_q", rng.integers(-90, 90, C).astype(np.int8),
                                     quant=Quant(0.02, 0)), name="shift_dq")
        mean, var = (b.const(n, v.astype(np.float32)) for n, v in (
            ("mean", rng.normal(0, 1, C)), ("var", rng.uniform(0.5, 2, C))))
        y = b.op("BatchNormalization", real, scale, shift, mean, var, name="op", epsilon=1e-3)
    out = b.quantize(y, QY, name="q")
    extra = {"dq": real, "op": y}.get(also_read)
    return b.build([out] + ([extra] if extra else [])), out, shape


@pytest.mark.parametrize("op, form", [("Softmax", "softmax"), ("LRN", "lrn"),
                                      ("BatchNormalization", "batchnorm")])
def test_one_host_op_on_the_8_bit_tensors(op, form):
    before, out, shape = host_op(op)
    got, changed = host_quantized.run(before)
    got = dce.run(got)[0]
    assert changed
    assert [n.op for n in got.topo_order()] == [form]
    node = got.node("op")
    assert node.inputs[0] == "x" and node.attr("dtype") == "int8"
    assert all(i in got.initializers for i in node.inputs[1:])  # the scale and bias folded
    for seed in range(4):
        x = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
        for float64 in (False, True):
            want = executor.run(before, {"x": x}, float64=float64)[out]
            np.testing.assert_array_equal(executor.run(got, {"x": x}, float64=float64)[out],
                                          want)
        assert len(np.unique(want)) > 5  # the outputs are not all one value
    if op == "BatchNormalization":  # the plan's reason is the one the three nodes had
        assert batchnorm.why_host(got, node) == batchnorm.why_host(before, before.node("op"))


def test_the_ops_on_a_convolutions_rows_too():
    """After host_rows, hwgen's lrn on a GEMM's rows (axis 2) is taken as it is."""
    b = GraphBuilder("g")
    rows = b.input("rows", (1, H * W, C), "int8", quant=QX)
    nchw = b.reshape(b.transpose(rows, (0, 2, 1), name="t"), (1, C, H, W), name="nchw")
    out = b.quantize(b.op("LRN", b.dequantize(nchw, name="dq"), name="lrn", **LRN), QY,
                     name="q")
    before = b.build([out])
    got = dce.run(host_quantized.run(host_rows.run(before)[0])[0])[0]
    assert [n.op for n in got.topo_order()] == ["lrn", "transpose", "reshape"]
    assert got.node("lrn").attr("axis") == 2
    x = np.random.default_rng(0).integers(-128, 128, (1, H * W, C)).astype(np.int8)
    np.testing.assert_array_equal(executor.run(got, {"rows": x})[out],
                                  executor.run(before, {"rows": x})[out])


@pytest.mark.parametrize("why, kw", [
    ("the dequantized tensor is read by another", {"also_read": "dq"}),
    ("the op's output is read by another", {"also_read": "op"}),
    ("the input is quantized per channel", {"x_quant": Quant(np.full(C, 0.05), np.zeros(C),
                                                             axis=1)}),
])
def test_near_misses_are_left_alone(why, kw):
    assert_unchanged(host_quantized.run, host_op("LRN", **kw)[0])


@pytest.mark.parametrize("shape, identity", [((1, 1, 10), True), ((1, 2, 5), False)])
def test_a_softmax_reads_past_a_layout_chain_that_keeps_the_order(shape, identity):
    """SqueezeNet's tail: its pool's [1, 1, 1000], transposed, reshaped and flattened (every
    element where it was), then the softmax: one host step reading the pool. A chain that
    moves elements ([1, 2, 5] transposed) stays."""
    b = GraphBuilder("g")
    x = b.input("x", shape, "int8", quant=QX)
    t = b.transpose(x, (0, 2, 1), name="t", quant=QX)
    flat = b.op("flatten", b.reshape(t, (1, 10, 1, 1), name="r", quant=QX), name="flat",
                axis=1, quant=QX)
    out = b.quantize(b.op("Softmax", b.dequantize(flat, name="dq"), name="op", axis=1), QY,
                     name="q")
    before = b.build([out])
    got = dce.run(host_quantized.run(before)[0])[0]
    ops = [n.op for n in got.topo_order()]
    assert ops == (["softmax"] if identity else ["transpose", "reshape", "flatten", "softmax"])
    assert got.tensors[out].shape == (1, 10)
    for seed in range(3):
        v = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
        np.testing.assert_array_equal(executor.run(got, {"x": v})[out],
                                      executor.run(before, {"x": v})[out])


@pytest.mark.parametrize("shape, axis, opset, converted", [
    ((2, 3, 10), -1, 13, True), ((2, 3, 10), 1, 13, True), ((2, 3, 10), 2, 11, True),
    ((2, 3, 10), 1, 11, False),  # before opset 13: axes 1 and 2 flattened, not one axis
])
def test_qlinear_softmax_becomes_the_softmax_on_8_bit_tensors(shape, axis, opset, converted):
    """A QOperator model's QLinearSoftmax is hwgen's softmax on 8-bit tensors computing in
    float64, as the QLinearSoftmax reference does: equal to it in either executor."""
    b = GraphBuilder("g")
    x = b.input("x", shape, "int8", quant=QX)
    consts = [b.const("xs", np.array(QX.scale[0], np.float32)),
              b.const("xz", np.array(QX.zero_point[0], np.int8)),
              b.const("ys", np.array(QY.scale[0], np.float32)),
              b.const("yz", np.array(QY.zero_point[0], np.int8))]
    out = b.op("QLinearSoftmax", x, *consts, name="op", axis=axis, opset=opset, quant=QY)
    before = b.build([out])
    if not converted:
        assert_unchanged(host_quantized.run, before)
        return
    got = dce.run(host_quantized.run(before)[0])[0]
    assert [(n.op, n.attr("real"), n.attr("dtype")) for n in got.topo_order()] == [
        ("softmax", "float64", "int8")]
    for seed in range(4):
        v = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
        want = executor.run(before, {"x": v})[out]
        for float64 in (False, True):
            np.testing.assert_array_equal(executor.run(got, {"x": v}, float64=float64)[out],
                                          want)
        assert len(np.unique(want)) > 5
