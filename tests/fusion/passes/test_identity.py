"""Identity and no-op removal: before/expected graphs, and what it leaves alone."""

import numpy as np
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import identity
from tests.helpers.pass_testing import assert_graphs_equal, assert_unchanged

Q = Quant(0.1, 0)


def test_identity_reshape_and_transpose_chain_collapses():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3), "float32")
    t = b.op("Identity", x)
    shape = b.const("shape", np.array([2, 3], np.int64))
    t = b.op("Reshape", t, shape)
    t = b.op("Transpose", t, perm=(0, 1))
    y = b.op("Relu", t, name="out")
    before = b.build([y])

    e = GraphBuilder("g")
    x = e.input("x", (2, 3), "float32")
    e.op("Relu", x, name="out")
    expected = e.build([y])

    got, changed = identity.run(before)
    assert changed
    assert_graphs_equal(got, expected)
    assert_unchanged(identity.run, got)


def test_a_no_op_that_is_a_graph_output_renames_its_producer():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3), "int32")
    c = b.clamp(x, 0, 100, name="c")
    y = b.relu(c, name="r")          # relu after clamp(lo >= 0): a no-op
    before = b.build([y])

    e = GraphBuilder("g")
    x = e.input("x", (2, 3), "int32")
    e.clamp(x, 0, 100, name="c", outputs=["r"])
    expected = e.build(["r"])

    got, changed = identity.run(before)
    assert changed
    assert_graphs_equal(got, expected)


def test_relu_before_a_non_negative_clamp_goes():
    b = GraphBuilder("g")
    x = b.input("x", (4,), "int8", quant=Q)
    r = b.relu(x, name="r")
    y = b.clamp(r, 3, 90, name="c")
    before = b.build([y])

    e = GraphBuilder("g")
    x = e.input("x", (4,), "int8", quant=Q)
    e.clamp(x, 3, 90, name="c")
    expected = e.build(["c"])

    got, changed = identity.run(before)
    assert changed
    assert_graphs_equal(got, expected)


def test_clamps_wider_than_their_input_go():
    b = GraphBuilder("g")
    x = b.input("x", (4,), "int8", quant=Q)
    c = b.clamp(x, 10, 20, name="inner")
    c = b.clamp(c, 0, 50, name="outer")    # contains [10, 20]
    y = b.clamp(c, -128, 127, name="full")  # the whole int8 range
    before = b.build([y])

    e = GraphBuilder("g")
    x = e.input("x", (4,), "int8", quant=Q)
    e.clamp(x, 10, 20, name="inner", outputs=["full"])
    expected = e.build(["full"])

    got, changed = identity.run(before)
    assert changed
    assert_graphs_equal(got, expected)


def test_a_no_op_between_two_outputs_stays():
    b = GraphBuilder("g")
    x = b.input("x", (4,), "int8", quant=Q)
    c = b.clamp(x, 10, 20, name="inner")
    y = b.clamp(c, 0, 50, name="outer")
    # Removing "outer" would need "inner" to be written under two names.
    assert_unchanged(identity.run, b.build([y, c]))


@pytest.mark.parametrize("build", [
    lambda b, x: b.op("Transpose", x, perm=(1, 0)),          # a real transpose of a square
    lambda b, x: b.clamp(x, 0, 5),                            # a real clamp
    lambda b, x: b.relu(x),                                   # int32 input can be negative
    lambda b, x: b.op("Identity", x),                         # input straight to output
])
def test_real_work_and_interface_no_ops_stay(build):
    b = GraphBuilder("g")
    x = b.input("x", (3, 3), "int32")
    g = b.build([build(b, x)])
    assert_unchanged(identity.run, g)


def test_a_no_op_that_changes_quantization_stays():
    b = GraphBuilder("g")
    x = b.input("x", (4, 1), "int8", quant=Q)
    y = b.reshape(x, (4, 1), quant=Quant(0.2, 0))
    g = b.build([b.relu(y)])
    assert_unchanged(identity.run, g)


def test_an_unannotated_identity_goes_unless_a_reader_takes_its_zero_point():
    def graph(reader):
        b = GraphBuilder("g")
        x = b.input("x", (2, 4), "int8", quant=Quant(0.5, 3))
        t = b.op("Identity", x, name="id")  # output unannotated, as ONNX import leaves it
        if reader == "qmatmul":  # would subtract zero point 3 instead of 0
            y = b.qmatmul(t, b.const("w", np.ones((4, 2), np.int8)), name="mm")
        else:  # relu ignores annotations
            y = b.relu(t, name="r")
        return b.build([y])
    assert_unchanged(identity.run, graph("qmatmul"))
    got, changed = identity.run(graph("relu"))
    assert changed and [n.op for n in got.nodes] == ["relu"]
