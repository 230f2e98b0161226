"""A Concat of quantized tensors becomes one integer ``qconcat`` (:mod:`fusion.passes.
concat_fold`), exact on every code against ONNX's definition, and joins the GEMM rows its
inputs were made of (:mod:`fusion.passes.concat_layout`).

The networks are ``q_i -> DQ -> Concat -> Q -> DQ`` (what ``quantize_static`` writes in QDQ)
and ``com.microsoft::QLinearConcat`` (its QOperator form), each input holding every code of
its type, so that the comparison is exhaustive; the reference is
:mod:`examples.exact_reference` (ONNX's evaluator).
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from examples.exact_reference import reference_session
from fusion.frontend import import_onnx
from fusion.passes import driver
from fusion.passes.concat_fold import rescale, table
from fusion.reference import executor

#: (scale, zero point) of each input and of the output: a copy (the output's own), a finer
#: and a coarser input, and an output scale exactly twice an input's (every odd code of it
#: lands on a half).
INPUTS = [(0.02, -3), (0.013, 5), (0.041, -20), (0.01, 0)]
OUTPUT = (0.02, -3)


def concat_model(dtype=TensorProto.INT8, qlinear: bool = False, inputs=INPUTS, output=OUTPUT
                 ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    np_type = np.int8 if dtype == TensorProto.INT8 else np.uint8
    info = np.iinfo(np_type)
    shift = 0 if np_type is np.int8 else 128
    codes = np.arange(info.min, info.max + 1).astype(np_type).reshape(1, 1, 16, 16)
    feeds, inits, nodes, parts = {}, [], [], []
    for i, (s, z) in enumerate(inputs):
        feeds[f"x{i}"] = np.broadcast_to(codes, (1, 2, 16, 16)).copy()
        inits += [numpy_helper.from_array(np.array(s, np.float32), f"s{i}"),
                  numpy_helper.from_array(np.array(z + shift, np_type), f"z{i}")]
        if not qlinear:
            nodes.append(helper.make_node("DequantizeLinear", [f"x{i}", f"s{i}", f"z{i}"],
                                          [f"d{i}"]))
        parts.append(i)
    inits += [numpy_helper.from_array(np.array(output[0], np.float32), "sy"),
              numpy_helper.from_array(np.array(output[1] + shift, np_type), "zy")]
    if qlinear:
        nodes.append(helper.make_node(
            "QLinearConcat", ["sy", "zy", *(f"{n}{i}" for i in parts for n in ("x", "s", "z"))],
            ["yq"], domain="com.microsoft", axis=1))
    else:
        nodes += [helper.make_node("Concat", [f"d{i}" for i in parts], ["cat"], axis=1),
                  helper.make_node("QuantizeLinear", ["cat", "sy", "zy"], ["yq"])]
    nodes.append(helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]))
    out_shape = (1, 2 * len(inputs), 16, 16)
    graph = helper.make_graph(
        nodes, "cat", [helper.make_tensor_value_info(n, dtype, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    opsets = [helper.make_opsetid("", 17)] + (
        [helper.make_opsetid("com.microsoft", 1)] if qlinear else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model, feeds


@pytest.mark.parametrize("variant", [{}, {"dtype": TensorProto.UINT8}, {"qlinear": True},
                                     {"output": (0.0005, 7)}])
def test_the_join_is_exact_on_every_code(variant):
    model, feeds = concat_model(**variant)
    graph = driver.optimize(import_onnx(model), legalize=False)
    ops = [n.op for n in graph.nodes]
    assert "qconcat" in ops and "Concat" not in ops and "QLinearConcat" not in ops
    node = next(n for n in graph.nodes if n.op == "qconcat")
    if "output" not in variant:  # input 0 is quantized as the output: a copy
        assert node.attr("mult")[0] == 1 << 30 and node.attr("shift")[0] == 30
    want = reference_session(model).run(["y"], feeds)[0]
    got = executor.run(graph, feeds)["y"]
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_the_exact_table_has_halves_that_float32_misrounds():
    """With an output scale exactly twice the input's, every odd code of the input is a half:
    the exact table rounds each to even, which the requantize reproduces."""
    s = np.float32(0.08913716)
    want = table("int8", float(s), -11, "int8", float(np.float32(2 * s)), 8)
    found = rescale(want, "int8", -11, "int8", 8, 0.5)
    assert found == (1 << 30, 31)
    odd = np.arange(-128, 128)[(np.arange(-128, 128) + 11) % 2 == 1]
    assert all((want[v + 128] - 8) % 2 == 0 for v in odd if -128 < want[v + 128] < 127)
    # float32, as onnxruntime divides, puts some of those halves a few ulps off
    f32 = np.rint((np.float32(odd + 11) * s) / np.float32(2 * s)) + 8
    assert (np.clip(f32, -128, 127) != want[odd + 128]).any()


def test_no_multiplier_for_a_table_no_requantize_gives():
    """A table that is not a rounded multiple of the codes has no multiplier, and then the
    pass leaves the Concat to the host."""
    want = table("int8", 0.02, 0, "int8", 0.03, 0)
    assert rescale(want, "int8", 0, "int8", 0, 0.02 / 0.03) is not None
    want[200] += 1
    assert rescale(want, "int8", 0, "int8", 0, 0.02 / 0.03) is None


def test_a_concat_whose_output_is_not_quantized_stays():
    model, feeds = concat_model()
    graph = model.graph
    keep = [n for n in graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
            or n.output[0] != "y" and n.output[0] != "yq"]
    for n in keep:
        if n.op_type == "Concat":
            n.output[0] = "y"
    del graph.node[:]
    graph.node.extend(keep)
    hw = driver.optimize(import_onnx(model), legalize=False)
    assert "Concat" in [n.op for n in hw.nodes] and "qconcat" not in [n.op for n in hw.nodes]


def test_joins_of_convolutions_join_their_rows():
    """SqueezeNet's fire modules: after legalization each join reads the GEMM rows of its
    two convolutions and the next convolution reads its rows (no NCHW layout change between)."""
    from pathlib import Path

    zoo = Path(__file__).resolve().parents[3] / "examples" / "zoo"
    graph = driver.optimize(import_onnx(onnx.load(str(zoo / "squeezenet_qdq.onnx"))))
    joins = [n for n in graph.nodes if n.op == "qconcat"]
    assert len(joins) == 8
    for node in joins:
        assert node.attr("axis") == 2 and len(graph.tensors[node.outputs[0]].shape) == 3
        assert all(graph.producer(x).op == "requant" for x in node.inputs)


def test_a_join_with_a_host_input_joins_rows_too():
    """ShuffleNet's stride-2 units join a host average pool (NCHW) with a convolution: the
    pool's output gets its rows from a pointwise ``im2col`` and the join reads rows, so the
    stream after it stays in the GEMMs' layout (no NCHW tensor between the next kernels)."""
    from pathlib import Path

    zoo = Path(__file__).resolve().parents[3] / "examples" / "zoo"
    graph = driver.optimize(import_onnx(onnx.load(str(zoo / "shufflenet_qdq.onnx"))))
    joins = [n for n in graph.nodes if n.op == "qconcat"]
    assert len(joins) == 2
    for node in joins:
        assert node.attr("axis") == 2 and len(graph.tensors[node.outputs[0]].shape) == 3
        makers = [graph.producer(x) for x in node.inputs]
        assert sorted(m.op for m in makers) == ["im2col", "requant"]
        (cols,) = [m for m in makers if m.op == "im2col"]
        assert cols.attr("kernel_shape") == (1, 1)
        assert graph.tensors[cols.outputs[0]].quant == graph.tensors[cols.inputs[0]].quant
