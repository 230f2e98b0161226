"""Dead-code elimination: before/expected graphs."""

import numpy as np

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import dce
from tests.helpers.pass_testing import assert_graphs_equal, assert_unchanged

W = np.arange(12, dtype=np.int8).reshape(4, 3)


def test_drops_unused_nodes_and_initializers_but_keeps_inputs():
    b = GraphBuilder("g")
    x = b.input("x", (2, 4), "int8", quant=Quant(0.1, 0))
    unused_in = b.input("unused_in", (2, 4), "int8")
    w = b.const("w", W, quant=Quant(0.01, 0))
    dead_w = b.const("dead_w", W, quant=Quant(0.01, 0))
    y = b.qmatmul(x, w)
    dead = b.qmatmul(x, dead_w)
    b.relu(dead)
    before = b.build([y])

    e = GraphBuilder("g")
    x = e.input("x", (2, 4), "int8", quant=Quant(0.1, 0))
    e.input(unused_in, (2, 4), "int8")
    w = e.const("w", W, quant=Quant(0.01, 0))
    e.qmatmul(x, w)
    expected = e.build([y])

    got, changed = dce.run(before)
    assert changed
    assert_graphs_equal(got, expected)
    assert_unchanged(dce.run, got)


def test_a_node_with_one_used_output_stays():
    b = GraphBuilder("g")
    x = b.input("x", (1, 4, 2, 2), "float32")
    y = b.op("MaxPool", x, kernel_shape=(1, 1))
    g = b.build([y])
    assert_unchanged(dce.run, g)


def test_does_not_mutate_its_input():
    b = GraphBuilder("g")
    x = b.input("x", (2, 2), "int32")
    b.relu(x)
    y = b.clamp(x, 0, 5)
    g = b.build([y])
    before = g.canonical()
    got, changed = dce.run(g)
    assert changed and len(got.nodes) == 1 and len(g.nodes) == 2
    assert g.canonical() == before
