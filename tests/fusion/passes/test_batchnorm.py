"""A quantized BatchNormalization becomes a per-channel affine the accelerator runs
(:mod:`fusion.passes.batchnorm`), exact on every input code against ONNX's definition.

The network is what onnxruntime's ``quantize_static`` writes for a batch norm it cannot fold
(DenseNet's, after a Concat): ``DQ(x) -> BatchNormalization [-> Relu] -> Q``, its scale and
bias quantized too (``DQ(int8 scale)``, ``DQ(int32 bias)``) or float. The input holds every
code of its type in every channel, so that the comparison is exhaustive; the reference is
``examples.exact_reference`` (ONNX's evaluator, float64 after each DequantizeLinear).
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from examples.exact_reference import reference_session
from fusion.frontend import import_onnx
from fusion.ir import ops
from fusion.ir.graph import Quant
from fusion.passes import driver
from fusion.passes._qdq_common import Tail
from fusion.passes.batchnorm import _parameters
from fusion.reference import executor
from fusion.reference.hwgen_ops import requant
from tests.fusion.references import check_within_one_lsb, lsb_errors

C = 6


def bn_model(seed: int, *, dtype=TensorProto.INT8, relu: bool = False, quantize: bool = True,
             quantized_params: bool = False, gain: float = 1.0) -> tuple[onnx.ModelProto,
                                                                        np.ndarray]:
    """``q -> DQ -> BatchNormalization [-> Relu] [-> Q -> DQ] -> y``, and an input holding
    every code in every channel."""
    rng = np.random.default_rng(seed)
    np_type = np.int8 if dtype == TensorProto.INT8 else np.uint8
    info = np.iinfo(np_type)
    zp_x = np.array(rng.integers(-10, 10) if np_type is np.int8 else 128, np_type)
    scale = rng.uniform(0.5, 1.5, C) * rng.choice([-1, 1], C)
    scale[0] = 0.0  # a channel the batch norm zeroes
    params = {"scale": scale, "bias": rng.normal(0, 0.3, C), "mean": rng.normal(0, 0.2, C),
              "var": rng.uniform(0.5, 1.5, C)}
    inits = [numpy_helper.from_array(np.array(rng.uniform(0.01, 0.03), np.float32), "sx"),
             numpy_helper.from_array(zp_x, "zx"),
             numpy_helper.from_array(np.array(0.02 * gain, np.float32), "sy"),
             numpy_helper.from_array(np.array(-5 if not relu else -128, np.int8), "zy")]
    names = {}
    for key, value in params.items():
        if quantized_params and key in ("scale", "bias"):
            q = np.clip(np.rint(value / 0.01), -127, 127).astype(
                np.int8 if key == "scale" else np.int32)
            inits += [numpy_helper.from_array(q, f"{key}_q"),
                      numpy_helper.from_array(np.array(0.01, np.float32), f"{key}_s")]
            names[key] = f"{key}_dq"
        else:
            inits.append(numpy_helper.from_array(value.astype(np.float32), key))
            names[key] = key
    nodes = [helper.make_node("DequantizeLinear", [f"{k}_q", f"{k}_s"], [f"{k}_dq"])
             for k in ("scale", "bias") if quantized_params]
    nodes += [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"]),
              helper.make_node("BatchNormalization",
                               ["xd", names["scale"], names["bias"], names["mean"],
                                names["var"]], ["bn"], name="bn", epsilon=1e-3)]
    last = "bn"
    if relu:
        nodes.append(helper.make_node("Relu", ["bn"], ["bn_relu"]))
        last = "bn_relu"
    if quantize:
        nodes += [helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    codes = np.arange(info.min, info.max + 1).astype(np_type)
    x = np.broadcast_to(codes.reshape(1, 1, 16, 16), (1, C, 16, 16)).copy()
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", dtype, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model, x


def _ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("variant", [{}, {"relu": True}, {"quantized_params": True},
                                     {"dtype": TensorProto.UINT8}, {"gain": 0.1}])
def test_the_affine_is_exact_on_every_code(seed, variant):
    model, x = bn_model(seed, **variant)
    graph = driver.optimize(import_onnx(model), legalize=False)
    assert "BatchNormalization" not in _ops(graph) and "qconv2d" in _ops(graph)
    want = reference_session(model).run(["y"], {"x": x})[0]
    got = executor.run(graph, {"x": x})["y"]
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_the_host_keeps_a_batch_norm_whose_output_is_not_quantized():
    model, x = bn_model(1, quantize=False)
    graph = driver.optimize(import_onnx(model), legalize=False)
    assert "BatchNormalization" in _ops(graph)
    want = reference_session(model).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(executor.run(graph, {"x": x}, float64=True)["y"], want,
                               rtol=1e-6)  # the output is float32


def test_the_plan_says_why_a_batch_norm_stays_on_the_host(monkeypatch):
    """A channel without exact parameters keeps the whole BatchNormalization on the host, and
    ``why_host`` (what ``--explain`` and the plan's host step say) names the channel and how
    near a rounding half its nearest code lies."""
    from fusion.passes import batchnorm

    model, x = bn_model(3)
    found = batchnorm._parameters
    monkeypatch.setattr(batchnorm, "_parameters",
                        lambda a, b, s_x, table, codes, tail: None
                        if abs(a - model_gain(model, 2)) < 1e-6
                        else found(a, b, s_x, table, codes, tail))
    graph = driver.optimize(import_onnx(model), legalize=False)
    node = next(n for n in graph.nodes if n.op == "BatchNormalization")
    why = batchnorm.why_host(graph, node)
    assert why.startswith("no int8 weight reproduces channel 2 on every input code: one lies ")
    assert "output LSB from a rounding half" in why and why.endswith("computes it exactly")
    want = reference_session(model).run(["y"], {"x": x})[0]
    np.testing.assert_array_equal(executor.run(graph, {"x": x}, float64=True)["y"],
                                  want.astype(np.float32))
    model, _ = bn_model(1, quantize=False)
    graph = driver.optimize(import_onnx(model), legalize=False)
    node = next(n for n in graph.nodes if n.op == "BatchNormalization")
    assert batchnorm.why_host(graph, node) == "its output is not quantized (QuantizeLinear)"


def model_gain(model: onnx.ModelProto, channel: int) -> float:
    """Channel ``channel``'s gain ``a`` of ``bn_model``'s batch norm (float scale and var)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    a = inits["scale"].astype(np.float64) / np.sqrt(inits["var"].astype(np.float64) + 1e-3)
    return float(a[channel])


def test_an_affine_that_magnifies_a_thousandfold_is_exact_too():
    """An output scale 1000 times finer than the input's: nearly every code saturates, and
    the affine reproduces the ones that do not."""
    model, x = bn_model(2, gain=0.001)
    graph = driver.optimize(import_onnx(model), legalize=False)
    assert "BatchNormalization" not in _ops(graph)
    want = reference_session(model).run(["y"], {"x": x})[0]
    np.testing.assert_array_equal(executor.run(graph, {"x": x})["y"], want.astype(np.float32))


def test_no_parameters_for_a_table_no_affine_map_gives():
    """The search refuses a table that is not an affine map of the codes (then the pass
    leaves the BatchNormalization to the host)."""
    codes = np.arange(-128, 128, dtype=np.int64)
    table = np.zeros(256, np.int64)
    table[200] = 5
    tail = Tail((), "y", Quant(0.02, 0), "int8", None)
    assert _parameters(0.5, 0.1, 0.02, table, codes, tail) is None
    a, b = 0.3712345, 0.0131234  # no exact halves among the codes
    affine = np.clip(np.rint((a * 0.02 * codes + b) / 0.02), -128, 127).astype(np.int64)
    assert _parameters(a, b, 0.02, affine, codes, tail) is not None


def test_a_code_nearer_a_half_than_a_bias_resolves_is_reached_by_moving_the_slope():
    """Code -58 of this channel lies 1e-4 output LSB above a rounding half: no weight from
    127 to 64 with the gain's own scale and a bias near the nearest reproduces the table,
    and a weight scale a few parts in ten thousand off the gain's does (with another bias)."""
    from fusion.passes.batchnorm import _search

    codes = np.arange(-128, 128, dtype=np.int64)
    tail = Tail((), "y", Quant(0.02, 0), "int8", None)
    a, b = 0.7192528400524483, 1.88433529446084
    table = np.clip(np.rint((a * 0.02 * codes + b) / 0.02), -128, 127).astype(np.int64)
    assert all(_search(a, b, 0.02, table, codes, tail, m, free=False) is None
               for m in range(127, 63, -1))
    weight, w_scale, bias = _parameters(a, b, 0.02, table, codes, tail)
    assert weight == 127 and w_scale != np.float32(a / 127)
    assert abs(w_scale / np.float32(a / 127) - 1) < 1e-4
    acc = weight * codes + bias
    attrs = ops.requant_attrs(0.02 * np.float64(w_scale) / 0.02, 0, round_even=True)
    got = requant(acc, attrs["mult"], attrs["shift"], 0, "int8", round_even=True)
    np.testing.assert_array_equal(got, table)  # as Q/DQ folding will requantize it


@pytest.mark.parametrize("seed", range(4))
def test_a_batch_norm_read_straight_from_a_convolution_folds_into_it(seed):
    """``DQ(x) -> Conv(DQ(w), B) -> BatchNormalization -> Relu -> Q`` (no quantize between:
    a model quantized without quant_pre_process's fusions): one convolution, its weights
    negated where the batch norm's gain is negative, within the bound of the exact reference
    (a float bias rounds to accumulator units, as for any convolution)."""
    rng = np.random.default_rng(100 + seed)
    cin, cout = 5, 6
    w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    gain = rng.uniform(0.5, 1.5, cout) * rng.choice([-1, 1], cout)
    gain[1] = 0.0
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(3, np.int8),
             "wq": w, "ws": rng.uniform(0.002, 0.004, cout).astype(np.float32),
             "wz": np.zeros(cout, np.int8), "B": rng.normal(0, 0.1, cout).astype(np.float32),
             "g": gain.astype(np.float32), "beta": rng.normal(0, 0.2, cout).astype(np.float32),
             "mean": rng.normal(0, 0.2, cout).astype(np.float32),
             "var": rng.uniform(0.5, 1.5, cout).astype(np.float32),
             "sy": np.array(0.015, np.float32), "zy": np.array(-128, np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["bn"],
                              name="bn"),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    x = rng.integers(-128, 128, (2, cin, 7, 7)).astype(np.int8)
    graph = helper.make_graph(
        nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.INT8, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, cout, 7, 7))],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    optimized = driver.optimize(import_onnx(model), legalize=False)
    ops = _ops(optimized)
    assert "BatchNormalization" not in ops and ops.count("qconv2d") == 1
    want = reference_session(model).run(["y"], {"x": x})[0]
    errors = lsb_errors(executor.run(optimized, {"x": x})["y"], want, 0.015)
    check_within_one_lsb(errors, "conv + batch norm folded", integer=False)
