"""The host's LRN after a convolution runs on the convolution's rows: the same integers out,
no transpose before it, and near misses left alone. The ``lrn`` op itself against
onnxruntime's float LRN and the spec's formula."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import dce, host_rows
from fusion.reference import executor
from fusion.reference.onnx_host_ops import batch_normalization, lrn
from tests.helpers.pass_testing import assert_unchanged

H, W, C = 4, 5, 12
QX, QY = Quant(0.05, -128), Quant(0.04, -128)
LRN = {"size": 5, "alpha": 1e-4 * 400, "beta": 0.75, "bias": 1.0}


def conv_lrn(*, also_read: str = "", then: str = "quantize"):
    """A convolution's rows, their NCHW view, ``dequantize -> LRN -> quantize``, as Q/DQ
    folding and conv legalization leave Inception-v1's conv2 and lrn2; ``also_read`` names a
    tensor an output also reads, ``then`` what reads the LRN."""
    b = GraphBuilder("g")
    rows = b.input("rows", (1, H * W, C), "int8", quant=QX)
    nchw = b.reshape(b.transpose(rows, (0, 2, 1), name="t"), (1, C, H, W), name="nchw")
    real = b.dequantize(nchw, name="dq")
    normed = b.op("LRN", real, name="lrn", **LRN)
    out = b.quantize(normed, QY, name="q") if then == "quantize" else \
        b.op("Relu", normed, name="relu")
    extra = {"nchw": nchw, "dq": real}.get(also_read)
    return b.build([out] + ([extra] if extra else [])), out


def test_the_lrn_reads_the_rows():
    before, out = conv_lrn()
    got, changed = host_rows.run(before)
    got = dce.run(got)[0]
    assert changed
    ops = [n.op for n in got.topo_order()]
    assert ops == ["dequantize", "lrn", "quantize", "transpose", "reshape"]
    assert got.node("lrn").attr("axis") == 2 and got.node("dq").inputs == ("rows",)
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, (1, H * W, C)).astype(np.int8)
        np.testing.assert_array_equal(executor.run(got, {"rows": x})[out],
                                      executor.run(before, {"rows": x})[out])


@pytest.mark.parametrize("why, kw", [
    ("the NCHW view is read by another", {"also_read": "nchw"}),
    ("the dequantized tensor is read by another", {"also_read": "dq"}),
    ("no quantize after the LRN", {"then": "relu"}),
])
def test_near_misses_are_left_alone(why, kw):
    assert_unchanged(host_rows.run, conv_lrn(**kw)[0])


def test_lrn_on_any_axis_is_onnxs_lrn():
    """Against onnxruntime's float LRN and the ONNX spec's formula written out per element
    (onnx's ReferenceEvaluator sums the squares over the batch axis: docs/compiler.md)."""
    x = np.random.default_rng(0).normal(0, 3, (2, C, H, W)).astype(np.float32)
    node = onnx.helper.make_node("LRN", ["x"], ["y"], **LRN)
    graph = onnx.helper.make_graph(
        [node], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, x.shape)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (want,) = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    rows = x.reshape(2, C, H * W).transpose(0, 2, 1)
    got = lrn(rows, axis=2, **LRN).transpose(0, 2, 1).reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    spec = np.empty_like(got)
    for n, c, i, j in np.ndindex(*x.shape):
        lo, hi = max(0, c - (LRN["size"] - 1) // 2), min(C - 1, c + LRN["size"] // 2)
        square_sum = sum(float(x[n, k, i, j]) ** 2 for k in range(lo, hi + 1))
        spec[n, c, i, j] = float(x[n, c, i, j]) / (LRN["bias"] + LRN["alpha"] / LRN["size"]
                                             * square_sum) ** LRN["beta"]
    np.testing.assert_allclose(got, spec, rtol=1e-12)
    # and the same operations on either axis: equal to ONNX's axis in every bit
    np.testing.assert_array_equal(got, lrn(x, **LRN))


def conv_batchnorm():
    """A join's rows, their NCHW view and ``dequantize -> BatchNormalization -> quantize``:
    DenseNet's BN that no int8 affine reproduces, left to the host."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("g")
    rows = b.input("rows", (1, H * W, C), "int8", quant=QX)
    nchw = b.reshape(b.transpose(rows, (0, 2, 1), name="t"), (1, C, H, W), name="nchw")
    params = [b.const(n, v.astype(np.float32)) for n, v in (
        ("scale", rng.uniform(0.5, 2, C)), ("shift", rng.normal(0, 1, C)),
        ("mean", rng.normal(0, 1, C)), ("var", rng.uniform(0.5, 2, C)))]
    normed = b.op("BatchNormalization", b.dequantize(nchw, name="dq"), *params, name="bn",
                  epsilon=1e-3)
    return b.build([b.quantize(normed, QY, name="q")])


def test_a_host_batch_norm_reads_the_rows():
    from fusion.passes import batchnorm

    before = conv_batchnorm()
    got = dce.run(host_rows.run(before)[0])[0]
    node = got.node("bn")
    assert node.op == "batchnorm" and node.attr("axis") == 2 and node.attr("epsilon") == 1e-3
    assert [n.op for n in got.topo_order()][-2:] == ["transpose", "reshape"]
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, (1, H * W, C)).astype(np.int8)
        np.testing.assert_array_equal(executor.run(got, {"rows": x})["q"],
                                      executor.run(before, {"rows": x})["q"])
    # the plan's reason for it is the one the BatchNormalization had
    assert batchnorm.why_host(got, node) == batchnorm.why_host(before, before.node("bn"))


def test_batch_norm_on_any_axis_is_the_same_operations():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 3, (2, C, H, W)).astype(np.float32)
    params = [rng.uniform(0.5, 2, C).astype(np.float32) for _ in range(4)]
    rows = x.reshape(2, C, H * W).transpose(0, 2, 1)
    got = batch_normalization(rows, *params, 1e-3, axis=2)
    np.testing.assert_array_equal(got.transpose(0, 2, 1).reshape(x.shape),
                                  batch_normalization(x, *params, 1e-3))
