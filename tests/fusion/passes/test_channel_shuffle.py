"""The channel shuffle after a GEMM becomes the order of the GEMM's columns: the same integers
for every input, no layout chain left for the host, and near misses left alone."""

import numpy as np
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import channel_shuffle, dce, im2col_rows
from fusion.reference import executor
from fusion.runtime.run_report import kernel_macs
from tests.helpers.pass_testing import assert_unchanged

GROUPS, C, H, W = 3, 12, 4, 4
QX, QY = Quant(0.05, 3), Quant(0.1, -5)


def shuffled(*, groups: int = GROUPS, tail: str = "", also_read: str = "") -> tuple:
    """GEMM rows (per-channel weights, bias, per-channel requantize, relu) -> NCHW -> the
    channel shuffle of ``groups`` -> a 3x3 ``im2col`` -> GEMM, as conv legalization leaves
    ShuffleNet's grouped 1x1 convolution, shuffle and depthwise 3x3.

    ``tail`` = ``"qadd"`` puts a residual add between the requantize and the layout change;
    ``also_read`` names a tensor of the chain that a second output also reads."""
    rng = np.random.default_rng(7)
    b = GraphBuilder("g")
    x = b.input("x", (1, H * W, 8), "int8", quant=QX)
    w_scale = rng.uniform(0.01, 0.03, C)
    wt = b.const("w", rng.integers(-127, 128, (8, C)).astype(np.int8),
                 quant=Quant(tuple(w_scale), (0,) * C, 1))
    acc = b.qmatmul(x, wt, name="mm", group=1)
    acc = b.bias_add(acc, b.const("b1", rng.integers(-300, 300, C).astype(np.int32)),
                     name="bias")
    y = b.requant(acc, QY, round_even=True, name="rq")
    y = b.relu(y, name="relu")
    if tail == "qadd":
        y = b.qadd(y, b.input("r", (1, H * W, C), "int8", quant=QY), QY, name="add")
    t = b.transpose(y, (0, 2, 1), name="t")
    nchw = b.reshape(t, (1, C, H, W), name="nchw")
    split = b.reshape(nchw, (1, groups, C // groups, H, W), name="split")
    swapped = b.transpose(split, (0, 2, 1, 3, 4), name="swap")
    joined = b.reshape(swapped, (1, C, H, W), name="join")
    cols = b.im2col(joined, (3, 3), pads=(1, 1, 1, 1), name="cols")
    w2 = b.const("w2", rng.integers(-127, 128, (9 * C, 8)).astype(np.int8),
                 quant=Quant(0.02, 0))
    out = b.qmatmul(cols, w2, name="mm2")
    outputs = [out] + ([{"t": t, "nchw": nchw, "split": split}[also_read]] if also_read else [])
    return b.build(outputs), outputs


def _inputs(graph, seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.integers(-128, 128, graph.tensors[name].shape).astype(np.int8)
            for name in graph.inputs}


def test_the_shuffle_becomes_the_gemms_column_order():
    before, outputs = shuffled()
    got, changed = channel_shuffle.run(before)
    assert changed
    got = dce.run(im2col_rows.run(got)[0])[0]
    ops = [n.op for n in got.topo_order()]
    # nothing is left between the requantize and the next GEMM's windows, which read the rows
    assert ops == ["qmatmul", "bias_add", "requant", "relu", "im2col", "qmatmul"], ops
    assert got.node("cols").attr("spatial") == (H, W)
    w_before = before.initializers["w"]
    w_after = got.initializers[got.node("mm").inputs[1]]
    order = [int(np.flatnonzero((w_before == w_after[:, [c]]).all(axis=0))[0])
             for c in range(C)]
    assert order == [g * (C // GROUPS) + i for i in range(C // GROUPS) for g in range(GROUPS)]
    assert got.tensors[got.node("mm").inputs[1]].quant.scale == \
        tuple(np.array(before.tensors["w"].quant.scale)[order])
    for seed in range(3):
        inputs = _inputs(before, seed)
        np.testing.assert_array_equal(executor.run(got, inputs)[outputs[0]],
                                      executor.run(before, inputs)[outputs[0]])


@pytest.mark.parametrize("graph", [
    pytest.param(lambda: shuffled(groups=1)[0], id="one group: the identity"),
    pytest.param(lambda: shuffled(tail="qadd")[0], id="a residual add before the layout"),
    pytest.param(lambda: shuffled(also_read="nchw")[0], id="the NCHW tensor read elsewhere"),
    pytest.param(lambda: shuffled(also_read="split")[0], id="the split read elsewhere"),
])
def test_near_misses_are_left_alone(graph):
    assert_unchanged(channel_shuffle.run, graph())


def grouped_shuffled(k: int, channels: int, groups: int = 3) -> tuple:
    """A grouped 1x1 convolution in GEMM form (``k`` input channels, block-diagonal weights,
    ``group`` attribute), its requantize, then the channel shuffle of its ``groups``, read by
    a plain GEMM: ShuffleNet v1's first grouped convolution of a unit, at M = 16."""
    rng = np.random.default_rng(11)
    b = GraphBuilder("g")
    x = b.input("x", (1, H * W, k), "int8", quant=QX)
    w = rng.integers(-127, 128, (k, channels)).astype(np.int8)
    w[np.arange(k)[:, None] // (k // groups) != np.arange(channels)[None, :]
      // (channels // groups)] = 0
    acc = b.qmatmul(x, b.const("w", w, quant=Quant(0.02, 0)), name="mm", group=groups)
    y = b.requant(acc, QY, round_even=True, name="rq")
    nchw = b.reshape(b.transpose(y, (0, 2, 1), name="t"), (1, channels, H, W), name="nchw")
    split = b.reshape(nchw, (1, groups, channels // groups, H, W), name="split")
    joined = b.reshape(b.transpose(split, (0, 2, 1, 3, 4), name="swap"),
                       (1, channels, H, W), name="join")
    cols = b.im2col(joined, (1, 1), name="cols")
    out = b.qmatmul(cols, b.const("w2", rng.integers(-127, 128, (channels, 8)).astype(
        np.int8), quant=Quant(0.02, 0)), name="mm2")
    return b.build([out]), out


@pytest.mark.parametrize("k, channels, kept", [
    (480, 120, True),   # ShuffleNet's stage 3: the groups save 2/3 of 480 rows, > 120
    (240, 120, True),   # its first unit: 160 > 120
    (150, 120, False),  # 100 < 120: the columns take the order instead
    (480, 60, False),   # 20 channels a group are no whole column blocks: no groups to keep
])
def test_a_grouped_gemm_keeps_its_groups_and_a_gemm_permutes(k, channels, kept):
    """Where the groups save more work than the permutation takes, the grouped GEMM keeps its
    block-diagonal weights in their order and a GEMM by the 0/1 permutation matrix (asked=0:
    the model asks for none of its multiply-accumulates) reorders the channels, exactly."""
    before, out = grouped_shuffled(k, channels)
    got = dce.run(im2col_rows.run(channel_shuffle.run(before)[0])[0])[0]
    permuting = [n for n in got.topo_order() if n.op == "qmatmul" and n.attr("asked") == 0]
    w = got.initializers[got.node("mm").inputs[1]]
    if kept:
        assert len(permuting) == 1
        np.testing.assert_array_equal(w, before.initializers["w"])  # still block-diagonal
        p = got.initializers[permuting[0].inputs[1]]
        assert (p.sum(axis=0) == 1).all() and (p.sum(axis=1) == 1).all()
        # utilization counts the grouped convolution's work, not the permutation's
        assert kernel_macs(got, [permuting[0].name]) == 0
        assert kernel_macs(got, ["mm"]) == H * W * k * channels // 3
    else:
        assert not permuting
        assert not np.array_equal(w, before.initializers["w"])  # the columns took the order
    assert "transpose" not in [n.op for n in got.topo_order()]
    for seed in range(3):
        inputs = _inputs(before, seed)
        np.testing.assert_array_equal(executor.run(got, inputs)[out],
                                      executor.run(before, inputs)[out])
