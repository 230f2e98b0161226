"""first_difference names where two graphs part: a node, a tensor, a constant's values."""

import dataclasses

import numpy as np

from fusion.ir.compare import first_difference
from fusion.ir.graph import Node, Quant
from fusion.ir.synthetic import mlp


def test_equal_graphs_have_no_difference():
    assert first_difference(mlp(layers=2, width=8), mlp(layers=2, width=8)) is None


def test_a_changed_constant_is_named_with_its_first_element():
    want = mlp(layers=2, width=8)
    name = next(k for k, v in sorted(want.initializers.items()) if v.dtype == np.int8)
    value = want.initializers[name].copy()
    value[1, 2] += 1
    got = want.replace(initializers={**want.initializers, name: value})
    assert first_difference(want, got) == (
        f"initializer {name!r} differs in 1 of {value.size:,} values, first at [1, 2]: "
        f"{value[1, 2]} where {value[1, 2] - 1} is expected")


def test_a_changed_attribute_and_quantization_are_named():
    want = mlp(layers=1, width=8)
    node = want.topo_order()[-1]
    attrs = {**node.attr_dict, "extra": 1}
    got = want.replace(nodes=[Node(n.name, n.op, n.inputs, n.outputs, attrs) if n is node
                              else n for n in want.nodes])
    assert first_difference(want, got).startswith(f"node {node.name!r} has attrs ")
    out = want.outputs[0]
    tensor = dataclasses.replace(want.tensors[out], quant=Quant((0.5,), (0,)))
    got = want.replace(tensors={**want.tensors, out: tensor})
    assert first_difference(want, got).startswith(f"tensor {out!r} has quantization")
