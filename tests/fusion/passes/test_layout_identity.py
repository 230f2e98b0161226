"""Layout chains that are identities: before/expected graphs, near misses left alone, and an
ONNX model of pointwise convolutions against onnxruntime before and after."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusion.compiler.plan import HostStep, compile_model
from fusion.frontend import import_onnx
from fusion.frontend.load import load_model
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import add_layout, conv_legalize, dce, layout_identity, weight_zero_point
from fusion.passes.driver import optimize, prune_pipeline, run_to_fixed_point
from fusion.reference import executor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from tests.fusion.references import lsb_errors, session
from tests.fusion.test_real_models import REAL
from tests.helpers.pass_testing import assert_graphs_equal, assert_unchanged

Q = Quant(0.1, -2)
W = np.arange(-16, 16, dtype=np.int8).reshape(8, 4)


def run_and_dce(graph):
    """The pass, then DCE (which drops the bypassed chain), as the pipeline runs them."""
    out, changed = layout_identity.run(graph)
    return dce.run(out)[0], changed


def gemm_rows_to_pointwise(perm=(0, 2, 1), nchw=(1, 8, 6, 6), y_shape=(1, 36, 8), *,
                           kernel=(1, 1), w=W, graph_output_transpose=False,
                           im2col_quant=None, **im2col):
    """GEMM rows ``y`` -> transpose -> reshape to NCHW -> im2col -> qmatmul, as conv
    legalization leaves a pointwise convolution after another one."""
    b = GraphBuilder("g")
    y = b.input("y", y_shape, "int8", quant=Q)
    t = b.transpose(y, perm, name="t")
    r = b.reshape(t, nchw, name="r", **({"quant": im2col_quant} if im2col_quant else {}))
    cols = b.im2col(r, kernel, name="cols", **im2col)
    wt = b.const("w", w, quant=Quant(0.02, 0))
    mm = b.qmatmul(cols, wt, name="mm")
    return b.build([mm, t] if graph_output_transpose else [mm])


def test_a_pointwise_im2col_of_the_previous_gemms_rows_reads_the_rows():
    before = gemm_rows_to_pointwise()
    e = GraphBuilder("g")
    y = e.input("y", (1, 36, 8), "int8", quant=Q)
    e.qmatmul(y, e.const("w", W, quant=Quant(0.02, 0)), name="mm")
    expected = e.build(["mm"])
    got, changed = run_and_dce(before)
    assert changed
    assert_graphs_equal(got, expected)
    assert_unchanged(layout_identity.run, got)
    x = np.random.default_rng(0).integers(-128, 128, (1, 36, 8)).astype(np.int8)
    np.testing.assert_array_equal(executor.run(got, {"y": x})["mm"],
                                  executor.run(before, {"y": x})["mm"])


@pytest.mark.parametrize("graph", [
    pytest.param(lambda: gemm_rows_to_pointwise(strides=(2, 2)), id="stride 2"),
    pytest.param(lambda: gemm_rows_to_pointwise(pads=(1, 1, 1, 1)), id="pad 1"),
    pytest.param(lambda: gemm_rows_to_pointwise(pads=(0, 0, 1, 1), strides=(2, 2)),
                 id="pad 0 0 1 1, stride 2"),
    # the same shapes as a pointwise one (2x2 -> 2x2), but rows 0 and 2: only attributes tell
    pytest.param(lambda: gemm_rows_to_pointwise(nchw=(1, 8, 2, 2), y_shape=(1, 4, 8),
                                                pads=(0, 0, 1, 1), strides=(2, 2)),
                 id="stride 2 padded to the same shape"),
    pytest.param(lambda: gemm_rows_to_pointwise(dilations=(2, 2)), id="dilation 2"),
    pytest.param(lambda: gemm_rows_to_pointwise(kernel=(3, 3), pads=(1, 1, 1, 1),
                                                w=np.ones((72, 4), np.int8)), id="3x3"),
    pytest.param(lambda: gemm_rows_to_pointwise(im2col_quant=Quant(0.2, -2)),
                 id="requantized annotation"),
])
def test_near_misses_are_left_alone(graph):
    assert_unchanged(layout_identity.run, graph())


def test_another_permutation_with_the_same_shapes_is_left_alone():
    # Shapes agree all the way, but without the (0, 2, 1) transpose the rows come out
    # transposed: only the element indices tell. (The identity transpose itself may go.)
    before = gemm_rows_to_pointwise(perm=(0, 1, 2), nchw=(1, 4, 2, 2), y_shape=(1, 4, 4),
                                    w=W[:4])
    got, _ = run_and_dce(before)
    assert got.producer(got.node("mm").inputs[0]).op == "im2col"
    x = np.random.default_rng(1).integers(-128, 128, (1, 4, 4)).astype(np.int8)
    np.testing.assert_array_equal(executor.run(got, {"y": x})["mm"],
                                  executor.run(before, {"y": x})["mm"])


def test_a_transpose_that_is_also_a_graph_output_stays():
    before = gemm_rows_to_pointwise(graph_output_transpose=True)
    e = GraphBuilder("g")
    y = e.input("y", (1, 36, 8), "int8", quant=Q)
    t = e.transpose(y, (0, 2, 1), name="t")
    mm = e.qmatmul(y, e.const("w", W, quant=Quant(0.02, 0)), name="mm")
    expected = e.build([mm, t])
    got, changed = run_and_dce(before)
    assert changed
    assert_graphs_equal(got, expected)
    assert [(o, got.tensors[o].shape) for o in got.outputs] == \
        [(o, before.tensors[o].shape) for o in before.outputs]


def test_a_chain_ending_in_a_graph_output_keeps_its_name():
    b = GraphBuilder("g")
    y = b.input("y", (1, 36, 8), "int8", quant=Q)
    r = b.reshape(b.transpose(y, (0, 2, 1), name="t"), (1, 8, 6, 6), name="r")
    cols = b.im2col(r, (1, 1), name="cols")
    b.relu(cols, name="out")
    assert_unchanged(layout_identity.run, b.build(["cols", "out"]))


def test_reshapes_back_to_the_rows_between_two_gemms_go():
    b = GraphBuilder("g")
    x = b.input("x", (1, 1, 16), "int8", quant=Q)
    y = b.qmatmul(x, b.const("w1", np.ones((16, 8), np.int8), quant=Quant(0.02, 0)),
                  name="mm1")
    y = b.requant(y, Quant(0.3, 1), name="rq", round_even=True)
    shape = b.const("shape", np.array([1, 8], np.int64))
    s = b.op("Reshape", y, shape, name="sq", quant=b.tensor(y).quant)
    f = b.flatten(b.op("Flatten", s, name="fl1", axis=0, quant=b.tensor(y).quant), 2,
                  name="fl")
    back = b.op("Identity", b.reshape(f, (1, 1, 8), name="r"), name="id",
                quant=b.tensor(y).quant)
    b.qmatmul(back, b.const("w2", W, quant=Quant(0.02, 0)), name="mm2")
    before = b.build(["mm2"])
    got, changed = run_and_dce(before)
    assert changed
    assert [n.op for n in got.topo_order()] == ["qmatmul", "requant", "qmatmul"]
    assert got.node("mm2").inputs[0] == "rq"


def test_a_reshape_to_another_shape_stays():
    b = GraphBuilder("g")
    y = b.input("y", (1, 1, 8), "int8", quant=Q)
    r = b.reshape(y, (1, 8), name="r")
    b.qmatmul(r, b.const("w", W, quant=Quant(0.02, 0)), name="mm")
    assert_unchanged(layout_identity.run, b.build(["mm"]))


# -- an ONNX model against onnxruntime --------------------------------------------------------

def _qlinear_conv(rng, name, x, cin, cout, xs, kernel=1, **attrs):
    """A QLinearConv node ``name`` (int8 in and out) and its initializers."""
    ys = f"{name}_s"
    inits = {f"{name}_w": rng.integers(-100, 101, (cout, cin, kernel, kernel), dtype=np.int8),
             f"{name}_ws": np.float32(rng.uniform(0.004, 0.01)), f"{name}_wz": np.int8(0),
             ys: np.float32(rng.uniform(0.05, 0.1)), f"{name}_z": np.int8(rng.integers(-5, 6)),
             f"{name}_b": rng.integers(-500, 500, cout, dtype=np.int32)}
    node = helper.make_node(
        "QLinearConv", [x, f"{xs}_s", f"{xs}_z", f"{name}_w", f"{name}_ws", f"{name}_wz", ys,
                        f"{name}_z", f"{name}_b"], [name], name=name, **attrs)
    return node, inits


def pointwise_model():
    """x -> 3x3 conv, then 1x1 convs: plain (twice), stride 2, padded, plain again."""
    rng = np.random.default_rng(5)
    inits = {"x_s": np.float32(0.03), "x_z": np.int8(1)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"], name="xq")]
    layers = [("c0", 3, 8, dict(kernel=3, pads=[1, 1, 1, 1])), ("pw1", 8, 12, {}),
              ("pw2", 12, 8, {}), ("s2", 8, 8, dict(strides=[2, 2])),
              ("pad", 8, 8, dict(pads=[1, 1, 1, 1])), ("pw3", 8, 6, {})]
    prev, prev_s = "xq", "x"
    for name, cin, cout, attrs in layers:
        node, more = _qlinear_conv(rng, name, prev, cin, cout, prev_s, **attrs)
        nodes.append(node)
        inits.update(more)
        prev = prev_s = name
    nodes.append(helper.make_node("DequantizeLinear", [prev, f"{prev}_s", f"{prev}_z"], ["y"],
                                  name="y"))
    graph = helper.make_graph(
        nodes, "pointwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 6, 6, 6))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    return model


def _without_layout_identity(graph):
    legalize = (conv_legalize.run, weight_zero_point.run, add_layout.run, dce.run)
    graph = run_to_fixed_point(graph, prune_pipeline())
    return run_to_fixed_point(run_to_fixed_point(graph, legalize), prune_pipeline())


def test_pointwise_convolutions_read_gemm_rows_and_match_the_reference_before_and_after(
        tmp_path):
    proto = pointwise_model()
    onnx.save(proto, str(tmp_path / "pointwise.onnx"))
    after = optimize(import_onnx(proto), legalize=True)
    before = _without_layout_identity(import_onnx(proto))
    im2cols = {n.name.split("/")[0] for n in after.nodes if n.op == "im2col"}
    # pw1, pw2 and pw3 read the rows of the GEMM before them; the others keep their windows
    assert im2cols == {"c0", "s2", "pad"}
    assert {n.name.split("/")[0] for n in before.nodes if n.op == "im2col"} == \
        {"c0", "pw1", "pw2", "s2", "pad", "pw3"}
    ort = session(tmp_path / "pointwise.onnx")
    errors = {"before": [], "after": []}
    for seed in range(8):
        x = np.random.default_rng(seed).normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
        (want,) = ort.run(["y"], {"x": x})
        for label, graph in (("before", before), ("after", after)):
            errors[label].append(lsb_errors(executor.run(graph, {"x": x})["y"], want,
                                            _scale(proto)))
    for label, found in errors.items():
        found = np.concatenate(found)
        assert np.abs(found).max() <= 1 and np.mean(found == 0) >= 0.99, label
    np.testing.assert_array_equal(np.concatenate(errors["after"]),
                                  np.concatenate(errors["before"]))


def _scale(proto):
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    return float(inits["pw3_s"])


def _pointwise_convs(model):
    return sum(1 for n in model.graph.node if n.op_type == "Conv"
               and [a.ints for a in n.attribute if a.name == "kernel_shape"] == [[1, 1]])


@pytest.mark.parametrize("name", ["mobilenet_v1_025_qdq", "ds_cnn_qdq"])
def test_real_models_run_no_pointwise_im2col_on_the_host(name):
    """Every pointwise convolution of the model (stride 1, no padding in these models) reads
    the GEMM rows of the one before: no 1x1 im2col is left among the host steps."""
    path = REAL / f"{name}.onnx"
    config = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)
    steps = compile_model(load_model(path), config).steps
    host = [s.node for s in steps if isinstance(s, HostStep)]
    kernels = {tuple(n.attr("kernel_shape")) for n in host if n.op == "im2col"}
    assert (1, 1) not in kernels
    assert _pointwise_convs(onnx.load(str(path))) > 0
