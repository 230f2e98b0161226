"""Epilogue ops become stages, parameters and constants as the stage specs declare."""

import numpy as np

from fusion.compiler.lower import STAGE_OF
from fusion.compiler.stage_values import assemble_stages, stage_values
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Node, Quant
from hwgen.stages import STAGES


def test_each_stage_spec_names_the_op_it_implements():
    assert STAGE_OF == {s.op: s.name for s in STAGES if s.op}
    assert {"bias_add", "requant", "relu", "clamp"} <= set(STAGE_OF)


def _chain():
    rng = np.random.default_rng(0)
    b = GraphBuilder("layer")
    x = b.input("x", (4, 8), "int8", quant=Quant(0.05, 0))
    w = b.const("w", rng.integers(-127, 128, (8, 4)).astype(np.int8), quant=Quant(0.003, 0))
    acc = b.qmatmul(x, w, name="mm")
    acc = b.bias_add(acc, b.const("bvec", np.arange(4, dtype=np.int32)), name="bias")
    y = b.requant(acc, Quant(0.1, 3), name="req")
    y = b.clamp(b.relu(y, name="relu"), -20, 90, name="clamp")
    return b.build(outputs=[y])


def test_a_chain_becomes_its_stages_parameters_and_constants():
    graph = _chain()
    items = [(graph.node(n), STAGE_OF[graph.node(n).op]) for n in ("bias", "req", "relu",
                                                                     "clamp")]
    stages, params, consts, residual = assemble_stages(graph, items, 4, None)
    assert residual is None
    assert stages == ("bias", "requant", "relu", "clamp")
    req = graph.node("req")
    assert (params.mult, params.shift, params.zp) == (req.attr("mult"), req.attr("shift"), 3)
    assert (params.clamp_lo, params.clamp_hi, params.per_channel) == (-20, 90, False)
    np.testing.assert_array_equal(consts["bias"], np.arange(4))


def test_a_stage_without_a_converter_takes_the_attributes_named_as_its_parameters():
    graph = _chain()
    # relu has no parameters; a node's attributes that are not its parameters are ignored
    node = Node("r", "relu", graph.node("relu").inputs, ("r",), {"residual_op": "max"})
    assert stage_values(graph, node, "relu") == ({}, {})
    # residual has no converter: residual_op is its parameter, taken by name
    assert stage_values(graph, node, "residual") == ({"residual_op": "max"}, {})
