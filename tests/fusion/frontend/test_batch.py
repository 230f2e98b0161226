"""Batched import (fusion.frontend.batch): B inputs through one graph equal B runs of one.

The judge is onnxruntime, run on each input alone with the model as exported (batch 1); hwgen
runs the batched graph once, through the passes and its reference executor.
"""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from examples.build_real_models import sample_input
from fusion.frontend.load import load_model
from fusion.frontend.onnx_import import import_onnx
from fusion.ir.graph import GraphError
from fusion.passes.driver import optimize
from fusion.reference import executor
from tests.fusion.references import check_within_one_lsb, lsb_errors, output_scale, session

REAL = Path(__file__).resolve().parents[3] / "examples" / "real"


@pytest.mark.parametrize(("name", "batch"), [("fc_autoencoder_qdq", 4), ("lenet5_qdq", 2)])
def test_batched_model_equals_onnxruntime_one_input_at_a_time(name, batch, capsys):
    path = REAL / f"{name}.onnx"
    graph = optimize(load_model(path, batch=batch), legalize=True)
    xs = [sample_input(name.rsplit("_", 1)[0], seed) for seed in range(2001, 2001 + batch)]
    x = np.concatenate(xs)
    assert graph.tensors["x"].shape == x.shape
    got = executor.run(graph, {"x": x})["y"]
    ort = session(path)
    want = np.concatenate([ort.run(["y"], {"x": one})[0] for one in xs])
    assert got.shape == want.shape == (batch, *want.shape[1:])
    figures = check_within_one_lsb(lsb_errors(got, want, output_scale(onnx.load(str(path)), "y")),
                                   f"{name} at batch {batch}: hwgen vs onnxruntime one by one",
                                   integer=want.dtype.kind in "iu")
    # and each row is what hwgen's own batch-1 graph computes for that input, bit for bit
    single = optimize(load_model(path), legalize=True)
    for i, one in enumerate(xs):
        np.testing.assert_array_equal(got[i:i + 1], executor.run(single, {"x": one})["y"])
    with capsys.disabled():
        print(f"\n{figures}")


def _reshape_model(target: list[int], shape=(1, 4, 6)) -> onnx.ModelProto:
    """x -> Relu -> Reshape(target) -> Relu: a Reshape whose constant may spell the batch."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
             helper.make_node("Reshape", ["r", "shape"], ["s"], name="reshape"),
             helper.make_node("Relu", ["s"], ["y"], name="relu1")]
    graph = helper.make_graph(
        nodes, "reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(target, np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", [[1, 24], [1, -1], [0, -1], [-1, 24], [1, 2, 12]])
def test_a_reshape_follows_the_batch(target):
    model = _reshape_model(target)
    graph = import_onnx(model, batch=3)
    one = import_onnx(model)
    assert graph.tensors["y"].shape == (3, *one.tensors["y"].shape[1:])
    x = np.arange(72, dtype=np.float32).reshape(3, 4, 6) - 30
    got = executor.run(graph, {"x": x})["y"]
    for i in range(3):  # each input alone, through the model as exported
        np.testing.assert_array_equal(got[i:i + 1], executor.run(one, {"x": x[i:i + 1]})["y"])


@pytest.mark.parametrize(("target", "shape"), [([24], (1, 4, 6)), ([2, 12], (1, 4, 6)),
                                               ([4, 6], (1, 4, 6))])
def test_a_reshape_that_moves_the_batch_is_refused(target, shape):
    with pytest.raises(GraphError, match=r"--batch 3: Reshape node 'reshape' reshapes .* does "
                                         r"not keep the batch as the leading axis"):
        import_onnx(_reshape_model(target, shape), batch=3)


def test_an_input_without_a_batch_axis_is_refused():
    with pytest.raises(GraphError, match=r"--batch 2: graph input 'x' has shape \(4, 6\), "
                                         r"which does not lead with a batch axis of 1"):
        import_onnx(_reshape_model([24], (4, 6)), batch=2)


def test_a_dynamic_batch_dimension_takes_the_batch():
    model = _reshape_model([-1, 24], ("N", 4, 6))
    assert import_onnx(model, batch=5).tensors["x"].shape == (5, 4, 6)
    with pytest.raises(GraphError, match="dynamic shape"):
        import_onnx(model)  # batch 1 still needs --input-shape, as before


@pytest.mark.parametrize("batch", [0, -2, 1.5, True])
def test_a_bad_batch_is_refused(batch):
    with pytest.raises(GraphError, match="the batch must be a whole number of at least 1"):
        import_onnx(_reshape_model([1, 24]), batch=batch)


def test_a_json_graph_takes_no_batch(tmp_path):
    from fusion.frontend.json_format import save_json
    from fusion.ir.synthetic import mlp

    save_json(mlp(layers=1, width=8, batch=2), tmp_path / "g.json")
    with pytest.raises(GraphError, match="--batch applies to ONNX models"):
        load_model(tmp_path / "g.json", batch=2)


def test_a_node_that_merges_the_batch_axis_is_refused():
    # Flatten at axis 0 folds the batch into one row: (1, 24) at batch 1, (1, 72) at batch 3
    nodes = [helper.make_node("Flatten", ["x"], ["y"], name="flat", axis=0)]
    graph = helper.make_graph(nodes, "flat",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GraphError, match=r"--batch 3: Flatten node 'flat' gives 'y' the shape "
                                         r"\(1, 72\) at batch 3 \(at batch 1: \(1, 24\)\), so it "
                                         r"does not keep the batch as the leading axis"):
        import_onnx(model, batch=3)
