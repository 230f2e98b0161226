"""ONNX import: node-for-node structure, Quant annotations, static shapes, and error messages."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusion.frontend import import_onnx
from fusion.ir.graph import GraphError, Quant
from fusion.reference import executor


def model(nodes, inputs, outputs, inits=(), opset=21):
    graph = helper.make_graph(nodes, "m", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def qdq_matmul(x_shape=(2, 4), w=None, w_zp_dtype=np.int8):
    """x -> Q -> DQ -> MatMul(DQ(w)) -> Q: the smallest QDQ pattern."""
    w = np.ones((4, 3), np.int8) if w is None else w
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], name="dqw", axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["mm"], name="mm"),
        helper.make_node("QuantizeLinear", ["mm", "ys", "yz"], ["y"], name="qy"),
    ]
    inits = [("xs", np.float32(0.5)), ("xz", np.uint8(128)), ("w", w),
             ("ws", np.array([0.1, 0.2, 0.3], np.float32)),
             ("wz", np.zeros(3, w_zp_dtype)), ("ys", np.float32(0.25)), ("yz", np.int8(-1))]
    return model(nodes, [vi("x", TensorProto.FLOAT, x_shape)],
                 [vi("y", TensorProto.INT8, None)], inits)


def test_qdq_is_imported_node_for_node_with_quant_annotations():
    g = import_onnx(qdq_matmul())
    assert [n.op for n in g.topo_order()] == ["QuantizeLinear", "DequantizeLinear",
                                              "DequantizeLinear", "MatMul", "QuantizeLinear"]
    assert g.node("qx").inputs == ("x", "xs", "xz")  # scales and zero points stay inputs
    assert g.tensors["xq"].quant == Quant(0.5, 128)
    f32 = np.array([0.1, 0.2, 0.3], np.float32)  # the stored float32 values, widened exactly
    assert g.tensors["w"].quant == Quant(tuple(f32.tolist()), (0, 0, 0), axis=1)
    assert g.tensors["y"].quant == Quant(0.25, -1)
    assert g.tensors["mm"].quant is None and g.tensors["mm"].shape == (2, 3)
    assert g.tensors["y"].dtype == "int8"


def test_qoperator_annotations_include_the_bias_of_qlinearconv():
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                              ["y"], name="conv", pads=[1, 1, 1, 1])]
    inits = [("xs", np.float32(0.5)), ("xz", np.uint8(3)),
             ("w", np.ones((2, 1, 3, 3), np.int8)), ("ws", np.array([0.1, 0.2], np.float32)),
             ("wz", np.zeros(2, np.int8)), ("ys", np.float32(1.0)), ("yz", np.uint8(5)),
             ("b", np.array([7, -7], np.int32))]
    g = import_onnx(model(nodes, [vi("x", TensorProto.UINT8, (1, 1, 4, 4))],
                          [vi("y", TensorProto.UINT8, None)], inits))
    assert g.tensors["x"].quant == Quant(0.5, 3)
    assert g.tensors["w"].quant.axis == 0
    # x_scale * w_scale, exact in float64
    bias_scale = np.float64(np.float32(0.5)) * np.array([0.1, 0.2], np.float32).astype(float)
    assert g.tensors["b"].quant == Quant(tuple(bias_scale), (0, 0), axis=0)
    assert g.tensors["y"].shape == (1, 2, 4, 4) and g.tensors["y"].quant == Quant(1.0, 5)


def test_matmulinteger_operands_get_a_unit_scale():
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"], name="mmi")]
    g = import_onnx(model(nodes, [vi("a", TensorProto.UINT8, (2, 4))],
                          [vi("y", TensorProto.INT32, None)],
                          [("b", np.ones((4, 3), np.int8)), ("az", np.uint8(7))]))
    assert g.tensors["a"].quant == Quant(1.0, 7)
    assert g.tensors["b"].quant == Quant(1.0, 0)
    out = executor.run(g, {"a": np.full((2, 4), 9, np.uint8)})["y"]
    np.testing.assert_array_equal(out, np.full((2, 3), 8, np.int32))


def test_constant_nodes_become_initializers():
    shape = helper.make_node("Constant", [], ["shape"], name="c",
                             value=numpy_helper.from_array(np.array([4, 2], np.int64)))
    nodes = [shape, helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    g = import_onnx(model(nodes, [vi("x", TensorProto.FLOAT, (2, 4))],
                          [vi("y", TensorProto.FLOAT, None)]))
    assert [n.op for n in g.nodes] == ["Reshape"] and "shape" in g.initializers
    assert g.tensors["y"].shape == (4, 2)


def test_dynamic_shapes_are_refused_unless_given():
    m = qdq_matmul(x_shape=("batch", 4))
    with pytest.raises(GraphError, match=r"graph input 'x' has a dynamic shape \('batch', 4\); "
                                         r"hwgen needs static shapes: pass "
                                         r"input_shapes=\{'x': \(...\)\} \(CLI: --input-shape "
                                         r"x=D0,D1,...\)"):
        import_onnx(m)
    g = import_onnx(m, input_shapes={"x": (5, 4)})
    assert g.tensors["y"].shape == (5, 3)
    with pytest.raises(GraphError, match=r"input_shapes gives \(5, 3\) for 'x', which the model "
                                         r"declares as \('batch', 4\)"):
        import_onnx(m, input_shapes={"x": (5, 3)})
    with pytest.raises(GraphError, match="input_shapes names z, which are not graph inputs"):
        import_onnx(m, input_shapes={"x": (5, 4), "z": (1,)})


def test_unsupported_op_names_the_node_and_the_supported_ops():
    nodes = [helper.make_node("Tanh", ["x"], ["y"], name="th")]
    m = model(nodes, [vi("x", TensorProto.FLOAT, (2,))], [vi("y", TensorProto.FLOAT, None)])
    with pytest.raises(GraphError, match="node 'th' is Tanh, which hwgen does not support; "
                                         "supported ONNX ops are Add, AveragePool, "
                                         "BatchNormalization, Clip, Concat, Conv"):
        import_onnx(m)


def test_custom_domains_are_refused():
    nodes = [helper.make_node("QGemm", ["x"], ["y"], name="qg", domain="com.example")]
    m = model(nodes, [vi("x", TensorProto.FLOAT, (2,))], [vi("y", TensorProto.FLOAT, None)])
    with pytest.raises(GraphError, match="node 'qg' is com.example::QGemm, which hwgen does not "
                                         "support; hwgen imports the standard ONNX ops Add, "):
        import_onnx(m)


def test_missing_initializer():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = model(nodes, [vi("x", TensorProto.FLOAT, (2, 4))], [vi("y", TensorProto.FLOAT, None)])
    with pytest.raises(GraphError, match=r"node 'mm' \(MatMul\) reads 'w', which is no graph "
                                         r"input, initializer or node output: missing "
                                         r"initializer; add 'w' to the model's initializers"):
        import_onnx(m)


def test_dtype_mismatch_of_a_declared_output():
    m = qdq_matmul()
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.UINT8
    with pytest.raises(GraphError, match="graph output 'y' is declared uint8 but computes as "
                                         "int8: dtype mismatch"):
        import_onnx(m)


def test_uint8_weights_import_and_other_weights_are_refused():
    m = qdq_matmul(w=np.ones((4, 3), np.uint8), w_zp_dtype=np.uint8)
    assert import_onnx(m).tensors["w"].dtype == "uint8"  # folded to int8 by the passes
    m = qdq_matmul(w=np.ones((4, 3), np.int32), w_zp_dtype=np.int32)
    with pytest.raises(GraphError, match=r"node 'mm' \(MatMul\) has int32 weights 'w' \(through "
                                         r"'dqw'\) in 'B'; hwgen multiplies 8-bit weights"):
        import_onnx(m)


def test_unsupported_element_type():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    m = model(nodes, [vi("x", TensorProto.FLOAT16, (2,))], [vi("y", TensorProto.FLOAT16, None)])
    with pytest.raises(GraphError, match="tensor 'x' has element type FLOAT16; hwgen supports "
                                         "float32, uint8, int8, int32, int64"):
        import_onnx(m)


def test_cycle():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="r1"),
             helper.make_node("Relu", ["a"], ["b"], name="r2")]
    m = model(nodes, [], [vi("b", TensorProto.FLOAT, (2,))])
    with pytest.raises(GraphError, match="the graph has a cycle through nodes r1, r2"):
        import_onnx(m)


def test_conflicting_quantization_of_one_tensor():
    nodes = [helper.make_node("DequantizeLinear", ["x", "s1"], ["a"], name="dq1"),
             helper.make_node("DequantizeLinear", ["x", "s2"], ["b"], name="dq2"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    m = model(nodes, [vi("x", TensorProto.UINT8, (2,))], [vi("y", TensorProto.FLOAT, None)],
              [("s1", np.float32(0.5)), ("s2", np.float32(0.25))])
    with pytest.raises(GraphError, match=r"tensor 'x' is quantized with scale \[0.5\], zero "
                                         r"point \[0\] by node 'dq1' but with scale \[0.25\]"):
        import_onnx(m)


def test_unreadable_files(tmp_path):
    with pytest.raises(GraphError, match="no ONNX model at"):
        import_onnx(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(GraphError, match="is not a readable ONNX model"):
        import_onnx(bad)


def test_import_from_a_path_runs_like_the_reference(tmp_path):
    from onnx.reference import ReferenceEvaluator

    path = tmp_path / "m.onnx"
    onnx.save(qdq_matmul(), str(path))
    x = np.random.default_rng(0).normal(0, 10, (2, 4)).astype(np.float32)
    got = executor.run(import_onnx(path), {"x": x})["y"]
    np.testing.assert_array_equal(got, ReferenceEvaluator(str(path)).run(None, {"x": x})[0])


def test_old_clip_attributes_become_inputs():
    nodes = [helper.make_node("Clip", ["x"], ["y"], name="c", min=-1.0, max=2.0)]
    m = model(nodes, [vi("x", TensorProto.FLOAT, (3,))], [vi("y", TensorProto.FLOAT, None)],
              opset=6)
    g = import_onnx(m)
    assert g.node("c").inputs == ("x", "c_min", "c_max")
    got = executor.run(g, {"x": np.array([-5, 0, 5], np.float32)})["y"]
    np.testing.assert_array_equal(got, [-1, 0, 2])


def test_softmax_of_an_old_opset_is_refused():
    """Before opset 13, Softmax flattened its input to 2-D at axis; hwgen has one-axis
    Softmax only, and says so rather than compute something else."""
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=1)], "sm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    old = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(GraphError, match=r"Softmax of opset 11.*opset 13 or later"):
        import_onnx(old)
    new = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert import_onnx(new).nodes[0].op == "Softmax"


def _waves(nodes, available):
    """The importer's order as it was first written: peel the ready nodes off, wave by wave
    (nodes x depth: minutes for a 20,000-node chain), kept here as the specification."""
    order, done, pending = [], set(available), list(nodes)
    while pending:
        ready = [n for n in pending if all(not i or i in done for i in n.inputs)]
        order += ready
        done.update(o for n in ready for o in n.outputs)
        pending = [n for n in pending if n not in ready]
    return order


def test_the_import_order_is_by_wave_then_stored_order():
    from fusion.frontend.onnx_import import _topo_sort
    from fusion.ir.graph import Node

    rng = np.random.default_rng(29)
    for _ in range(50):
        count = int(rng.integers(1, 40))
        nodes = []
        for i in range(count):  # each reads the input or earlier outputs, some twice
            reads = rng.integers(-1, i, size=int(rng.integers(1, 4)))
            nodes.append(Node(f"n{i}", "Relu", tuple("x" if r < 0 else f"t{r}" for r in reads),
                              (f"t{i}",)))
        shuffled = [nodes[i] for i in rng.permutation(count)]
        assert _topo_sort(shuffled, {"x"}) == _waves(shuffled, {"x"})
