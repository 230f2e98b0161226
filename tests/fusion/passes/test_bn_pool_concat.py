"""The passes keep the meaning of a QDQ network with a batch norm written as per-channel ``Mul``
then ``Add`` in float, average pools and a ``Concat`` (the pattern of a third-party network
whose run was 51 LSB from hwgen's reference on the imported graph).

The network, as onnxruntime's ``quantize_static`` writes it: Q/DQ around a ``Conv`` (per-channel
int8 weights, int32 bias), then ``DQ -> Mul(gamma) -> Add(beta) -> Q`` in float, two average
pools of its DQ (2x2 whose windows count 4: exact halves are common; 3x3 with padding not
counted, which stays a float host op), each quantized, and a ``Concat`` of the two branches.

What went wrong: the reference executor evaluated the imported graph in float32, where a value
within float32 noise of a half (or an exact half: a 2x2 pool's sum over 4) rounds either way
at a ``QuantizeLinear``, while the passes compute the same values exactly in integers; the 1 LSB
one layer apart grows in the next layers. The imported graph is now evaluated with its float
tensors in float64 (``executor.run(float64=True)``, what the whole-model check of ``hwgen run``
and the runtime's host steps use), and every pass keeps every integer tensor.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from examples.real_check import within_one_lsb
from fusion.frontend import import_onnx
from fusion.passes import driver
from fusion.reference import executor
from fusion.runtime.whole_model import first_parting

C, HW = 8, 8


def bn_pool_concat(seed: int, *, halves: bool = True) -> onnx.ModelProto:
    """The QDQ network of the module docstring, with random weights and scales; without
    ``halves`` the pools' outputs have other scales than their input, so that their exact
    values are never halves (a float32 reference rounds an exact half either way)."""
    rng = np.random.default_rng(seed)
    inits, nodes = {}, []

    def q(x, y, scale, zp):
        inits[f"{y}_s"], inits[f"{y}_z"] = np.float32(scale), np.int8(zp)
        nodes.append(helper.make_node("QuantizeLinear", [x, f"{y}_s", f"{y}_z"], [y]))
        nodes.append(helper.make_node("DequantizeLinear", [y, f"{y}_s", f"{y}_z"], [f"{y}_dq"]))
        return f"{y}_dq"

    def dq_const(name, value, scale, axis=0):
        inits[name], inits[f"{name}_s"] = value, scale
        inits[f"{name}_z"] = np.zeros(value.shape[:1], value.dtype)
        nodes.append(helper.make_node("DequantizeLinear", [name, f"{name}_s", f"{name}_z"],
                                      [f"{name}_dq"], axis=axis))
        return f"{name}_dq"

    x = q("x", "xq", rng.uniform(0.015, 0.03), rng.integers(-10, 10))
    w_scale = rng.uniform(0.002, 0.01, C).astype(np.float32)
    w = dq_const("w", rng.integers(-127, 128, (C, 3, 3, 3)).astype(np.int8), w_scale)
    b = dq_const("b", rng.integers(-2000, 2000, C).astype(np.int32),
                 (np.float32(inits["xq_s"]) * w_scale).astype(np.float32))
    nodes.append(helper.make_node("Conv", [x, w, b], ["conv"], pads=[1, 1, 1, 1]))
    conv = q("conv", "cq", rng.uniform(0.03, 0.08), rng.integers(-20, 20))
    inits["gamma"] = rng.uniform(0.5, 2.0, (C, 1, 1)).astype(np.float32)
    inits["beta"] = rng.uniform(-1.0, 1.0, (C, 1, 1)).astype(np.float32)
    nodes.append(helper.make_node("Mul", [conv, "gamma"], ["bn_mul"]))
    nodes.append(helper.make_node("Add", ["bn_mul", "beta"], ["bn"]))
    scale, zp = rng.uniform(0.04, 0.1), rng.integers(-20, 20)
    bn = q("bn", "bnq", scale, zp)
    nodes.append(helper.make_node("AveragePool", [bn], ["pool2"], kernel_shape=[2, 2],
                                  pads=[0, 0, 1, 1], count_include_pad=1))
    nodes.append(helper.make_node("AveragePool", [bn], ["pool3"], kernel_shape=[3, 3],
                                  pads=[1, 1, 1, 1]))  # count_include_pad=0: a matrix GEMM
    branches = [q("pool2", "p2q", scale if halves else 1.37 * scale, zp),
                q("pool3", "p3q", scale if halves else 1.21 * scale, zp)]
    nodes.append(helper.make_node("Concat", branches, ["cat"], axis=1))
    y = q("cat", "yq", scale, zp)
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    graph = helper.make_graph(
        nodes, "bn_pool_concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                [1, 3, HW, HW])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * C, HW, HW])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _input(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1000 + seed).normal(0, 1.5, (1, 3, HW, HW))
            .astype(np.float32)}


def _every_pass(graph, check) -> list[str]:
    """Run the driver's pipelines, calling ``check(pass name, graph)`` after each change."""
    seen = []

    def watched(p):
        def run(g):
            g, changed = p(g)
            if changed:
                seen.append(driver.pass_name(p))
                check(driver.pass_name(p), g)
            return g, changed
        run.pass_name = driver.pass_name(p)
        return run

    for pipeline in (driver.prune_pipeline, driver.legalize_pipeline, driver.prune_pipeline):
        graph = driver.run_to_fixed_point(graph, [watched(p) for p in pipeline()])
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_every_pass_keeps_every_integer_tensor(seed):
    model, inputs = bn_pool_concat(seed), _input(seed)
    imported = import_onnx(model)
    want = executor.run(imported, inputs, keep=True, float64=True)

    def same(name, graph):
        got = executor.run(graph, inputs, keep=True, float64=True)
        assert first_parting(imported, want, got) == (None, ""), name
        assert np.array_equal(got["y"], want["y"]), name

    seen = _every_pass(imported, same)
    assert "qdq_fold" in seen and "conv_legalize" in seen


def test_float32_evaluation_of_the_import_is_what_parted():
    # the cause: on these networks, the float32 evaluation of the imported graph rounds some
    # near-half values the other way than the exact integers of the folded graph
    parted = []
    for seed in range(6):
        model, inputs = bn_pool_concat(seed), _input(seed)
        imported = import_onnx(model)
        folded = driver.optimize(imported)
        got = executor.run(folded, inputs, keep=True, float64=True)
        name, _ = first_parting(imported, executor.run(imported, inputs, keep=True), got)
        parted += [name] if name else []
    assert parted and set(parted) <= {"p2q", "p3q", "bnq", "cq", "yq"}, parted


@pytest.mark.parametrize("seed", range(6))
def test_both_are_within_the_float32_tie_bound_of_onnx_reference(seed):
    # onnx.reference computes in float32 (the model as ONNX declares it): the integer and the
    # float64 evaluations are within 1 LSB of it, with >= 99% exact, where the network has no
    # exact halves (with them, float32 picks a side at random: 3% of this output differs)
    model, inputs = bn_pool_concat(seed, halves=False), _input(seed)
    imported = import_onnx(model)
    want = ReferenceEvaluator(model).run(None, inputs)[0].astype(np.float64)
    scale = float(numpy_helper.to_array(next(i for i in model.graph.initializer
                                             if i.name == "yq_s")))
    for label, graph in (("imported", imported), ("passed", driver.optimize(imported))):
        got = executor.run(graph, inputs, float64=True)["y"]
        ok, figures = within_one_lsb(np.rint((got - want) / scale).ravel(), label,
                                     integer=False)
        assert ok, figures
