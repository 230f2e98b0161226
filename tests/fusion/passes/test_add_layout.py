"""The residual add moves before the layout change of its inputs, bit-exact, and then fuses."""

import numpy as np

from fusion.compiler.plan import compile_model
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import add_layout
from fusion.passes.driver import optimize
from fusion.reference import executor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES


def residual_block():
    """x -> conv a -> requant; x -> conv b -> requant; qadd of the two (NCHW), as ResNet."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("block")
    x = b.input("x", (1, 4, 6, 6), "int8", quant=Quant(0.05, -3))
    branches = []
    for name in ("a", "b"):
        w = b.const(f"w{name}", rng.integers(-100, 100, (8, 4, 3, 3), dtype=np.int8),
                    quant=Quant(0.01, 0))
        y = b.qconv2d(x, w, name=f"conv_{name}", pads=(1, 1, 1, 1))
        branches.append(b.requant(y, Quant(0.2, 1), name=f"rq_{name}", round_even=True))
    y = b.qadd(*branches, Quant(0.3, -2), name="add")
    return b.build([y])


def test_the_add_of_two_convs_moves_before_their_layout_change_and_stays_exact():
    graph = optimize(residual_block(), legalize=True)
    add = graph.node("add")
    # it adds the GEMM-layout tensors ([N, OH*OW, M]); its sum is changed back to NCHW
    assert all(graph.producer(i).op == "requant" for i in add.inputs)
    assert [c.op for c in graph.consumers(add.outputs[0])] == ["transpose"]
    before = optimize(residual_block(), legalize=False)
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, (1, 4, 6, 6)).astype(np.int8)
        np.testing.assert_array_equal(executor.run(graph, {"x": x})["add"],
                                      executor.run(before, {"x": x})["add"])


def test_then_the_add_fuses_into_a_gemm():
    graph = optimize(residual_block(), legalize=True)
    config = VariantConfig(rows=4, cols=4, epilogue=ALL_STAGES)
    compiled = compile_model(graph, config)
    assert any("add" in k.spec.nodes and k.spec.nodes[0].endswith("qmatmul")
               for k in compiled.kernels)


def test_inputs_in_other_layouts_are_left_alone():
    b = GraphBuilder("t")
    q = Quant(0.1, 0)
    x = b.input("x", (1, 6, 4), "int8", quant=q)
    y = b.input("y", (1, 4, 6), "int8", quant=q)
    tx = b.reshape(b.transpose(x, (0, 2, 1), name="tx"), (1, 4, 6), name="rx")
    ty = b.reshape(b.transpose(y, (0, 1, 2), name="ty"), (1, 4, 6), name="ry")
    b.qadd(tx, ty, q, name="add", outputs=["s"])
    graph = b.build(["s"])
    assert add_layout.run(graph) == (graph, False)
