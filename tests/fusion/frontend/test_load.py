"""load_model: picks the frontend by the file's extension and says what it reads."""

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
