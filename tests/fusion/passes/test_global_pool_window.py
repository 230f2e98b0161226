"""fusion.passes.global_pool_window: a global pool's GEMM form written back as the depthwise
convolution it is, for the window unit. The rewrite is exact (the reference executor gives
the same integers before and after, and onnxruntime's output is within its bound either
way), legalizes into an ``im2col`` of the producing convolution's rows, and leaves every
other graph alone."""

from pathlib import Path

import numpy as np
import pytest

from fusion.frontend.load import load_model
from fusion.passes.driver import optimize
from fusion.passes.global_pool_window import for_variant, run
from fusion.reference import executor

REAL = Path(__file__).resolve().parents[3] / "examples" / "real"


@pytest.mark.parametrize("name", ["resnet8_qdq", "ds_cnn_qdq", "mobilenet_v1_025_qdq"])
def test_the_pool_becomes_a_window_sum_of_the_rows_and_computes_the_same(name):
    graph = optimize(load_model(REAL / f"{name}.onnx"), legalize=True)
    after = for_variant(graph)
    assert not any(n.name.startswith("pool/rows") for n in after.nodes)
    (windows,) = [n for n in after.nodes if n.op == "im2col" and n.name.startswith("pool/")]
    # the plane's windows are cut from the convolution's rows, not from an NCHW copy
    assert windows.attr("spatial") and tuple(windows.attr("kernel_shape")) == tuple(
        windows.attr("spatial"))
    (gemm,) = after.consumers(windows.outputs[0])
    assert gemm.op == "qmatmul" and gemm.attr("group") == after.tensors[
        windows.inputs[0]].shape[-1]
    with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
        x = data["x"]
    (out,) = graph.outputs
    want = executor.run(graph, {graph.inputs[0]: x})[out]
    got = executor.run(after, {after.inputs[0]: x})[out]
    np.testing.assert_array_equal(got, want)


def test_graphs_without_a_global_pool_are_left_alone():
    for name in ("lenet5_qdq", "fc_autoencoder_qdq"):
        graph = optimize(load_model(REAL / f"{name}.onnx"), legalize=True)
        assert run(graph) == (graph, False)
        assert for_variant(graph) is graph
