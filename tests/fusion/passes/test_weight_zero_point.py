"""Weight zero points folded into int8 weights: before/expected, the split, exactness.

Exactness is checked against the ONNX semantics computed with Python integers (no numpy
accumulation): ``sum_k (a_k - za) * (w_kn - zw_n)``, wrapped to int32 like every integer
matmul output.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import GraphError, Quant
from fusion.passes import weight_zero_point as wzp
from fusion.passes.driver import optimize, run_to_fixed_point
from fusion.reference import executor
from tests.helpers.pass_testing import assert_graphs_equal, assert_unchanged

RNG = np.random.default_rng(10)
QA = Quant(0.05, -3)


def matmul_graph(w, qw, a_dtype="int8", qa=QA, m=3):
    b = GraphBuilder("mm")
    x = b.input("x", (m, w.shape[0]), a_dtype, quant=qa)
    y = b.qmatmul(x, b.const("w", w, quant=qw), name="mm")
    return b.build([y], validate=False)  # validation refuses uint8 weights (see the report)


def exact_matmul(a, za, w, zw):
    """``(a - za) @ (w - zw)`` in Python integers, wrapped to int32."""
    m, k = a.shape
    n = w.shape[1]
    zw = np.broadcast_to(np.asarray(zw), (n,))
    out = np.empty((m, n), np.int64)
    for i in range(m):
        for j in range(n):
            s = sum((int(a[i, t]) - int(za)) * (int(w[t, j]) - int(zw[j])) for t in range(k))
            out[i, j] = (s + (1 << 31)) % (1 << 32) - (1 << 31)
    return out


def test_uint8_weights_with_zero_point_128_become_int8_in_place():
    w = RNG.integers(0, 256, (6, 4), dtype=np.uint8)
    before = matmul_graph(w, Quant(0.01, 128))
    got, changed = wzp.run(before)
    assert changed
    b = GraphBuilder("mm")
    x = b.input("x", (3, 6), "int8", quant=QA)
    want = (w.astype(np.int16) - 128).astype(np.int8)
    y = b.qmatmul(x, b.const("w", want, quant=Quant(0.01, 0)), name="mm")
    assert_graphs_equal(got, b.build([y], validate=False))


def test_weights_outside_int8_are_split_along_k_and_the_input_repeated():
    w = np.array([[127, -128], [5, 0]], np.int8)
    qw = Quant((0.1, 0.2), (-128, 0), axis=1)  # column 0: w - zw = 255, 133
    got, changed = wzp.run(matmul_graph(w, qw))
    assert changed
    b = GraphBuilder("mm")
    x = b.input("x", (3, 2), "int8", quant=QA)
    rep = b.op("repeat", x, name="mm/split_k", times=3, quant=QA)
    parts = np.array([[85, -42], [45, 0], [85, -43], [44, 0], [85, -43], [44, 0]], np.int8)
    y = b.qmatmul(rep, b.const("w", parts, quant=Quant((0.1, 0.2), (0, 0), axis=1)),
                  name="mm")
    assert_graphs_equal(got, b.build([y], validate=False))


def test_symmetric_int8_weights_are_left_alone():
    w = RNG.integers(-128, 128, (6, 4), dtype=np.int8)
    assert_unchanged(wzp.run, matmul_graph(w, Quant((0.1,) * 4, (0,) * 4, axis=1)))
    assert_unchanged(wzp.run, matmul_graph(w, None))


def test_a_shared_weight_gets_a_copy_per_reader():
    w = RNG.integers(0, 256, (4, 4), dtype=np.uint8)
    b = GraphBuilder("shared")
    wt = b.const("w", w, quant=Quant(0.01, 128))
    x = b.input("x", (2, 4), "int8", quant=QA)
    y1 = b.qmatmul(x, wt, name="mm1")
    y2 = b.qmatmul(x, wt, name="mm2")
    graph = b.build([y1, y2], validate=False)
    got = run_to_fixed_point(graph, [wzp.run])
    # the first reader gets a copy; the last one, then the weight's only reader, keeps it
    assert sorted(n.inputs[1] for n in got.nodes) == ["w", "w/w0"]
    assert all(got.tensors[n].dtype == "int8" and got.tensors[n].quant == Quant(0.01, 0)
               for n in ("w", "w/w0"))
    x = RNG.integers(-128, 128, (2, 4), dtype=np.int8)
    want, out = executor.run(graph, {"x": x}), executor.run(got, {"x": x})
    assert all(np.array_equal(want[k], out[k]) for k in want)


def test_the_pass_runs_in_the_default_pipeline():
    w = RNG.integers(0, 256, (6, 4), dtype=np.uint8)
    w[0, 0] = 255  # 255 - 0 needs three int8 parts
    got = optimize(matmul_graph(w, Quant(0.01, 0)))
    assert [n.op for n in got.topo_order()] == ["repeat", "qmatmul"]
    assert got.tensors["w"].dtype == "int8" and got.tensors["w"].shape == (18, 4)


@pytest.mark.parametrize("times", [0, 9, True, 2.0])
def test_repeat_refuses_a_count_it_does_not_make(times):
    b = GraphBuilder("bad")
    x = b.input("x", (2, 3), "int8")
    with pytest.raises(GraphError, match=rf"node 'r' \(repeat\): times {times!r} must be an "
                                         rf"integer from 1 to 8"):
        b.op("repeat", x, name="r", times=times)


@pytest.mark.parametrize(("values", "parts"), [
    ([-128, 127], 1), ([128], 2), ([-129], 2), ([-256, 254], 2), ([255], 3), ([-256, 255], 3)])
def test_parts_needed(values, parts):
    assert wzp.parts_needed(np.array(values, np.int64)) == parts


def test_split_int8_refuses_too_few_parts():
    with pytest.raises(ValueError, match="2 int8 parts cannot sum to 0..255; 3 are needed"):
        wzp.split_int8(np.array([0, 255], np.int64), 2)


@given(st.lists(st.integers(-255, 255), min_size=1, max_size=40))
def test_split_parts_are_int8_minimal_and_sum_exactly(values):
    w = np.array(values, np.int64)
    parts = wzp.parts_needed(w)
    split = wzp.split_int8(w, parts)
    assert all(p.dtype == np.int8 for p in split)
    assert np.array_equal(sum(p.astype(np.int64) for p in split), w)
    # minimal: one part fewer cannot hold the extremes
    assert parts == 1 or not (-128 * (parts - 1) <= w.min() and w.max() <= 127 * (parts - 1))


@st.composite
def matmul_cases(draw):
    k, n, m = (draw(st.integers(1, 6)) for _ in range(3))
    w_dtype = draw(st.sampled_from(["int8", "uint8"]))
    a_dtype = draw(st.sampled_from(["int8", "uint8"]))
    lo, hi = (0, 255) if w_dtype == "uint8" else (-128, 127)
    alo, ahi = (0, 255) if a_dtype == "uint8" else (-128, 127)
    ints = st.integers(lo, hi)
    w = np.array(draw(st.lists(ints, min_size=k * n, max_size=k * n)), w_dtype).reshape(k, n)
    if draw(st.booleans()):
        qw = Quant((0.01,) * n, draw(st.lists(ints, min_size=n, max_size=n)), axis=1)
    else:
        qw = Quant(0.01, draw(ints))
    a = np.array(draw(st.lists(st.integers(alo, ahi), min_size=m * k, max_size=m * k)),
                 a_dtype).reshape(m, k)
    za = draw(st.integers(alo, ahi))
    return w, qw, a, Quant(0.05, za), a_dtype


@settings(max_examples=150, deadline=None)
@given(matmul_cases())
def test_folded_matmul_is_exact_for_every_weight_and_zero_point(case):
    w, qw, a, qa, a_dtype = case
    graph = matmul_graph(w, qw, a_dtype, qa, m=a.shape[0])
    got = optimize(graph)
    for node in got.nodes:
        if node.op == "qmatmul":
            wt = got.tensors[node.inputs[1]]
            assert wt.dtype == "int8" and not any(wt.quant.zero_point)
    out = executor.run(got, {"x": a})[got.outputs[0]]
    assert np.array_equal(out, exact_matmul(a, qa.zero_point[0], w, qw.zero_point))
