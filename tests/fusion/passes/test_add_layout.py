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


def float_residual_units(units: int = 2):
    """A QOperator ShuffleNet's float residual stream: the GEMM rows of each unit's
    convolution, in NCHW (``L``) and dequantized, added in float to the stream, a Relu, and
    the Relu quantized for the next convolution and added by the next unit's Sum."""
    q, qs = Quant(0.05, -3), Quant(0.07, -128)
    b = GraphBuilder("stream")
    rows = [b.input(f"g{i}", (1, 12, 8), "int8", quant=q) for i in range(units + 1)]

    def nchw(t, name):
        return b.reshape(b.transpose(t, (0, 2, 1), name=f"{name}/t", quant=q), (1, 8, 3, 4),
                         name=f"{name}/r", quant=q)

    stream = b.dequantize(nchw(rows[0], "v0"), name="dq0")
    outs = []
    for i in range(1, units + 1):
        added = b.op("Sum", stream, b.dequantize(nchw(rows[i], f"v{i}"), name=f"dq{i}"),
                     name=f"sum{i}")
        stream = b.op("Relu", added, name=f"relu{i}")
        outs.append(b.quantize(stream, qs, name=f"q{i}"))
    return b.build(outs), outs


def test_the_float_residual_stream_runs_in_the_gemm_layout_and_stays_exact():
    before, outs = float_residual_units()
    got, changed = add_layout.run(before)
    assert changed
    # every host op reads the GEMM rows; only the quantized outputs are changed to NCHW
    for name in ("sum1", "relu1", "sum2", "relu2", "q1", "q2", "dq0", "dq1", "dq2"):
        assert got.tensors[got.node(name).outputs[0]].shape[1:] == (12, 8), name
    for out in outs:
        assert got.producer(got.producer(out).inputs[0]).op == "transpose"
    for seed in range(3):
        rng = np.random.default_rng(seed)
        feed = {f"g{i}": rng.integers(-128, 128, (1, 12, 8)).astype(np.int8) for i in range(3)}
        for float64 in (False, True):
            want = executor.run(before, feed, float64=float64)
            have = executor.run(got, feed, float64=float64)
            for out in outs:
                np.testing.assert_array_equal(have[out], want[out])


def test_float_ops_that_broadcast_or_mix_layouts_are_left_alone():
    b = GraphBuilder("t")
    x = b.input("x", (1, 6, 4), "float32")
    y = b.input("y", (1, 4, 6), "float32")
    c = b.input("c", (1, 4, 1), "float32")
    tx = b.reshape(b.transpose(x, (0, 2, 1), name="tx"), (1, 4, 6), name="rx")
    b.op("Add", tx, y, name="mixed", outputs=["s"])  # y is in NCHW already
    b.op("Add", tx, c, name="broadcast", outputs=["t"])
    graph = b.build(["s", "t"])
    assert add_layout.run(graph) == (graph, False)
