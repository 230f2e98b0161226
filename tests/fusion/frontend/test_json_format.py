"""The hwgen JSON graph format: round trip, version check, and errors that name the place."""

import json

import numpy as np
import pytest

from fusion.frontend.json_format import (
    VERSION,
    GraphFormatError,
    from_dict,
    load_json,
    save_json,
    to_dict,
)
from fusion.ir.graph import Graph, Node, Quant, Tensor


def sample_graph() -> Graph:
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (4, 3), dtype=np.int8)
    b = rng.integers(-1000, 1000, (3,), dtype=np.int32)
    tensors = {
        "x": Tensor("x", (2, 4), "int8", Quant(0.05, -3)),
        "w": Tensor("w", (4, 3), "int8", Quant((0.01, 0.02, 0.03), (0, 0, 0), axis=1)),
        "b": Tensor("b", (3,), "int32"),
        "acc": Tensor("acc", (2, 3), "int32"),
        "biased": Tensor("biased", (2, 3), "int32"),
        "y": Tensor("y", (2, 3), "int8", Quant(0.1, 0)),
        "f": Tensor("f", (2, 3), "float32"),
    }
    nodes = [
        Node("mm", "qmatmul", ("x", "w"), ("acc",)),
        Node("ba", "bias_add", ("acc", "b"), ("biased",)),
        Node("rq", "requant", ("biased",), ("y",),
             {"multiplier": (1 << 30, 1 << 29, 3), "shift": (31, 30, 2), "zero_point": 0,
              "note": "per channel", "flag": True, "ratio": 0.25, "empty": (), "none": None}),
        Node("dq", "dequantize", ("y",), ("f",)),
    ]
    return Graph(nodes, tensors, ("x",), ("f",), {"w": w, "b": b}, name="mlp")


def test_round_trip_is_structurally_equal_with_the_same_signature(tmp_path):
    g = sample_graph()
    save_json(g, tmp_path / "g.json")
    back = load_json(tmp_path / "g.json")
    assert back.structurally_equal(g)
    assert back.signature() == g.signature()
    assert back.name == "mlp"
    assert back.initializers["w"].dtype == np.int8
    assert back.node("rq").attr("ratio") == 0.25 and back.node("rq").attr("flag") is True
    assert back.node("rq").attr("empty") == () and back.node("rq").attr("none") is None
    assert back.tensor("w").quant == g.tensor("w").quant


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int16", "int64", "float16", "float64"])
def test_initializer_dtypes_round_trip_bit_for_bit(dtype):
    a = (np.arange(-6, 6) * 7).astype(dtype).reshape(3, 2, 2)
    g = Graph([], {"c": Tensor("c", (3, 2, 2), "int64")}, (), ("c",), {"c": a})
    back = from_dict(json.loads(json.dumps(to_dict(g))))
    assert back.initializers["c"].dtype == a.dtype
    assert back.initializers["c"].tobytes() == a.tobytes()


def test_data_is_little_endian_base64():
    g = Graph([], {"c": Tensor("c", (2,), "int32")}, (), ("c",),
              {"c": np.array([1, -2], dtype=">i4")})
    entry = to_dict(g)["initializers"]["c"]
    assert entry == {"dtype": "int32", "shape": [2], "data": "AQAAAP7///8="}


def test_a_newer_version_is_refused_with_the_fix(tmp_path):
    data = to_dict(sample_graph())
    data["version"] = VERSION + 1
    path = tmp_path / "new.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GraphFormatError, match=rf"format version {VERSION + 1}, but this hwgen "
                                               rf"reads versions 1 to {VERSION}.*upgrade hwgen"):
        load_json(path)


def _broken(edit):
    data = to_dict(sample_graph())
    edit(data)
    return data


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(format="onnx"), r"format: this is not an hwgen graph file"),
    (lambda d: d.pop("version"), r"top level: missing key 'version'"),
    (lambda d: d.update(version="1"), r"top level.version: expected an integer, not str"),
    (lambda d: d.pop("nodes"), r"top level: missing key 'nodes'"),
    (lambda d: d["nodes"][1].pop("op"), r"nodes\[1\]: missing key 'op'"),
    (lambda d: d["nodes"][0].update(inputs=["x", 3]), r"nodes\[0\].inputs\[1\]: expected a "
                                                      r"tensor name"),
    (lambda d: d["nodes"][2]["attrs"].update(bad={"a": 1}), r"nodes\[2\].attrs.bad: attribute "
                                                            r"values are"),
    (lambda d: d["tensors"]["x"].update(shape=[2, "4"]), r"tensors.x.shape\[1\]: expected an "
                                                         r"integer"),
    (lambda d: d["tensors"]["x"].update(dtype="int4"), r"tensors.x: tensor 'x' has dtype 'int4'"),
    (lambda d: d["tensors"]["x"]["quant"].update(scale=[-1.0]),
     r"tensors.x.quant: quantization scales must be positive"),
    (lambda d: d["initializers"]["w"].update(data="!!"), r"initializers.w.data: is not valid "
                                                         r"base64"),
    (lambda d: d["initializers"]["w"].update(shape=[4, 4]),
     r"initializers.w.data: holds 12 bytes, but shape \[4, 4\] of int8 needs 16"),
    (lambda d: d["initializers"]["w"].update(dtype="object"), r"initializers.w.dtype: unknown "
                                                              r"dtype 'object'"),
    (lambda d: d["tensors"].pop("acc"), r"tensor 'acc' is used but not declared"),
    (lambda d: d["initializers"].pop("b"), r"node 'ba' reads 'b'.*missing initializer"),
])
def test_malformed_files_name_what_is_wrong(edit, message):
    with pytest.raises(GraphFormatError, match=message):
        from_dict(_broken(edit), "g.json")


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(GraphFormatError, match=r"bad.json: not valid JSON"):
        load_json(path)
    path.write_text('{"format": "hwgen-graph", "version": NaN}')
    with pytest.raises(GraphFormatError, match=r"NaN is not a JSON value"):
        load_json(path)
    with pytest.raises(FileNotFoundError, match=r"no graph file at .*missing.json"):
        load_json(tmp_path / "missing.json")


def test_non_finite_attributes_are_refused_on_save(tmp_path):
    g = Graph([Node("c", "clamp", ("x",), ("y",), {"hi": float("inf")})],
              {"x": Tensor("x", (1,), "int32"), "y": Tensor("y", (1,), "int32")}, ("x",), ("y",))
    with pytest.raises(GraphFormatError, match=r"node 'c' attribute 'hi' holds inf"):
        save_json(g, tmp_path / "g.json")


@pytest.mark.parametrize("model", ["qdq_cnn", "qdq_mlp_residual", "qop_mlp"])
@pytest.mark.parametrize("optimized", [False, True], ids=["imported", "optimized"])
def test_example_models_round_trip(model, optimized, tmp_path):
    from pathlib import Path

    from fusion.frontend import import_onnx
    from fusion.passes.driver import optimize

    examples = Path(__file__).resolve().parents[3] / "examples"
    g = import_onnx(examples / f"{model}.onnx")
    g = optimize(g) if optimized else g
    save_json(g, tmp_path / "g.json")
    back = load_json(tmp_path / "g.json")
    assert back.structurally_equal(g) and back.signature() == g.signature()
