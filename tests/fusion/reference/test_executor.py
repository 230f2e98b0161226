"""The reference executor: hwgen integer ops against hwgen.reference and ONNX semantics."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Quant, Tensor
from fusion.passes.conv_legalize import gemm_weights
from fusion.reference import executor
from fusion.reference.registry import IMPLEMENTATIONS, implements
from hwgen import reference as ref


def one_node(op, inputs, attrs=None, consts=None, out_quant=None):
    """A graph of one node; ``inputs`` maps name -> (shape, dtype, quant)."""
    tensors = {n: Tensor(n, s, d, q) for n, (s, d, q) in inputs.items()}
    consts = consts or {}
    node = Node("n", op, tuple(inputs), ("y",), attrs or {})
    (t,) = ops.infer(node, list(tensors.values()), consts)
    tensors["y"] = Tensor("y", t.shape, t.dtype, out_quant)
    return Graph(nodes=(node,), tensors=tensors,
                 inputs=tuple(n for n in inputs if n not in consts),
                 outputs=("y",), initializers=consts)


def run1(graph, **feeds):
    return executor.run(graph, feeds)["y"]


def test_qmatmul_subtracts_zero_points_per_tensor_and_per_channel():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    b = rng.integers(-128, 128, (5, 4)).astype(np.int8)
    bzp = (1, -2, 3, 0)
    g = one_node("qmatmul", {"a": ((3, 5), "uint8", Quant(0.1, 128)),
                             "b": ((5, 4), "int8", Quant((0.1,) * 4, bzp, axis=1))})
    got = run1(g, a=a, b=b)
    want = (a.astype(np.int64) - 128) @ (b.astype(np.int64) - np.array(bzp))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_qmatmul_wraps_like_the_accumulators():
    k = 1 << 17
    g = one_node("qmatmul", {"a": ((1, k), "int8", None), "b": ((k, 1), "int8", None)})
    got = run1(g, a=np.full((1, k), -128, np.int8), b=np.full((k, 1), -128, np.int8))
    assert got[0, 0] == ref.gemm(np.full((1, k), -128), np.full((k, 1), -128))[0, 0]


def test_bias_add_saturates_along_the_axis():
    g = one_node("bias_add", {"x": ((1, 2, 1, 1), "int32", None), "bias": ((2,), "int32", None)},
                 {"axis": 1}, consts={"bias": np.array([1, -1], np.int32)})
    x = np.array([ref.INT32_MAX, ref.INT32_MIN], np.int32).reshape(1, 2, 1, 1)
    np.testing.assert_array_equal(run1(g, x=x).ravel(), [ref.INT32_MAX, ref.INT32_MIN])


def test_requant_per_channel_uses_each_channels_multiplier():
    attrs = ops.requant_attrs([0.5, 0.25], 3, axis=0)
    g = one_node("requant", {"x": ((2, 3), "int32", None)}, attrs)
    x = np.array([[10, -10, 7], [10, -10, 7]], np.int32)
    # 5, -5, 3.5 -> 4 (half up); 2.5 -> 3, -2.5 -> -2, 1.75 -> 2; plus zp 3
    np.testing.assert_array_equal(run1(g, x=x), [[8, -2, 7], [6, 1, 5]])


def test_relu_and_clamp_match_the_reference():
    x = np.array([-100, -1, 0, 5, 127], np.int8)
    g = one_node("relu", {"x": ((5,), "int8", None)})
    np.testing.assert_array_equal(run1(g, x=x), ref.relu(x))
    g = one_node("clamp", {"x": ((5,), "int8", None)}, {"lo": -3, "hi": 4})
    np.testing.assert_array_equal(run1(g, x=x), ref.clamp(x, -3, 4))


def test_quantize_rounds_half_to_even_and_dequantize_inverts():
    q = Quant(0.5, 3)
    g = one_node("quantize", {"x": ((5,), "float32", None)}, out_quant=q)
    got = run1(g, x=np.array([0.25, 0.75, -0.25, 100.0, -100.0], np.float32))
    np.testing.assert_array_equal(got, [3, 5, 3, 127, -128])  # 0.5 -> 0, 1.5 -> 2, -0.5 -> 0
    g = one_node("dequantize", {"x": ((2,), "int8", q)})
    np.testing.assert_array_equal(run1(g, x=np.array([3, 5], np.int8)), [0.0, 1.0])


def test_quantize_needs_a_quantized_output():
    g = one_node("quantize", {"x": ((1,), "float32", None)})
    with pytest.raises(GraphError, match="output 'y' has no quantization"):
        run1(g, x=np.zeros(1, np.float32))


def _conv_case(data):
    c = data.draw(st.integers(1, 4))
    # group 1, depthwise (group = c) or anything between that divides c.
    group = data.draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
    m = group * data.draw(st.integers(1, 2 if group > 1 else 3))
    k = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    attrs = {"strides": (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))),
             "dilations": (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))),
             "pads": tuple(data.draw(st.integers(0, 2)) for _ in range(4)),
             "group": group}
    h, w = (data.draw(st.integers((k[i] - 1) * attrs["dilations"][i] + 1, 7)) for i in (0, 1))
    seed = data.draw(st.integers(0, 2**32 - 1))
    return c, m, k, h, w, attrs, np.random.default_rng(seed)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_qconv2d_equals_onnx_conv_integer(data):
    c, m, k, h, w, attrs, rng = _conv_case(data)
    cg = c // attrs["group"]
    x = rng.integers(0, 256, (2, c, h, w)).astype(np.uint8)
    wt = rng.integers(-128, 128, (m, cg, *k)).astype(np.int8)
    xzp, wzp = int(rng.integers(0, 256)), tuple(int(v) for v in rng.integers(-5, 5, m))
    hw = one_node("qconv2d", {"x": (x.shape, "uint8", Quant(1.0, xzp)),
                              "w": (wt.shape, "int8", Quant((1.0,) * m, wzp, axis=0))}, attrs)
    # hwgen's pads (top, left, bottom, right) are ONNX's order (begins, then ends).
    consts = {"xzp": np.uint8(xzp), "wzp": np.array(wzp, np.int8)}
    onnx_g = one_node("ConvInteger", {"x": (x.shape, "uint8", None),
                                      "w": (wt.shape, "int8", None), "xzp": ((), "uint8", None),
                                      "wzp": ((m,), "int8", None)}, attrs, consts)
    np.testing.assert_array_equal(run1(hw, x=x, w=wt), run1(onnx_g, x=x, w=wt))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_im2col_then_qmatmul_equals_qconv2d(data):
    """The legalization identity documented in fusion.ir.ops: im2col + qmatmul + layout = qconv2d.

    For any group, with the block-diagonal weights of ``conv_legalize.gemm_weights`` (filled
    with the nonzero weight zero points here, which must contribute nothing).
    """
    c, m, k, h, w, attrs, rng = _conv_case(data)
    x = rng.integers(-128, 128, (2, c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (m, c // attrs["group"], *k)).astype(np.int8)
    xq, wzp = Quant(0.1, int(rng.integers(-128, 128))), tuple(range(m))
    conv = run1(one_node("qconv2d", {"x": (x.shape, "int8", xq),
                                     "w": (wt.shape, "int8", Quant((1.0,) * m, wzp, 0))}, attrs),
                x=x, w=wt)
    win = {key: attrs[key] for key in ("strides", "dilations", "pads")}
    cols = run1(one_node("im2col", {"x": (x.shape, "int8", xq)}, {**win, "kernel_shape": k}),
                x=x)
    wmat = gemm_weights(wt, c, attrs["group"], Quant((1.0,) * m, wzp, 0))
    mm = run1(one_node("qmatmul", {"a": (cols.shape, "int8", xq),
                                   "b": (wmat.shape, "int8", Quant((1.0,) * m, wzp, 1))}),
              a=cols, b=wmat)
    np.testing.assert_array_equal(mm.transpose(0, 2, 1).reshape(conv.shape), conv)


def test_maxpool_pads_never_win():
    x = np.full((1, 1, 2, 2), -128, np.int8)
    g = one_node("maxpool", {"x": ((1, 1, 2, 2), "int8", None)},
                 {"kernel_shape": (2, 2), "pads": (1, 1, 1, 1), "strides": (2, 2)})
    np.testing.assert_array_equal(run1(g, x=x), np.full((1, 1, 2, 2), -128))


def test_run_checks_its_inputs():
    g = one_node("relu", {"x": ((2,), "int8", None)})
    with pytest.raises(GraphError, match="graph input 'x' has no value"):
        executor.run(g, {})
    with pytest.raises(GraphError, match=r"input\(s\) z are not graph inputs; the graph "
                                         r"inputs are x"):
        executor.run(g, {"x": np.zeros(2, np.int8), "z": 1})
    with pytest.raises(GraphError, match=r"shape \(3,\), but the graph declares \(2,\)"):
        executor.run(g, {"x": np.zeros(3, np.int8)})
    with pytest.raises(GraphError, match="is float64, but the graph declares int8"):
        executor.run(g, {"x": np.zeros(2)})
    np.testing.assert_array_equal(executor.run(g, {"x": [1, -1]})["y"], [1, 0])


def test_keep_returns_every_tensor():
    g = one_node("relu", {"x": ((2,), "int8", None)})
    assert set(executor.run(g, {"x": np.zeros(2, np.int8)}, keep=True)) == {"x", "y"}


def test_every_catalog_op_has_an_implementation():
    assert set(IMPLEMENTATIONS) == set(ops.SUPPORTED_OPS)


def test_an_op_is_implemented_once():
    with pytest.raises(ValueError, match="relu already have an implementation"):
        implements("relu")
