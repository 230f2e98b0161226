"""fusion/passes/integer_eltwise.py: standalone int8/uint8 Relu, Clip, Add, Max and Min as
accelerator ops.

ONNX node models with full-range values (so that Add wraps): the legalized graph holds the
hwgen ops (``relu``, ``clamp``, ``add_wrap``), runs bit for bit like ``onnx.reference``, and
lowers to one epilogue pass per op; what cannot be a pass is left to the host.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from fusion.compiler.plan import compile_model
from fusion.frontend import import_onnx
from fusion.passes import integer_eltwise
from fusion.passes.driver import optimize
from fusion.reference import executor
from hwgen.presets import SIM_VARIANTS

TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def one_node(op, dtype, shape, inits, inputs, **attrs):
    """A model of one node whose first input ``x`` is the graph input."""
    t = TYPES[dtype]
    graph = helper.make_graph(
        [helper.make_node(op, ["x", *inputs], ["y"], name=f"{op}_0", **attrs)], "t",
        [helper.make_tensor_value_info("x", t, shape)],
        [helper.make_tensor_value_info("y", t, shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def full_range(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def check(proto, x):
    graph = optimize(import_onnx(proto))
    want = ReferenceEvaluator(proto).run(None, {"x": x})[0]
    got = executor.run(graph, {"x": x})["y"]
    assert got.dtype == want.dtype and np.array_equal(got, want)
    return graph


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from(["int8", "uint8"]), shape=st.sampled_from([(7,), (3, 4), (2, 3, 5)]),
       c_form=st.sampled_from(["full", "row", "scalar"]), seed=st.integers(0, 2**16))
def test_add_with_a_constant_wraps_like_onnx(dtype, shape, c_form, seed):
    rng = np.random.default_rng(seed)
    c_shape = {"full": shape, "row": shape[-1:], "scalar": ()}[c_form]
    proto = one_node("Add", dtype, shape, {"c": full_range(rng, dtype, c_shape)}, ["c"])
    graph = check(proto, full_range(rng, dtype, shape))
    assert [n.op for n in graph.nodes if n.op not in ("reshape",)] == ["add_wrap"]


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from(["int8", "uint8"]), lo=st.integers(-128, 255) | st.none(),
       hi=st.integers(-128, 255) | st.none(), seed=st.integers(0, 2**16))
def test_clip_with_constant_bounds_matches_onnx(dtype, lo, hi, seed):
    info = np.iinfo(dtype)
    lo = None if lo is None else min(max(lo, info.min), info.max)
    hi = None if hi is None else min(max(hi, info.min), info.max)
    inits = {k: np.array(v, dtype) for k, v in (("lo", lo), ("hi", hi)) if v is not None}
    inputs = ["lo" if lo is not None else "", "hi" if hi is not None else ""]
    proto = one_node("Clip", dtype, (3, 5), inits, inputs)
    graph = check(proto, full_range(np.random.default_rng(seed), dtype, (3, 5)))
    assert [n.op for n in graph.nodes] == ["clamp"]


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from(["Max", "Min"]), dtype=st.sampled_from(["int8", "uint8"]),
       shape=st.sampled_from([(7,), (3, 4), (2, 3, 5)]),
       c_forms=st.lists(st.sampled_from(["full", "row", "scalar"]), min_size=1, max_size=3),
       seed=st.integers(0, 2**16))
def test_max_and_min_with_constants_match_onnx(op, dtype, shape, c_forms, seed):
    """Full-range values (the type's extremes included, where -x would overflow): Max is one
    emax, Min is not(emax(not(x), not(C))), and both run bit for bit like onnx.reference."""
    rng = np.random.default_rng(seed)
    inits = {f"c{i}": full_range(rng, dtype, {"full": shape, "row": shape[-1:],
                                              "scalar": ()}[form])
             for i, form in enumerate(c_forms)}
    proto = one_node(op, dtype, shape, inits, list(inits))
    x = full_range(rng, dtype, shape)
    info = np.iinfo(dtype)
    x.reshape(-1)[:2] = (info.min, info.max)
    graph = check(proto, x)
    want = ["emax"] if op == "Max" else ["qadd", "emax", "qadd"]
    assert [n.op for n in graph.nodes] == want


def test_relu_int8_is_the_relu_op():
    proto = one_node("Relu", "int8", (4, 4), {}, [])
    graph = check(proto, full_range(np.random.default_rng(0), "int8", (4, 4)))
    assert [n.op for n in graph.nodes] == ["relu"]


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_each_becomes_one_accelerator_pass(dtype):
    rng = np.random.default_rng(1)
    for proto in (one_node("Add", dtype, (3, 4, 5), {"c": full_range(rng, dtype, (3, 4, 5))},
                           ["c"]),
                  one_node("Clip", dtype, (3, 5), {"lo": np.array(3, dtype)}, ["lo"])):
        compiled = compile_model(import_onnx(proto), SIM_VARIANTS["4x4"], host_fallback=False)
        kinds = [s.spec.kind.name for s in compiled.steps if hasattr(s, "spec")]
        assert kinds == ["pass"]
    c = {"c": full_range(rng, dtype, (3, 5))}
    for op, want in (("Max", ["max"]), ("Min", ["pass", "max", "pass"])):
        compiled = compile_model(import_onnx(one_node(op, dtype, (3, 5), c, ["c"])),
                                 SIM_VARIANTS["4x4"], host_fallback=False)
        assert [s.spec.kind.name for s in compiled.steps if hasattr(s, "spec")] == want


@pytest.mark.parametrize("op", ["Add", "Max", "Min"])
def test_an_op_of_two_activations_stays_on_the_host(op):
    t = TensorProto.INT8
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "z"], ["y"], name="op")], "t",
        [helper.make_tensor_value_info("x", t, (2,)), helper.make_tensor_value_info("z", t, (2,))],
        [helper.make_tensor_value_info("y", t, (2,))])
    g = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    assert integer_eltwise.run(g) == (g, False)


def test_max_of_int32_is_refused_by_name():
    t = TensorProto.INT32
    graph = helper.make_graph(
        [helper.make_node("Max", ["x", "z"], ["y"], name="op")], "t",
        [helper.make_tensor_value_info("x", t, (2,)), helper.make_tensor_value_info("z", t, (2,))],
        [helper.make_tensor_value_info("y", t, (2,))])
    with pytest.raises(ValueError, match="int32"):
        import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
