"""Conv legalization: before/expected GEMM form, bit-exactness, refusals, the kept original.

Grouped and depthwise convolutions become the same single GEMM with block-diagonal weights.
"""

import numpy as np
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import conv_legalize
from fusion.reference import executor
from fusion.runtime.run import kernel_macs
from tests.helpers.pass_testing import assert_graphs_equal, assert_unchanged

RNG = np.random.default_rng(7)
W = RNG.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
B = RNG.integers(-2000, 2000, (4,), dtype=np.int32)
QX = Quant(0.05, -3)
QW = Quant((0.01, 0.02, 0.015, 0.005), (0, 0, 0, 0), axis=0)
QY = Quant(0.07, 4)
CONV = {"strides": (2, 1), "pads": (1, 0, 1, 2), "dilations": (1, 2)}


def conv_graph(epilogue=True, weights_const=True, group=1, x_shape=(2, 3, 7, 6), w=W, qw=QW,
               conv=None):
    b = GraphBuilder("cnn")
    x = b.input("x", x_shape, "int8", quant=QX)
    if weights_const:
        wt = b.const("w", w, quant=qw)
    else:
        wt = b.input("w", w.shape, "int8", quant=qw)
    y = b.qconv2d(x, wt, name="conv", group=group, **(CONV if conv is None else conv))
    if epilogue:
        y = b.bias_add(y, b.const("b", np.resize(B, w.shape[0])), axis=1, name="bias")
        y = b.requant(y, QY, name="rq", axis=1)
        y = b.relu(y, name="relu")
    return b.build([y])


def grouped(c, m, group, zero_point=0, seed=0):
    """Weights [m, c/group, 3, 3] with per-channel scales and ``zero_point`` in every channel."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (m, c // group, 3, 3), dtype=np.int8)
    return w, Quant(rng.uniform(0.002, 0.02, m), (zero_point,) * m, axis=0)


#: Grouped convolutions: (input channels, output channels, group, weight zero point).
GROUPED = {"depthwise": (4, 4, 4, 0), "depthwise_x2": (3, 6, 3, 0), "group2": (4, 6, 2, 0),
           "group2_zp": (4, 6, 2, 5)}


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


def test_a_depthwise_conv_is_one_gemm_with_block_diagonal_weights():
    w, qw = grouped(3, 6, 3)
    got, changed = conv_legalize.run(conv_graph(False, group=3, w=w, qw=qw))
    assert changed
    assert [n.op for n in got.topo_order()] == ["im2col", "qmatmul", "transpose", "reshape"]
    assert got.node("conv/im2col").attr_dict == {"kernel_shape": (3, 3), **CONV}
    wt = got.initializers["w/kxm"]
    assert wt.shape == (3 * 9, 6) and got.tensor("w/kxm").quant == Quant(qw.scale, qw.zero_point,
                                                                         axis=1)
    # im2col's K order is (c, kh, kw): row c*9 + i*3 + j. Output o (two per group) reads
    # input channel o // 2 only.
    want = np.zeros((27, 6), np.int8)
    for o in range(6):
        for i in range(3):
            for j in range(3):
                want[(o // 2) * 9 + i * 3 + j, o] = w[o, 0, i, j]
    np.testing.assert_array_equal(wt, want)
    # the GEMM records its group: the run report counts the conv's MACs, not the zero blocks
    mm = got.node("conv/qmatmul")
    assert mm.attr("group") == 3
    oh, ow = got.tensors["conv/im2col"].shape[1], 1
    assert kernel_macs(got, ["conv/qmatmul"]) == 2 * oh * ow * 6 * 1 * 9


def test_off_block_weights_are_the_zero_point_so_they_contribute_nothing():
    w, qw = grouped(4, 6, 2, zero_point=5)
    wt = conv_legalize.gemm_weights(w, 4, 2, qw)
    block = np.zeros((4, 6), bool)  # [input channel, output channel]
    block[:2, :3] = block[2:, 3:] = True
    rows = np.repeat(block, 9, axis=0)
    assert (wt[~rows] == 5).all()
    for o in range(6):  # group o // 3 reads input channels 2 * (o // 3) and the next
        np.testing.assert_array_equal(wt[rows[:, o], o], w[o].reshape(-1))


@pytest.mark.parametrize("epilogue", [False, True])
@pytest.mark.parametrize("case", sorted(GROUPED))
def test_grouped_gemm_form_is_bit_exact(case, epilogue):
    c, m, group, zp = GROUPED[case]
    w, qw = grouped(c, m, group, zp)
    conv = {"strides": (2, 1), "pads": (1, 0, 2, 1), "dilations": (2, 1)}
    g = conv_graph(epilogue, group=group, x_shape=(2, c, 9, 7), w=w, qw=qw, conv=conv)
    got, changed = conv_legalize.run(g)
    assert changed and "qconv2d" not in {n.op for n in got.nodes}
    for seed in range(5):
        x = np.random.default_rng(seed).integers(-128, 128, (2, c, 9, 7), dtype=np.int8)
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


@pytest.mark.parametrize("case", sorted(GROUPED))
def test_the_original_grouped_conv_can_be_rebuilt_and_rerun(case):
    c, m, group, zp = GROUPED[case]
    w, qw = grouped(c, m, group, zp)
    g = conv_graph(False, group=group, x_shape=(1, c, 6, 6), w=w, qw=qw)
    got, _ = conv_legalize.run(g)
    (name, (conv, weights)), = conv_legalize.original_convs(got).items()
    assert (name, conv.name, conv.inputs) == ("conv/qmatmul", "conv", ("x", "w"))
    assert conv.attr_dict == {**CONV, "group": group}
    np.testing.assert_array_equal(weights, w)
    # Rerun: the rebuilt conv next to the GEMM form computes the same accumulators.
    x = np.random.default_rng(1).integers(-128, 128, (1, c, 6, 6), dtype=np.int8)
    rebuilt = GraphBuilder("re")
    xi = rebuilt.input("x", (1, c, 6, 6), "int8", quant=QX)
    y = rebuilt.qconv2d(xi, rebuilt.const("w", weights, quant=qw), name=conv.name,
                        **conv.attr_dict)
    acc = executor.run(got, {"x": x}, keep=True)[name]
    np.testing.assert_array_equal(
        executor.run(rebuilt.build([y]), {"x": x})[y],
        acc.transpose(0, 2, 1).reshape(1, m, *got.tensor(got.outputs[0]).shape[2:]))


def test_the_computed_weights_refusal_leaves_the_conv_and_says_why():
    g = conv_graph(epilogue=False, weights_const=False)
    assert_unchanged(conv_legalize.run, g)
    assert conv_legalize.explain(g) == [
        "qconv2d 'conv' has computed weights 'w'; they must be constant"]
