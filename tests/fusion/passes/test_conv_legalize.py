"""Conv legalization: before/expected GEMM form, bit-exactness, refusals, the kept original."""

import numpy as np
import pytest
from pass_testing import assert_graphs_equal, assert_unchanged

from fusion import executor
from fusion.builder import GraphBuilder
from fusion.ir import Quant
from fusion.passes import conv_legalize

RNG = np.random.default_rng(7)
W = RNG.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
B = RNG.integers(-2000, 2000, (4,), dtype=np.int32)
QX = Quant(0.05, -3)
QW = Quant((0.01, 0.02, 0.015, 0.005), (0, 0, 0, 0), axis=0)
QY = Quant(0.07, 4)
CONV = {"strides": (2, 1), "pads": (1, 0, 1, 2), "dilations": (1, 2)}


def conv_graph(epilogue=True, weights_const=True, group=1, x_shape=(2, 3, 7, 6)):
    b = GraphBuilder("cnn")
    x = b.input("x", x_shape, "int8", quant=QX)
    if group != 1:  # depthwise
        w = b.const("w", W[:3, :1], quant=Quant(0.01, 0))
    elif weights_const:
        w = b.const("w", W, quant=QW)
    else:
        w = b.input("w", W.shape, "int8", quant=QW)
    y = b.qconv2d(x, w, name="conv", group=group, **CONV)
    if epilogue:
        y = b.bias_add(y, b.const("b", B), axis=1, name="bias")
        y = b.requant(y, QY, name="rq", axis=1)
        y = b.relu(y, name="relu")
    return b.build([y])


def test_conv_with_its_epilogue_becomes_im2col_gemm_then_one_layout_change():
    got, changed = conv_legalize.run(conv_graph())
    assert changed

    acc_q = Quant(tuple(0.05 * s for s in QW.scale), (0,) * 4, axis=2)
    e = GraphBuilder("cnn")
    x = e.input("x", (2, 3, 7, 6), "int8", quant=QX)
    cols = e.im2col(x, (3, 3), name="conv/im2col", **CONV)                   # [2, 4*4, 27]
    wt = e.const("w/kxm", W.reshape(4, -1).T, quant=Quant(QW.scale, QW.zero_point, axis=1))
    acc = e.qmatmul(cols, wt, name="conv/qmatmul", quant=acc_q)              # [2, 16, 4]
    acc = e.bias_add(acc, e.const("b", B), axis=2, name="bias", outputs=["bias/gemm"])
    y = e.requant(acc, QY, name="rq", axis=2, outputs=["rq/gemm"])
    y = e.relu(y, name="relu", outputs=["relu/gemm"])
    t = e.transpose(y, (0, 2, 1), name="conv/transpose")
    e.reshape(t, (2, 4, 4, 4), name="conv/reshape", outputs=["relu"])
    assert_graphs_equal(got, e.build(["relu"]))
    assert_unchanged(conv_legalize.run, got)


@pytest.mark.parametrize("epilogue", [False, True])
def test_gemm_form_is_bit_exact(epilogue):
    g = conv_graph(epilogue)
    got, _ = conv_legalize.run(g)
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, (2, 3, 7, 6), dtype=np.int8)
        want = executor.run(g, {"x": x})[g.outputs[0]]
        np.testing.assert_array_equal(executor.run(got, {"x": x})[got.outputs[0]], want)


def test_the_original_conv_can_be_rebuilt_and_rerun():
    g = conv_graph(epilogue=False)
    got, _ = conv_legalize.run(g)
    (name, (conv, weights)), = conv_legalize.original_convs(got).items()
    assert name == "conv/qmatmul"
    assert (conv.name, conv.op, conv.inputs) == ("conv", "qconv2d", ("x", "w"))
    assert conv.attr_dict == {**CONV, "group": 1}
    np.testing.assert_array_equal(weights, W)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"group": 3}, "qconv2d 'conv' has group 3; a grouped or depthwise convolution is not one "
                   "GEMM and stays qconv2d"),
    ({"weights_const": False}, "qconv2d 'conv' has computed weights 'w'; they must be constant"),
])
def test_refusals_leave_the_conv_and_say_why(kwargs, message):
    g = conv_graph(epilogue=False, **kwargs)
    assert_unchanged(conv_legalize.run, g)
    assert conv_legalize.explain(g) == [message]
