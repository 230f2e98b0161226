"""A convolution whose window program fits only in whole blocks of output columns computes
them for the max pool that reads it, and the pool crops them: the same integers out, the
convolution on the accelerator instead of host-gathered windows, and near misses left alone.
Also the crop itself: a negative end pad of hwgen's ``maxpool`` drops trailing columns."""

import numpy as np
import pytest

from fusion.compiler import whole_rows
from fusion.compiler.plan import compile_model
from fusion.ir import shapes, windows
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import GraphError, Quant
from fusion.kernels.cache import KernelCache
from fusion.passes.driver import optimize
from fusion.reference import executor
from fusion.runtime.run_report import kernel_macs
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from tests.helpers.pass_testing import assert_graphs_equal

V8W = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24, window_unit=True)
QX, QY = Quant(0.05, 3), Quant(0.1, -128)


def stem(*, side: int = 32, kernel: int = 7, pool_pads=(0, 0, 0, 0), ceil: int = 1,
         also_read: bool = False):
    """SqueezeNet's stem at ``side`` pixels, as conv legalization leaves it: a ``kernel``
    stride-2 ``im2col`` of 3 channels, a GEMM to 36 with bias, per-channel requantize and
    relu, its NCHW view, and a 3x3 stride-2 max pool (``also_read``: the view is an output
    too)."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("stem")
    x = b.input("x", (1, 3, side, side), "int8", quant=QX)
    cols = b.im2col(x, (kernel, kernel), strides=(2, 2), name="cols")
    k = 3 * kernel * kernel
    w = b.const("w", rng.integers(-127, 128, (k, 36)).astype(np.int8),
                quant=Quant(tuple(rng.uniform(0.01, 0.03, 36)), (0,) * 36, 1))
    acc = b.bias_add(b.qmatmul(cols, w, name="mm"),
                     b.const("bias", rng.integers(-900, 900, 36).astype(np.int32)), name="b")
    y = b.relu(b.requant(acc, QY, round_even=True, name="rq"), name="relu")
    ow = (side - kernel) // 2 + 1
    nchw = b.reshape(b.transpose(y, (0, 2, 1), name="t"), (1, 36, ow, ow), name="nchw")
    pool = b.maxpool(nchw, (3, 3), strides=(2, 2), pads=pool_pads, ceil_mode=ceil,
                     name="pool")
    return b.build([pool, nchw] if also_read else [pool])


def _same_outputs(got, before, seeds=3):
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        inputs = {"x": rng.integers(-128, 128, (1, 3, *before.tensors["x"].shape[2:]))
                  .astype(np.int8)}
        want, have = executor.run(before, inputs), executor.run(got, inputs)
        for name in before.outputs:
            np.testing.assert_array_equal(have[name], want[name])


def test_the_convolution_computes_whole_rows_and_the_pool_crops_them():
    before = optimize(stem())
    got = whole_rows.for_variant(before, V8W)
    cols, pool = got.node("cols"), got.node("pool")
    # 13 output columns -> 16: 6 more right pad columns at stride 2, 3 of them cropped
    assert tuple(cols.attr("pads")) == (0, 0, 0, 6) and cols.attr("cropped") == 3
    # utilization counts the MACs the model asks for, not the cropped columns'
    assert kernel_macs(got, ["mm"]) == kernel_macs(before, ["mm"]) == 13 * 13 * 147 * 36
    assert got.tensors[cols.outputs[0]].shape == (1, 13 * 16, 147)
    assert tuple(got.node("nchw").attr("shape")) == (1, 36, 13, 16)
    assert tuple(pool.attr("pads")) == (0, 0, 0, -3)
    assert got.tensors[pool.outputs[0]].shape == before.tensors[before.outputs[0]].shape
    _same_outputs(got, before)
    # on the accelerator: a window convolution and a window-unit pool, no host im2col
    c = compile_model(stem(), V8W, cache=KernelCache(disk=False))
    kinds = {k.name: k.spec.kind.name for k in c.kernels}
    assert kinds == {"cols": "conv", "pool": "window"}
    assert not [h.name for h in c.host if h.node.op == "im2col"]


@pytest.mark.parametrize("why, graph", [
    ("the NCHW view is read by another", stem(also_read=True)),
    ("the pool pads past the last column", stem(pool_pads=(0, 0, 0, 1), ceil=0)),
    ("ceil_mode's last window overhangs", stem(side=34)),
    ("output rows already whole blocks", stem(side=37)),
    ("the program fits as it is", stem(kernel=3)),
])
def test_near_misses_are_left_alone(why, graph):
    before = optimize(graph)
    assert_graphs_equal(whole_rows.for_variant(before, V8W), before)


def test_the_near_misses_are_what_they_say():
    # ceil overhang at 34 px: 14 columns, and the pool's 7th window ends at column 15
    assert optimize(stem(side=34)).tensors["nchw"].shape[3] == 14
    assert shapes.window((14, 14), (3, 3), (2, 2), ceil_mode=1)[0] == (7, 7)
    assert optimize(stem(side=37)).tensors["nchw"].shape[3] == 16


def test_a_negative_end_pad_crops():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 4, 9, 12)).astype(np.int8)
    got = windows.maxpool(x, (3, 3), (2, 2), (1, 1), (0, 1, -1, -3), ceil_mode=1)
    want = windows.maxpool(x[:, :, :8, :9], (3, 3), (2, 2), (1, 1), (0, 1, 0, 0), ceil_mode=1)
    np.testing.assert_array_equal(got, want)
    b = GraphBuilder("p")
    pool = b.maxpool(b.input("x", (1, 4, 9, 12), "int8", quant=QX), (3, 3), strides=(2, 2),
                     pads=(0, 1, -1, -3), ceil_mode=1)
    g = b.build([pool])
    assert g.tensors[pool].shape == want.shape
    np.testing.assert_array_equal(executor.run(g, {"x": x})[pool], want)


def test_crops_are_hwgens_alone():
    with pytest.raises(GraphError, match="begins non-negative"):
        shapes.crop_ends((9, 12), (-1, 0, 0, 0))
    with pytest.raises(GraphError, match="crop all"):
        shapes.crop_ends((9, 12), (0, 0, 0, -12))
    with pytest.raises(GraphError, match="non-negative"):  # ONNX's pads never crop
        shapes.window((9, 12), (3, 3), (2, 2), pads=(0, 0, 0, -3))


def test_a_crop_with_a_ceil_overhang_is_not_for_the_window_unit():
    # 13 columns less 3 is 10: ceil_mode's last 3x3/2 window starts at column 8 and runs
    # past 10 into columns that hold data, which on the unit it would read
    b = GraphBuilder("p")
    pool = b.maxpool(b.input("x", (1, 8, 9, 13), "int8", quant=QX), (3, 3), strides=(2, 2),
                     pads=(0, 0, 0, -3), ceil_mode=1, name="pool")
    c = compile_model(b.build([pool]), V8W, cache=KernelCache(disk=False))
    (k,) = c.kernels
    assert k.spec.kind.name == "max" and "run past the columns" in k.spec.note
