"""``hwgen inspect``: the graph after the passes, as text or JSON, and its one-line errors."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.bad_input_probe import qdq_chain
from fusion.frontend.json_format import save_json
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from hwgen.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ONNX_COMPUTE = {"MatMul", "Gemm", "Conv", "QLinearMatMul", "QLinearConv", "MatMulInteger",
                "ConvInteger", "QuantizeLinear", "DequantizeLinear"}


def inspect_json(capsys, *argv):
    assert main(["inspect", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def dynamic_batch_model(path):
    w = numpy_helper.from_array(np.arange(12, dtype=np.int8).reshape(4, 3), "w")
    zp = numpy_helper.from_array(np.uint8(128), "zp")
    node = helper.make_node("MatMulInteger", ["x", "w", "zp"], ["y"], name="mm")
    graph = helper.make_graph([node], "dyn",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, ["N", 3])],
                              [w, zp])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    return path


def test_text_lists_ops_shapes_quantization_and_what_was_not_folded(capsys):
    assert main(["inspect", str(EXAMPLES / "qdq_cnn.onnx")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("graph qdq_cnn: ")
    for text in ("im2col", "qmatmul", "requant", "maxpool", "int8[2x3x12x12]",
                 "per-channel axis=", "scale=", "w2_q/kxm        int8[72x8]"):
        assert text in out, text
    # Both convolutions, the depthwise one too, are in GEMM form: nothing is left unfolded.
    assert "not folded:" not in out and "qconv2d " not in out
    assert main(["inspect", str(EXAMPLES / "qdq_mlp_residual.onnx")]) == 0
    out = capsys.readouterr().out
    assert "not folded:\n  x_flat (Reshape): runs in float" in out


@pytest.mark.parametrize("model", ["qdq_cnn", "qdq_mlp_residual", "qop_mlp"])
def test_json_report_of_the_examples_is_integer_domain(model, capsys):
    report = inspect_json(capsys, str(EXAMPLES / f"{model}.onnx"))
    assert set(report) == {"name", "signature", "imported_nodes", "passes", "inputs",
                           "outputs", "nodes", "initializers", "not_folded"}
    ops = {n["op"] for n in report["nodes"]}
    assert not ops & ONNX_COMPUTE
    assert "requant" in ops and "qmatmul" in ops
    for node in report["nodes"]:
        for out in node["outputs"]:
            assert set(out) == {"name", "shape", "dtype", "quant"}
            if out["dtype"] in ("int8", "uint8"):
                assert out["quant"] is not None, out["name"]


def test_no_legalize_keeps_the_convolutions(capsys):
    report = inspect_json(capsys, str(EXAMPLES / "qdq_cnn.onnx"), "--no-legalize")
    assert [n["op"] for n in report["nodes"]].count("qconv2d") == 2
    assert not any(n["op"] == "im2col" for n in report["nodes"])


def test_reads_hwgen_json_graphs(tmp_path, capsys):
    b = GraphBuilder("tiny")
    x = b.input("x", (2, 4), "int8", quant=Quant(0.5, 1))
    w = b.const("w", np.ones((4, 3), np.int8), quant=Quant(0.25, 0))
    y = b.requant(b.op("Identity", b.qmatmul(x, w), name="id"), Quant(1.0, 0), scale=0.125)
    save_json(b.build([y]), tmp_path / "tiny.json")
    report = inspect_json(capsys, str(tmp_path / "tiny.json"))
    assert [n["op"] for n in report["nodes"]] == ["qmatmul", "requant"]  # Identity removed
    assert report["passes"] == ["identity"]
    assert report["inputs"] == [{"name": "x", "shape": [2, 4], "dtype": "int8",
                                 "quant": {"scale": [0.5], "zero_point": [1], "axis": None}}]


def test_input_shape_resolves_dynamic_dimensions(tmp_path, capsys):
    model = dynamic_batch_model(tmp_path / "dyn.onnx")
    report = inspect_json(capsys, str(model), "--input-shape", "x=5,4")
    assert report["inputs"][0]["shape"] == [5, 4]
    assert report["outputs"][0]["shape"] == [5, 3]
    assert [n["op"] for n in report["nodes"]] == ["qmatmul"]


def test_batch_sets_every_input_s_leading_dimension(capsys):
    path = Path(__file__).resolve().parents[1] / "examples" / "real" / "fc_autoencoder_qdq.onnx"
    report = inspect_json(capsys, str(path), "--batch", "4")
    assert report["inputs"][0]["shape"] == [4, 640]
    assert report["outputs"][0]["shape"] == [4, 640]


@pytest.mark.parametrize(("argv", "message"), [
    (["inspect", "/nonexistent/m.onnx"], "no ONNX model at /nonexistent/m.onnx"),
    (["inspect", "model.txt"], "model.txt is neither an ONNX model (.onnx) nor an hwgen JSON "
                               "graph (.json)"),
    (["inspect", "{dyn}"], "graph input 'x' has a dynamic shape ('N', 4); hwgen needs static "
                           "shapes"),
    (["inspect", "{dyn}", "--input-shape", "x=5,4", "--input-shape", "x=6,4"],
     "--input-shape names an input more than once"),
    (["inspect", "{dyn}", "--input-shape", "x=5,4", "--input-shape", "y=5,4"],
     "input_shapes names y, which are not graph inputs"),
    (["inspect", "{json}", "--input-shape", "x=1"], "--input-shape applies to ONNX models"),
    (["inspect", "{bad_json}"], "not valid JSON"),
])
def test_user_errors_are_one_line_with_status_2(argv, message, tmp_path, capsys):
    (tmp_path / "g.json").write_text(json.dumps({"format": "hwgen-graph", "version": 1,
                                                 "inputs": [], "outputs": [], "tensors": {},
                                                 "nodes": []}))
    (tmp_path / "bad.json").write_text("{")
    paths = {"dyn": str(dynamic_batch_model(tmp_path / "dyn.onnx")),
             "json": str(tmp_path / "g.json"), "bad_json": str(tmp_path / "bad.json")}
    assert main([a.format(**paths) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwgen: error:") and message in err, err
    assert "Traceback" not in err and err.count("\n") == 1


def test_a_malformed_input_shape_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["inspect", "m.onnx", "--input-shape", "x=1,a"])
    assert exc.value.code == 2
    assert "--input-shape takes NAME=D0,D1,... with non-negative integer dimensions" in \
        capsys.readouterr().err


def test_a_chain_of_20000_qdq_nodes_inspects(tmp_path, capsys):
    # Issue 29: import, the Q/DQ folding and its renames were each quadratic in the chain's
    # length (13 s for 1,000 nodes, minutes for 4,000); now this takes seconds
    # (bench/run.py's "inspect" section measures it).
    model = qdq_chain(20_000, tmp_path / "chain.onnx")
    assert main(["inspect", str(model)]) == 0
    assert capsys.readouterr().out.startswith(
        "graph qdq_chain: 2 nodes after the passes (20000 imported)")
