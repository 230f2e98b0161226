"""The Python graph builder: names, inferred types, quantization it derives, and its errors."""

import re

import numpy as np
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import GraphError, Quant
from fusion.reference import executor
from hwgen.reference import quantize_multiplier


def mlp():
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 4), "int8", quant=Quant(0.05, -3))
    w = b.const("w", np.arange(12, dtype=np.int8).reshape(4, 3),
                quant=Quant((0.01, 0.02, 0.04), (0, 0, 0), axis=1))
    acc = b.qmatmul(x, w)
    acc = b.bias_add(acc, b.const(None, np.array([1, 2, 3], np.int32)))
    y = b.relu(b.requant(acc, Quant(0.1, 5)))
    return b, b.build([y])


def test_names_are_unique_and_types_inferred():
    _, g = mlp()
    assert [n.name for n in g.topo_order()] == ["qmatmul0", "bias_add0", "requant0", "relu0"]
    assert "c0" in g.initializers
    assert (g.tensors["qmatmul0"].shape, g.tensors["qmatmul0"].dtype) == ((2, 3), "int32")
    assert g.tensors["relu0"].dtype == "int8" and g.outputs == ("relu0",)


def test_quantization_flows_into_accumulators_and_requant_attributes():
    _, g = mlp()
    acc = g.tensors["qmatmul0"].quant
    assert acc.axis == -1 and np.allclose(acc.scale, (0.0005, 0.001, 0.002))
    rq = g.node("requant0")
    pairs = [quantize_multiplier(s / 0.1) for s in acc.scale]
    assert rq.attr("mult") == tuple(m for m, _ in pairs)
    assert rq.attr("shift") == tuple(s for _, s in pairs)
    assert rq.attr("zp") == 5 and g.tensors["relu0"].quant == Quant(0.1, 5)


def test_built_graph_runs():
    _, g = mlp()
    x = np.array([[1, 2, 3, 4], [-5, 6, -7, 8]], np.int8)
    out = executor.run(g, {"x": x})["relu0"]
    assert out.dtype == np.int8 and out.shape == (2, 3)


def test_qadd_and_layout_ops_keep_quantization():
    b = GraphBuilder("g")
    a = b.input("a", (1, 2, 4, 4), "int8", quant=Quant(0.03, 1))
    c = b.input("c", (1, 2, 4, 4), "int8", quant=Quant(0.05, -2))
    s = b.qadd(a, c, Quant(0.07, 0), name="add")
    p = b.maxpool(s, (2, 2), strides=(2, 2))
    f = b.flatten(b.transpose(p, (0, 1, 3, 2)))
    g = b.build([b.reshape(f, (2, 4))])
    assert g.tensors[g.outputs[0]].quant == Quant(0.07, 0)
    assert g.tensors[g.outputs[0]].shape == (2, 4)


@pytest.mark.parametrize(("build", "message"), [
    (lambda b, x: b.op("Tanh", x), "op 'Tanh' is not supported; supported ops are "),
    (lambda b, x: b.relu("nope"), "no tensor named 'nope'"),
    (lambda b, x: b.op("relu", "nope"), "node 'relu0' (relu) reads 'nope', which is not a "
                                        "tensor of graph 'g' yet"),
    (lambda b, x: b.input("x", (1,), "int8"), "tensor 'x' already exists in graph 'g'"),
    (lambda b, x: b.relu(b.relu(x, name="r"), name="r"), "a node named 'r' already exists"),
    (lambda b, x: b.requant(b.input("i", (2,), "int32"), Quant(0.1, 0)),
     "requant of 'i': the input has no quantization to derive the scale from; pass scale="),
    (lambda b, x: b.qmatmul(x, x), "matmul inner dimensions differ"),
    (lambda b, x: b.const("f", np.zeros(2, np.float64)), "constant 'f' has numpy dtype float64"),
    (lambda b, x: b.build(["nope"]), "output 'nope' is not a tensor of graph 'g'"),
])
def test_mistakes_fail_at_the_call_that_made_them(build, message):
    b = GraphBuilder("g")
    x = b.input("x", (2, 3), "int8", quant=Quant(0.1, 0))
    with pytest.raises((GraphError, KeyError), match=re.escape(message)):
        build(b, x)


def test_build_validates_the_graph():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3), "float32")
    y = b.quantize(x, Quant(0.1, 0))
    b.dequantize(b.input("q", (3,), "int8"))  # no quantization on its input
    with pytest.raises(GraphError, match="its input 'q' has no quantization"):
        b.build([y, "dequantize0"])
    assert b.build([y], validate=False).outputs == (y,)
