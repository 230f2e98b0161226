"""Q/DQ folding: before/expected graphs for each rewrite, its refusals, and exactness."""

from fractions import Fraction

import numpy as np
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Graph, Quant
from fusion.passes import _edit, _qdq_pairs, dce, qdq_fold
from fusion.passes.driver import PassLog, optimize
from fusion.reference import executor
from tests.helpers.pass_testing import assert_graphs_equal, assert_unchanged


def q32(scale, zero_point):
    """A Quant with a float32 scale, as ONNX stores it."""
    return Quant(float(np.float32(scale)), zero_point)


W = np.array([[1, -2, 3], [4, 5, -6], [-7, 8, 9], [10, -11, 12]], np.int8)
QX, QW, QY = Quant(0.5, -1), Quant(0.25, 0), Quant(0.75, 0)


def fold(graph):
    graph, changed = qdq_fold.run(graph)
    assert changed
    return dce.run(graph)[0]


def qparams(b, name, quant, dtype=np.int8):
    return (b.const(f"s{name}", np.float32(quant.scale[0])),
            b.const(f"z{name}", np.array(quant.zero_point[0], dtype)))


def qdq_matmul(act="Relu", zy=0, bias=True):
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 4), "int8")
    xd = b.op("DequantizeLinear", x, *qparams(b, "x", QX), name="dqx")
    w = b.const("w", W)
    wd = b.op("DequantizeLinear", w, *qparams(b, "w", QW), name="dqw")
    t = b.op("MatMul", xd, wd, name="mm")
    if bias:
        t = b.op("Add", t, b.const("bias", np.array([0.5, -1.0, 2.0], np.float32)), name="add")
    if act == "Relu":
        t = b.op("Relu", t, name="relu")
    elif act == "Clip":
        t = b.op("Clip", t, b.const("lo", np.float32(-1.5)), b.const("hi", np.float32(6.0)),
                 name="clip")
    y = b.op("QuantizeLinear", t, *qparams(b, "y", Quant(0.75, zy)), name="q")
    return b.build([y])


def expected_matmul(tail):
    e = GraphBuilder("mlp")
    x = e.input("x", (2, 4), "int8", quant=QX)
    w = e.const("w", W, quant=QW)
    acc = e.qmatmul(x, w, name="mm/qmatmul")
    acc = e.bias_add(acc, e.const("mm/bias", np.array([4, -8, 16], np.int32)), axis=1,
                     name="mm/bias_add")
    return e, tail(e, acc)


def test_matmul_bias_relu_becomes_the_integer_chain():
    def tail(e, acc):
        y = e.requant(acc, QY, name="mm/requant", round_even=True)
        return e.relu(y, name="mm/relu", outputs=["q"])
    e, y = expected_matmul(tail)
    assert_graphs_equal(fold(qdq_matmul("Relu")), e.build([y]))


def test_relu_vanishes_when_the_requantize_saturation_does_it():
    q = Quant(0.75, -128)
    e = GraphBuilder("mlp")

    def tail(e, acc):
        return e.requant(acc, q, name="mm/requant", outputs=["q"], round_even=True)
    e, y = expected_matmul(tail)
    assert_graphs_equal(fold(qdq_matmul("Relu", zy=-128)), e.build([y]))


def test_clip_becomes_a_clamp_at_the_quantized_bounds():
    q = Quant(0.75, 3)

    def tail(e, acc):
        y = e.requant(acc, q, name="mm/requant", round_even=True)
        # Q(-1.5) = -2 + 3 = 1, Q(6.0) = 8 + 3 = 11
        return e.clamp(y, 1, 11, name="mm/clamp", outputs=["q"])
    e, y = expected_matmul(tail)
    assert_graphs_equal(fold(qdq_matmul("Clip", zy=3)), e.build([y]))


def test_without_a_quantize_the_accumulator_is_dequantized():
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 4), "int8")
    xd = b.op("DequantizeLinear", x, *qparams(b, "x", QX), name="dqx")
    wd = b.op("DequantizeLinear", b.const("w", W), *qparams(b, "w", QW), name="dqw")
    y = b.op("MatMul", xd, wd, name="mm")
    e = GraphBuilder("mlp")
    x = e.input("x", (2, 4), "int8", quant=QX)
    acc = e.qmatmul(x, e.const("w", W, quant=QW), name="mm/qmatmul")
    e.dequantize(acc, name="mm/dequantize", outputs=["mm"])
    assert_graphs_equal(fold(b.build([y])), e.build(["mm"]))


def residual_add(qa, qb, qo):
    b = GraphBuilder("res")
    a = b.input("a", (2, 3), "int8")
    c = b.input("c", (2, 3), "int8")
    ad = b.op("DequantizeLinear", a, *qparams(b, "a", qa), name="dqa")
    cd = b.op("DequantizeLinear", c, *qparams(b, "c", qb), name="dqc")
    s = b.op("Add", ad, cd, name="add")
    y = b.op("QuantizeLinear", s, *qparams(b, "o", qo), name="q")
    return b.build([y])


def test_residual_add_becomes_qadd_with_31_bit_input_multipliers():
    qa, qb, qo = q32(0.031, 2), q32(0.047, -5), q32(0.061, 0)
    got = fold(residual_add(qa, qb, qo))

    e = GraphBuilder("res")
    a = e.input("a", (2, 3), "int8", quant=qa)
    c = e.input("c", (2, 3), "int8", quant=qb)
    e.qadd(a, c, qo, name="add/qadd", outputs=["q"])
    assert_graphs_equal(got, e.build(["q"]))
    # each input's scale over the output's, to 31 bits: 0.047/0.061 < 1 fills 2**30..2**31
    attrs = got.node("add/qadd").attr_dict
    assert attrs["shift"] == 31 and (1 << 30) <= attrs["b_mult"] < (1 << 31)
    for key, s in (("a_mult", qa), ("b_mult", qb)):
        exact = Fraction(s.scale[0]) / Fraction(qo.scale[0]) * 2 ** attrs["shift"]
        assert abs(attrs[key] - exact) <= Fraction(1, 2)


def test_a_residual_add_int8_multipliers_could_not_fold_is_now_exact():
    # 0.996 is 126.49/127: the int8 input multipliers of before were 2 LSBs off ONNX here
    # (a = -120, b = 127: ONNX (-120 + 0.996 * 127) / 0.25 = 25.97 -> 26); 31-bit ones are not.
    qa, qb, qo = q32(1.0, 0), q32(0.996, 0), q32(0.25, 0)
    graph = residual_add(qa, qb, qo)
    got = fold(graph)
    assert {n.op for n in got.nodes} == {"qadd"}
    inputs = {"a": np.full((2, 3), -120, np.int8), "c": np.full((2, 3), 127, np.int8)}
    np.testing.assert_array_equal(executor.run(graph, inputs)["q"], 26)
    np.testing.assert_array_equal(executor.run(got, inputs)["q"], 26)


def test_a_residual_add_with_scales_no_multiplier_holds_is_refused():
    qa, qb, qo = q32(1.0, 0), q32(1e-30, 0), q32(0.25, 0)
    got, _ = qdq_fold.run(residual_add(qa, qb, qo))
    assert "Add" in {n.op for n in got.nodes}
    assert any("the smaller input's multiplier rounds to 0 even at shift 63" in line
               for line in qdq_fold.explain(got))


def test_qlinear_matmul_becomes_qmatmul_and_requant():
    b = GraphBuilder("ql")
    x = b.input("x", (2, 4), "int8")
    w = b.const("w", W)
    y = b.op("QLinearMatMul", x, *qparams(b, "x", QX), w, *qparams(b, "w", QW),
             *qparams(b, "y", QY), name="qlm")
    got = fold(b.build([y]))

    e = GraphBuilder("ql")
    x = e.input("x", (2, 4), "int8", quant=QX)
    acc = e.qmatmul(x, e.const("w", W, quant=QW), name="qlm/qmatmul")
    e.requant(acc, QY, name="qlm/requant", outputs=["qlm"], round_even=True)
    assert_graphs_equal(got, e.build(["qlm"]))


def test_matmul_integer_records_zero_points_with_unit_scale():
    b = GraphBuilder("mi")
    x = b.input("x", (2, 4), "uint8")
    y = b.op("MatMulInteger", x, b.const("w", W), b.const("zx", np.uint8(7)),
             b.const("zw", np.int8(0)), name="mi")
    got = fold(b.build([y]))

    e = GraphBuilder("mi")
    x = e.input("x", (2, 4), "uint8", quant=Quant(1.0, 7))
    e.qmatmul(x, e.const("w", W, quant=Quant(1.0, 0)), name="mi/qmatmul", outputs=["mi"],
              quant=None)
    assert_graphs_equal(got, e.build(["mi"]))


def test_layout_ops_run_on_integers_and_q_dq_pairs_vanish():
    q = q32(0.1, 3)
    b = GraphBuilder("pool")
    x = b.input("x", (1, 2, 4, 4), "int8")
    s, z = qparams(b, "x", q)
    xd = b.op("DequantizeLinear", x, s, z, name="dq")
    p = b.op("MaxPool", xd, kernel_shape=(2, 2), strides=(2, 2), name="pool")
    f = b.op("Flatten", p, name="flat")
    y = b.op("QuantizeLinear", f, s, z, name="q")
    got = fold(b.build([y]))

    e = GraphBuilder("pool")
    x = e.input("x", (1, 2, 4, 4), "int8", quant=q)
    p = e.maxpool(x, (2, 2), strides=(2, 2), pads=(0, 0, 0, 0), dilations=(1, 1),
                  ceil_mode=0, name="pool/maxpool")
    e.flatten(p, 1, name="flat/flatten", outputs=["q"])
    assert_graphs_equal(got, e.build(["q"]))


def test_relu_of_a_dequantize_is_a_clamp_at_the_zero_point():
    q = q32(0.1, 3)
    b = GraphBuilder("r")
    x = b.input("x", (4,), "int8")
    y = b.op("Relu", b.op("DequantizeLinear", x, *qparams(b, "x", q), name="dq"), name="relu")
    got = fold(b.build([y]))

    e = GraphBuilder("r")
    x = e.input("x", (4,), "int8", quant=q)
    c = e.clamp(x, 3, 127, name="relu/clamp")
    e.dequantize(c, name="relu/dequantize", outputs=["relu"])
    assert_graphs_equal(got, e.build(["relu"]))


def test_boundary_q_and_dq_become_quantize_and_dequantize():
    b = GraphBuilder("io")
    x = b.input("x", (3,), "float32")
    s, z = qparams(b, "x", QX)
    xq = b.op("QuantizeLinear", x, s, z, name="q")
    y = b.op("DequantizeLinear", b.op("Relu", xq, name="relu"), s, z, name="dq")
    got = fold(b.build([y]))

    e = GraphBuilder("io")
    x = e.input("x", (3,), "float32")
    xq = e.quantize(x, QX, name="q")
    e.dequantize(e.op("Relu", xq, name="relu", quant=QX), name="dq")
    assert_graphs_equal(got, e.build(["dq"]))
    xv = np.array([-1.0, 0.26, 7.0], np.float32)
    # ONNX Relu of the int8 tensor is an integer max(q, 0): -1.0 -> q=-3 -> 0 -> (0+1)*0.5
    np.testing.assert_array_equal(executor.run(got, {"x": xv})["dq"], [0.5, 0.5, 7.0])


# -- refusals -----------------------------------------------------------------------------


def _gemm(x_shape=(2, 4), **attrs):
    b = GraphBuilder("g")
    x = b.input("x", x_shape, "int8")
    xd = b.op("DequantizeLinear", x, *qparams(b, "x", QX), name="dqx")
    wd = b.op("DequantizeLinear", b.const("w", W), *qparams(b, "w", QW), name="dqw")
    y = b.op("Gemm", xd, wd, name="gemm", **attrs)
    return b.build([b.op("QuantizeLinear", y, *qparams(b, "y", QY), name="q")])


@pytest.mark.parametrize(("graph", "message"), [
    (lambda: _gemm(alpha=2.0), "gemm (Gemm): Gemm 'gemm' has alpha or beta other than 1"),
    (lambda: _gemm((4, 2), transA=1),
     "gemm (Gemm): Gemm 'gemm' has transA=1; transpose A before it"),
])
def test_refused_patterns_stay_and_explain_says_why(graph, message):
    g = graph()
    got, _ = qdq_fold.run(g)
    assert [n.op for n in got.topo_order()].count("Gemm") == 1
    assert any(line.startswith(message) for line in qdq_fold.explain(got))


def test_a_residual_add_without_quantize_is_refused():
    b = GraphBuilder("res")
    a = b.input("a", (3,), "int8")
    ad = b.op("DequantizeLinear", a, *qparams(b, "a", QX), name="dqa")
    y = b.op("Add", ad, ad, name="add")
    got, _ = qdq_fold.run(b.build([y]))
    assert ("add (Add): Add 'add' is not followed by a QuantizeLinear; qadd produces an 8-bit "
            "result") in qdq_fold.explain(got)


def test_a_tensor_quantized_two_ways_is_refused():
    b = GraphBuilder("two")
    x = b.input("x", (2, 4), "int8", quant=Quant(0.3, 0))
    xd = b.op("DequantizeLinear", x, *qparams(b, "x", QX), name="dqx")
    wd = b.op("DequantizeLinear", b.const("w", W), *qparams(b, "w", QW), name="dqw")
    y = b.op("MatMul", xd, wd, name="mm")
    g = b.build([y], validate=False)
    got, _ = qdq_fold.run(g)
    assert any("'x' is quantized both as scale=0.3 zp=0 and scale=0.5 zp=-1" in line
               for line in qdq_fold.explain(got))


def test_a_folded_graph_is_a_fixed_point():
    got = fold(qdq_matmul())
    assert_unchanged(qdq_fold.run, got)


# -- long chains (issue 29) ---------------------------------------------------------------


def _pair_chain(pairs, *, requantize_at=(), output_at=(), branch_at=()):
    """``x -> Q -> DQ -> Q -> DQ ...``: one scale, but a pair in ``requantize_at`` quantizes
    to another (not folded), one in ``output_at`` is also a graph output, and one in
    ``branch_at`` has a second reader (a Relu, also an output)."""
    b = GraphBuilder("chain")
    t = b.input("x", (4,), "float32")
    same, other = qparams(b, "a", QX), qparams(b, "b", QY)
    outputs = []
    for i in range(pairs):
        q = b.op("QuantizeLinear", t, *(other if i in requantize_at else same), name=f"Q{i}")
        t = b.op("DequantizeLinear", q, *(other if i in requantize_at else same), name=f"DQ{i}")
        if i in output_at:
            outputs.append(q)
        if i in branch_at:
            outputs.append(b.op("Relu", t, name=f"R{i}"))
    return b.build([*outputs, t])


def test_pairs_folded_in_one_edit_give_the_graph_of_one_fold_at_a_time():
    graph = _pair_chain(12, requantize_at={4, 5}, output_at={7}, branch_at={2, 9})

    def one(g, node):
        try:
            return qdq_fold._rewrite(g, node)
        except qdq_fold.Refused:
            return None
    one_at_a_time, _ = _qdq_pairs.lower_all(_edit.rewrite_each(graph, one)[0])
    got, changed = qdq_fold.run(graph)
    assert changed
    assert_graphs_equal(got, one_at_a_time)
    assert [n.name for n in got.nodes] == [n.name for n in one_at_a_time.nodes]


def test_a_chain_of_pairs_folds_without_a_graph_per_pair(monkeypatch):
    # Folded one pair at a time, 1,000 pairs built 1,000 graphs and walked each again
    # (13 s for 1,000 nodes in hwgen inspect, minutes for 4,000): count the graphs built.
    graph = _pair_chain(1000)
    built = []
    post_init = Graph.__post_init__
    monkeypatch.setattr(Graph, "__post_init__", lambda g: (built.append(1), post_init(g)))
    log = PassLog()
    got = optimize(graph, log=log)
    assert [n.op for n in got.topo_order()] == ["quantize", "dequantize"]
    assert len(built) < 20 and log.rounds <= 3
