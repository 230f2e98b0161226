"""load_model: picks the frontend by the file's extension and says what it reads."""

import json
from pathlib import Path

import pytest

from fusion.frontend.json_format import save_json
from fusion.frontend.load import load_model
from fusion.ir.graph import GraphError
from fusion.ir.synthetic import mlp

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_reads_an_onnx_model_and_a_json_graph(tmp_path):
    assert load_model(EXAMPLES / "qop_mlp.onnx").nodes
    graph = mlp(layers=1, width=8, batch=2)
    save_json(graph, tmp_path / "g.json")
    assert load_model(tmp_path / "g.json").signature() == graph.signature()


@pytest.mark.parametrize("name, message", [
    ("m.txt", r"m.txt is neither an ONNX model \(.onnx\) nor an hwgen JSON graph"),
    ("m.onnx", "no ONNX model at"),
    ("m.json", "no hwgen JSON graph at"),
])
def test_refuses_what_it_cannot_read(tmp_path, name, message):
    with pytest.raises(GraphError, match=message):
        load_model(tmp_path / name)


def test_input_shapes_are_for_onnx_models(tmp_path):
    save_json(mlp(layers=1, width=8, batch=2), tmp_path / "g.json")
    with pytest.raises(GraphError, match="--input-shape applies to ONNX models"):
        load_model(tmp_path / "g.json", {"x": (2, 8)})


def _graph_file(tmp_path, edit) -> Path:
    from fusion.frontend.json_format import to_dict

    data = to_dict(mlp(layers=1, width=8, batch=2))
    edit(data)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("edit", "message"), [
    # the matmul's required input A is '': the passes raised AttributeError
    (lambda d: d["nodes"][0]["inputs"].__setitem__(0, ""),
     r"g.json: node 'fc0/qmatmul' \(qmatmul\): input 'a' is required but empty"),
    # wrong arities: "too many values to unpack" / "not enough values to unpack"
    (lambda d: d["nodes"][0]["inputs"].append("b0"),
     r"node 'fc0/qmatmul' \(qmatmul\) has 3 inputs, but qmatmul takes 2"),
    (lambda d: d["nodes"][0]["inputs"].pop(), r"has 1 inputs, but qmatmul takes 2"),
    # checks the IR's validation makes, which JSON graphs skipped
    (lambda d: d["tensors"]["x"]["quant"].update(zero_point=[300]), r"zero point 300"),
    (lambda d: d["tensors"]["w0"]["quant"].update(axis=5), r"axis 5"),
    (lambda d: d["nodes"][3]["attrs"].update(frob=1), r"unknown attribute\(s\) frob"),
    (lambda d: d["nodes"][2]["attrs"].update(shift="big"), r"shift"),
    (lambda d: d.update(outputs=[]), r"g.json: the model has no outputs"),
    (lambda d: d.update(nodes=[], outputs=["x"]), r"g.json: the model has no nodes"),
    (lambda d: d.update(outputs=["x"]), r"computes none of its outputs"),
    (lambda d: d.update(inputs=["x", "x"]), r"graph input 'x' is listed twice"),
    (lambda d: d.update(inputs=[""]), r"graph inputs need names"),
])
def test_a_json_graph_is_validated_when_loaded(tmp_path, edit, message):
    with pytest.raises(GraphError, match=message):
        load_model(_graph_file(tmp_path, edit))


@pytest.mark.parametrize(("data", "message"), [
    (b"", r"m.onnx: the model has no outputs"),  # protobuf reads 0 bytes as an empty model
    (bytes(range(256)) * 4, r"m.onnx is not a readable ONNX model"),
])
def test_an_empty_or_garbage_onnx_file_is_refused(tmp_path, data, message):
    (tmp_path / "m.onnx").write_bytes(data)
    with pytest.raises(GraphError, match=message):
        load_model(tmp_path / "m.onnx")


def test_an_onnx_model_without_nodes_is_refused(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    onnx.save(helper.make_model(helper.make_graph([], "g", [x], [x])), tmp_path / "m.onnx")
    with pytest.raises(GraphError, match=r"m.onnx: the model has no nodes"):
        load_model(tmp_path / "m.onnx")
