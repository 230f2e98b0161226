"""The op catalog and graph validation: each error message names the node and the fix."""

from fractions import Fraction

import numpy as np
import pytest

from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Quant, Tensor
from fusion.ir.registry import register
from fusion.ir.validation import validate


def graph(nodes, tensors, inputs, outputs, consts=None):
    return Graph(nodes=nodes, tensors={t.name: t for t in tensors}, inputs=inputs,
                 outputs=outputs, initializers=consts or {})


def mlp(*, w_dtype="int8", x_dtype="int8", acc_dtype="int32", zp=0, requant_zp=0):
    """x @ w -> requant, with knobs to break it."""
    w = np.ones((4, 3), w_dtype)
    return graph(
        (Node("mm", "qmatmul", ("x", "w"), ("acc",)),
         Node("rq", "requant", ("acc",), ("y",), ops.requant_attrs(0.01, requant_zp))),
        (Tensor("x", (2, 4), x_dtype, Quant(0.1, zp)), Tensor("w", (4, 3), w_dtype),
         Tensor("acc", (2, 3), acc_dtype),
         Tensor("y", (2, 3), "int8", Quant(0.1, min(max(requant_zp, -128), 127)))),
        ("x",), ("y",), {"w": w})


def test_a_good_graph_validates():
    validate(mlp())


def test_unsupported_op_lists_the_supported_ones():
    g = graph((Node("th", "Tanh", ("x",), ("y",)),),
              (Tensor("x", (2,), "float32"), Tensor("y", (2,), "float32")), ("x",), ("y",))
    with pytest.raises(GraphError) as info:
        validate(g)
    assert str(info.value).startswith("node 'th': op 'Tanh' is not supported; supported ops "
                                      "are Add, AveragePool, BatchNormalization, Clip, Concat,")
    assert "qmatmul" in str(info.value) and "requant" in str(info.value)


def test_lookup_error_lists_supported_ops():
    with pytest.raises(GraphError, match="op 'Gelu' is not supported; supported ops are Add"):
        ops.get("Gelu")


def test_dtype_mismatch_of_an_input():
    with pytest.raises(GraphError, match=r"node 'mm' \(qmatmul\): input 'a' \('x'\) is float32, "
                                         r"but qmatmul takes int8 or uint8"):
        validate(mlp(x_dtype="float32"))


def test_dtype_mismatch_of_a_declared_output():
    with pytest.raises(GraphError, match=r"node 'mm' \(qmatmul\) produces int32, but its output "
                                         r"'acc' is declared int8: dtype mismatch; declare it "
                                         r"int32"):
        validate(mlp(acc_dtype="int8"))


def test_dtype_mismatch_between_operands():
    g = graph((Node("add", "Add", ("a", "b"), ("y",)),),
              (Tensor("a", (2,), "float32"), Tensor("b", (2,), "int8"),
               Tensor("y", (2,), "float32")), ("a", "b"), ("y",))
    with pytest.raises(GraphError, match=r"node 'add' \(Add\): input 'B' \('b'\) is int8 but "
                                         r"'A' \('a'\) is float32; they must match"):
        validate(g)


def test_missing_initializer_for_a_constant_input():
    g = graph((Node("q", "QuantizeLinear", ("x", "s"), ("y",)),),
              (Tensor("x", (2,), "float32"), Tensor("s", (), "float32"),
               Tensor("y", (2,), "uint8")), ("x", "s"), ("y",))
    with pytest.raises(GraphError, match=r"node 'q' \(QuantizeLinear\) needs its input 'y_scale' "
                                         r"\('s'\) to be a constant initializer, but it is a "
                                         r"graph input: missing initializer; store 's' as an "
                                         r"initializer"):
        validate(g)


def test_missing_initializer_that_nothing_provides_is_refused_by_the_ir():
    with pytest.raises(GraphError, match="node 'mm' reads 'w', which no node produces .* "
                                         r"\(a missing initializer\?\)"):
        graph((Node("mm", "qmatmul", ("x", "w"), ("y",)),),
              (Tensor("x", (2, 4), "int8"), Tensor("w", (4, 3), "int8"),
               Tensor("y", (2, 3), "int32")), ("x",), ("y",))


def test_uint8_weights_are_accepted():
    # fusion.passes.weight_zero_point folds them into int8 exactly
    validate(mlp(w_dtype="uint8"))


def test_weights_that_are_not_8_bit():
    with pytest.raises(GraphError, match=r"input 'b' \('w'\) is int32"):
        validate(mlp(w_dtype="int32"))


@pytest.mark.parametrize("dtype", ["uint8", "int32"])
def test_float_weights_behind_a_dequantize_must_come_from_8_bits(dtype):
    g = graph((Node("dq", "DequantizeLinear", ("wq", "s"), ("w",)),
               Node("mm", "MatMul", ("x", "w"), ("y",))),
              (Tensor("x", (2, 4), "float32"), Tensor("wq", (4, 3), dtype),
               Tensor("s", (), "float32"), Tensor("w", (4, 3), "float32"),
               Tensor("y", (2, 3), "float32")), ("x",), ("y",),
              {"wq": np.ones((4, 3), dtype), "s": np.float32(0.1)})
    if dtype == "uint8":
        validate(g)
        return
    with pytest.raises(GraphError, match=r"node 'mm' \(MatMul\) has int32 weights 'wq' \(through "
                                         r"'dq'\) in 'B'; hwgen multiplies 8-bit weights"):
        validate(g)


def test_zero_point_out_of_range_on_a_tensor():
    with pytest.raises(GraphError, match=r"tensor 'x' \(int8\) has zero point 200, out of range: "
                                         r"int8 holds -128..127; re-quantize it with a zero "
                                         r"point in range"):
        validate(mlp(zp=200))


def test_zero_point_of_int32_tensors_is_zero():
    g = mlp()
    g = g.replace(tensors={**g.tensors, "acc": Tensor("acc", (2, 3), "int32", Quant(0.1, 5))})
    with pytest.raises(GraphError, match="int32 tensors .* have zero point 0"):
        validate(g)


def test_zero_point_out_of_range_in_requant():
    with pytest.raises(GraphError, match=r"node 'rq' \(requant\): zero point 300 is out of range "
                                         r"for int8 \(-128..127\)"):
        validate(mlp(requant_zp=300))


def test_cycle_is_refused_by_the_ir():
    with pytest.raises(GraphError, match="cycle through nodes a, b"):
        graph((Node("a", "relu", ("y",), ("x",)), Node("b", "relu", ("x",), ("y",))),
              (Tensor("x", (2,), "int8"), Tensor("y", (2,), "int8")), (), ("y",))


def test_unknown_and_missing_attributes():
    node = Node("rq", "requant", ("x",), ("y",), {"mult": 1, "shift": 0, "gain": 2})
    with pytest.raises(GraphError, match=r"node 'rq' \(requant\) has unknown attribute\(s\) gain; "
                                         r"requant takes axis, mult, out_dtype, round_even, "
                                         r"shift, zp"):
        ops.node_attrs(node)
    with pytest.raises(GraphError, match=r"needs attribute\(s\) mult, shift"):
        ops.node_attrs(Node("rq", "requant", ("x",), ("y",)))


def test_infer_reports_wrong_input_counts_and_shapes():
    x = Tensor("x", (2, 4), "int8")
    with pytest.raises(GraphError, match=r"has 1 inputs, but qmatmul takes 2 \(a, b\)"):
        ops.infer(Node("mm", "qmatmul", ("x",), ("y",)), [x])
    with pytest.raises(GraphError, match=r"node 'mm' \(qmatmul\): matmul inner dimensions "
                                         r"differ: \(2, 4\) @ \(2, 4\)"):
        ops.infer(Node("mm", "qmatmul", ("x", "x"), ("y",)), [x, x])


def test_qconv2d_takes_groups_that_divide_the_channels():
    x, w = Tensor("x", (1, 4, 5, 5), "int8"), Tensor("w", (6, 2, 3, 3), "int8")
    (t,) = ops.infer(Node("c", "qconv2d", ("x", "w"), ("y",), {"group": 2}), [x, w])
    assert t == ops.TensorType((1, 6, 3, 3), "int32")
    with pytest.raises(GraphError, match=r"node 'c' \(qconv2d\): input channels 4, weight shape "
                                         r"\(6, 2, 3, 3\) and group 3 do not agree"):
        ops.infer(Node("c", "qconv2d", ("x", "w"), ("y",), {"group": 3}), [x, w])
    with pytest.raises(GraphError, match="do not agree"):  # C/group = 1, but w has 2 per group
        ops.infer(Node("c", "qconv2d", ("x", "w"), ("y",), {"group": 4}), [x, w])


def test_shape_inference_of_integer_ops():
    x = Tensor("x", (1, 3, 8, 8), "int8", Quant(0.1, 0))
    (t,) = ops.infer(Node("i", "im2col", ("x",), ("y",),
                          {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1), "strides": (2, 2)}), [x])
    assert t == ops.TensorType((1, 16, 27), "int8")
    (t,) = ops.infer(Node("p", "maxpool", ("x",), ("y",),
                          {"kernel_shape": (3, 3), "strides": (2, 2), "ceil_mode": 1}), [x])
    assert t.shape == (1, 3, 4, 4)
    (t,) = ops.infer(Node("r", "requant", ("a",), ("y",),
                          {**ops.requant_attrs(0.1), "out_dtype": "uint8"}),
                     [Tensor("a", (2,), "int32")])
    assert t.dtype == "uint8"


def test_requant_and_qadd_attribute_helpers():
    assert ops.requant_attrs(1.0) == {"mult": 1 << 30, "shift": 30, "zp": 0, "out_dtype": "int8"}
    assert ops.requant_attrs(1.0, round_even=True)["round_even"] == 1
    per = ops.requant_attrs([1.0, 0.5], 2, axis=1)
    assert per["mult"] == (1 << 30, 1 << 30) and per["shift"] == (30, 31) and per["axis"] == 1
    # 0.2/0.4 and 0.1/0.4 are 1/2 and 1/4 up to the doubles' rounding: the larger fills 31 bits
    q = ops.qadd_attrs(0.2, 0.1, 0.4)
    assert (q["a_mult"], q["b_mult"], q["shift"]) == (1 << 30, 1 << 29, 31)
    q = ops.qadd_attrs(0.1, 0.2, 0.4)
    assert (q["a_mult"], q["b_mult"], q["shift"]) == (1 << 29, 1 << 30, 31)
    # An input scale above the output's takes a smaller shift; the multiplier stays in int32.
    q = ops.qadd_attrs(0.0252869, 0.018687868, 0.01)
    assert 1 << 30 <= max(q["a_mult"], q["b_mult"]) <= ops.INT_RANGE["int32"][1]
    assert q["a_mult"] / 2 ** q["shift"] == pytest.approx(2.52869, rel=2.0**-30)


def test_qadd_multipliers_are_the_scales_to_31_bits():
    """Each multiplier is its exact scale ratio times 2**shift, rounded (Fraction), and the
    larger one has 31 significant bits: the error bound is (a_max + b_max) / 2**(shift + 1)."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        a, b, y = (float(np.float32(v)) for v in 10.0 ** rng.uniform(-4, 0, 3))
        q = ops.qadd_attrs(a, b, y)
        for mult, s in ((q["a_mult"], a), (q["b_mult"], b)):
            assert abs(mult - Fraction(s) / Fraction(y) * 2 ** q["shift"]) <= Fraction(1, 2)
        top = max(q["a_mult"], q["b_mult"])
        assert top <= ops.INT_RANGE["int32"][1] and (q["shift"] == 63 or 2 * top > 1 << 31)
        bound = ops.qadd_error_bound(q, a, b, y, 255, 255)
        assert bound <= Fraction(255, 2 ** q["shift"])


@pytest.mark.parametrize(("a", "b", "y", "message"), [
    (0.1, 1e-30, 0.1, "the smaller input's multiplier rounds to 0 even at shift 63"),
    (1e10, 0.1, 1.0, "more than 2\\*\\*31 times the output scale"),
    (0.0, 0.1, 0.1, "a_scale must be positive and finite, not 0.0"),
])
def test_qadd_attrs_refuses_scales_no_multiplier_holds(a, b, y, message):
    with pytest.raises(ValueError, match=message):
        ops.qadd_attrs(a, b, y)


@pytest.mark.parametrize("a_mult", [1 << 31, -(1 << 31) - 1, 1.0])
def test_qadd_multipliers_must_be_int32(a_mult):
    attrs = {**ops.qadd_attrs(0.1, 0.05, 0.2), "a_mult": a_mult}
    x = Tensor("x", (2, 3), "int8", Quant(0.1, 0))
    with pytest.raises(GraphError, match=rf"node 'add' \(qadd\): a_mult {a_mult!r} must be a "
                                         rf"signed 32-bit integer"):
        ops.infer(Node("add", "qadd", ("x", "x"), ("y",), attrs), [x, x])
    (t,) = ops.infer(Node("add", "qadd", ("x", "x"), ("y",), {**attrs, "a_mult": -(1 << 31)}),
                     [x, x])
    assert t == ops.TensorType((2, 3), "int8")


@pytest.mark.parametrize(("attrs", "inputs", "message"), [
    ({"mult": (1 << 30,), "shift": (30,)}, 2, r"one value per input \(2\)"),
    ({"mult": (1 << 30, 0), "shift": (30, 30)}, 2, "mult 0 must be a positive"),
    ({"mult": (1 << 30, 1 << 30), "shift": (30, 64)}, 2, "shift 64 must be an integer"),
    ({"zp": 128}, 2, "zero point 128 is out of range for int8"),
    ({}, 1, "has 1 inputs, but qconcat takes 2 to 32"),
])
def test_qconcat_attributes_are_checked(attrs, inputs, message):
    x = Tensor("x", (1, 8, 2, 2), "int8", Quant(0.1, 0))
    base = {"axis": 1, "mult": (1 << 30,) * inputs, "shift": (30,) * inputs, "zp": 0,
            "out_dtype": "int8"}
    node = Node("cat", "qconcat", ("x",) * inputs, ("y",), {**base, **attrs})
    with pytest.raises(GraphError, match=rf"node 'cat' \(qconcat\).*{message}"):
        ops.infer(node, [x] * inputs)
    good = {**base, "mult": (1 << 30,) * 2, "shift": (30,) * 2}
    (t,) = ops.infer(Node("cat", "qconcat", ("x", "x"), ("y",), good), [x, x])
    assert t == ops.TensorType((1, 16, 2, 2), "int8")


def test_an_op_is_registered_once():
    with pytest.raises(ValueError, match="'relu' is registered twice"):
        register("relu", "x")


def _dequantize(scale_shape, zp_shape):
    consts = {"s": np.full(scale_shape, 0.5, np.float32), "z": np.zeros(zp_shape, np.int8)}
    return graph((Node("dq", "DequantizeLinear", ("x", "s", "z"), ("y",)),),
                 (Tensor("x", (4,), "int8"), Tensor("s", scale_shape, "float32"),
                  Tensor("z", zp_shape, "int8"), Tensor("y", (4,), "float32")),
                 ("x",), ("y",), consts)


def test_a_one_element_scale_with_a_scalar_zero_point_is_per_tensor():
    # onnxruntime's quantizer writes a per-tensor bias this way (QDQ, per_channel=False)
    validate(_dequantize((1,), ()))
    validate(_dequantize((), (1,)))
    with pytest.raises(GraphError, match=r"'x_zero_point' has shape \(\) but 'x_scale' has \(4,\); "
                                         r"they must match"):
        validate(_dequantize((4,), ()))
