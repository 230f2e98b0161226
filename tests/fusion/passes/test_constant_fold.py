"""Constant folding: before/expected graphs, and what it keeps."""

import numpy as np

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import constant_fold
from fusion.reference import executor
from tests.helpers.pass_testing import assert_graphs_equal, assert_unchanged

WF = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def test_an_initializer_only_chain_folds_to_one_initializer():
    b = GraphBuilder("g")
    x = b.input("x", (2, 4), "float32")
    w = b.const("wf", WF)
    wt = b.op("Transpose", w, name="wt", perm=(1, 0))                         # 4 x 3
    s, z = b.const("s", np.float32(0.01)), b.const("z", np.int8(0))
    wq = b.op("QuantizeLinear", wt, s, z, name="wq")
    wd = b.op("DequantizeLinear", wq, s, z, name="wd")                       # kept
    y = b.op("MatMul", x, wd, name="mm")
    before = b.build([y])

    wq_value = np.clip(np.rint(WF.T / np.float32(0.01)), -128, 127).astype(np.int8)
    e = GraphBuilder("g")
    x = e.input("x", (2, 4), "float32")
    s, z = e.const("s", np.float32(0.01)), e.const("z", np.int8(0))
    wq = e.const("wq", wq_value)
    wd = e.op("DequantizeLinear", wq, s, z, name="wd")
    e.op("MatMul", x, wd, name="mm")
    expected = e.build([y])

    got, changed = constant_fold.run(before)
    assert changed
    assert_graphs_equal(got, expected)
    assert_unchanged(constant_fold.run, got)
    xv = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(executor.run(got, {"x": xv})["mm"],
                                  executor.run(before, {"x": xv})["mm"])


def test_hwgen_ops_fold_and_keep_their_quantization():
    b = GraphBuilder("g")
    c = b.const("c", np.array([[1, -2], [300, -300]], np.int32), quant=Quant(0.5, 0))
    r = b.requant(c, Quant(1.0, 3), name="r")
    before = b.build([r])
    got, changed = constant_fold.run(before)
    assert changed and not got.nodes
    assert got.tensors["r"].quant == Quant(1.0, 3)
    np.testing.assert_array_equal(got.initializers["r"], [[4, 2], [127, -128]])


def test_dequantize_of_weights_and_nodes_reading_activations_stay():
    b = GraphBuilder("g")
    x = b.input("x", (2,), "int8", quant=Quant(0.1, 0))
    w = b.const("w", np.array([1, 2], np.int8), quant=Quant(0.1, 0))
    g = b.build([b.dequantize(w), b.qadd(x, w, Quant(0.2, 0))])
    assert_unchanged(constant_fold.run, g)
