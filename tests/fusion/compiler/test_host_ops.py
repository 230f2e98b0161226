"""Planned host execution: ops the accelerator cannot run are host steps of the plan, with a
role, a reason and a predicted cost; ``host_fallback=False`` refuses them by name; and the
engine weighs the host against the accelerator for the ops both can run.

The reference for the model's values is onnxruntime (CPU, optimizations off), not hwgen's
executor."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from fusion.compiler.lower import CompileError
from fusion.compiler.plan import BY_DESIGN, CHEAPER, NO_KERNEL, compile_model
from fusion.compiler.plan_folder import write_plan
from fusion.compiler.plan_reader import read_plan
from fusion.cost.host import HostCostModel
from fusion.frontend import import_onnx
from fusion.frontend.json_format import to_dict
from fusion.frontend.load import load_model
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.kernels.cache import KernelCache
from fusion.reference import executor
from hwgen.config import VariantConfig
from hwgen.presets import SIM_VARIANTS
from tests.fusion.compiler.host_op_models import mlp_sigmoid_softmax, sample
from tests.fusion.frontend.qlinear_pool_cases import exact_run, ort_run

V4X4 = SIM_VARIANTS["4x4"]


@pytest.fixture(scope="module")
def compiled():
    return compile_model(import_onnx(mlp_sigmoid_softmax()), V4X4,
                         cache=KernelCache(disk=False))


def test_ops_without_a_kernel_are_planned_host_ops(compiled):
    assert [(h.name, h.node.op, h.reason) for h in compiled.host_ops] == [
        ("sig", "QLinearSigmoid", NO_KERNEL), ("softmax", "Softmax", BY_DESIGN)]
    assert all(h.predicted_seconds > 0 and h.predicted_cycles > 0 for h in compiled.host_ops)
    # layout steps are host steps, but not host ops
    assert {h.node.op for h in compiled.host if h.role == "layout"} == {"quantize",
                                                                        "dequantize"}
    assert len(compiled.kernels) == 2  # the two GEMMs stay on the accelerator
    plan = compiled.to_dict()
    assert plan["host_ops"] == 2
    steps = {s["name"]: s for s in plan["steps"]}
    assert steps["sig"]["role"] == "compute" and steps["sig"]["reason"] == NO_KERNEL
    assert steps["quant"]["role"] == "layout"
    # in the order the graph runs them: the sigmoid between the two GEMMs
    assert [s["name"] for s in plan["steps"]].index("sig") == 2
    text = compiled.explain()
    assert "host op sig (QLinearSigmoid): no accelerator kernel; predicted" in text
    assert "host op softmax (Softmax): left to the host by design" in text


def test_the_compiled_graph_runs_within_one_lsb_of_the_exact_reference():
    """The passes and the host ops together, on the executor, against the exact reference
    (``examples/exact_reference.py``; not onnxruntime, whose integer kernels saturate
    without VNNI): the int8
    logits (the model cut before its DequantizeLinear) within 1 LSB, and the probabilities
    within what 1 LSB of the logits can move them."""
    model, x = mlp_sigmoid_softmax(batch=32), sample(batch=32)
    compiled = compile_model(import_onnx(model), V4X4, cache=KernelCache(disk=False))
    got = executor.run(compiled.graph, {"x": x}, keep=True)
    want = exact_run(model, {"x": x})
    logits = onnx.ModelProto.FromString(model.SerializeToString())
    del logits.graph.node[-2:]
    del logits.graph.output[:]
    logits.graph.output.append(onnx.helper.make_tensor_value_info("h2", onnx.TensorProto.INT8,
                                                                  None))
    want_q = exact_run(logits, {"x": x}).astype(np.int64)
    # the graph's int8 logits: the input of the dequantize before the softmax
    dq = next(n for n in compiled.graph.nodes if n.op == "dequantize")
    got_q = got[dq.inputs[0]].astype(np.int64)
    diff = np.abs(got_q - want_q)
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.99, (diff.max(), (diff == 0).mean())
    bound = np.float32(np.exp(0.04) - 1)  # one logit LSB (0.04) moves p by at most p*(e^s-1)
    assert np.all(np.abs(got["y"] - want) <= bound * np.maximum(got["y"], want) + 1e-6)


def test_no_host_fallback_refuses_naming_each_op():
    """The Softmax is not named: it is on the host by design, not as a fallback."""
    with pytest.raises(CompileError) as info:
        compile_model(import_onnx(mlp_sigmoid_softmax()), V4X4, host_fallback=False)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("1 op(s) have no accelerator kernel and --no-host-fallback")
    assert lines[1].startswith("  node 'sig' (QLinearSigmoid: ")
    assert len(lines) == 2


def test_a_gemm_never_falls_back_to_the_host():
    b = GraphBuilder("act_act")
    x = b.input("x", (4, 8), "int8", quant=Quant(0.1, 0))
    y = b.input("y", (8, 4), "int8", quant=Quant(0.1, 0))
    out = b.qmatmul(x, y, name="mm")
    with pytest.raises(CompileError, match="'mm'.*not a constant"):
        compile_model(b.build(outputs=[out]), V4X4, optimized=True)


def _pool():
    b = GraphBuilder("pool")
    x = b.input("x", (1, 4, 8, 8), "int8", quant=Quant(0.1, 0))
    return b.build(outputs=[b.maxpool(x, (2, 2), strides=(2, 2), name="pool")])


def test_the_engine_keeps_an_op_both_can_run_on_the_cheaper_accelerator():
    compiled = compile_model(_pool(), V4X4, optimized=True)
    assert [k.name for k in compiled.kernels] == ["pool"] and not compiled.host_ops
    line = next(x for x in compiled.explain().splitlines() if "engine for pool" in x)
    kernel = compiled.kernels[0].predicted_cycles
    host = HostCostModel()
    node = compiled.graph.node("pool")
    seconds = host.seconds(compiled.graph, node)
    # the int8 pool reads 4 x 8 x 8 bytes and writes a quarter of that, a word a cycle
    link = host.link_cycles(compiled.graph, node, V4X4.port_bytes)
    assert link == (256 + 64) / V4X4.port_bytes
    assert line == (f"  engine for pool: accelerator {kernel:,.0f} cycles, host "
                    f"{host.cycles(seconds) + link:,.0f} cycles ({seconds * 1e6:,.1f} us "
                    f"predicted, and {link:,.0f} cycles moving its operands): accelerator")
    assert host.cycles(seconds) > kernel


def test_the_engine_moves_an_op_to_a_host_priced_cheaper():
    """A host a thousand times faster than the default constants wins the maxpool."""
    fast = HostCostModel(seconds_per_op=20e-9, seconds_per_element=1e-11)
    compiled = compile_model(_pool(), V4X4, optimized=True, host_model=fast)
    assert not compiled.kernels
    (step,) = compiled.host_ops
    assert (step.name, step.reason) == ("pool", CHEAPER)
    assert "engine for pool: accelerator" in compiled.explain()
    # after the line naming the pricing model, the chain's header, then its chosen option
    lines = compiled.explain().splitlines()
    assert lines[0].startswith("candidates priced by") and lines[1] == "chain pool: pool (maxpool)"
    assert lines[2].startswith("  * pool [host]")


def test_an_op_the_variant_refuses_runs_on_the_host_unless_told_not_to():
    no_max = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant"))
    compiled = compile_model(_pool(), no_max, optimized=True)
    (step,) = compiled.host_ops
    assert step.reason.startswith("the accelerator refuses it: an element-wise max runs on "
                                  "the residual stage")
    with pytest.raises(CompileError, match="residual"):
        compile_model(_pool(), no_max, optimized=True, host_fallback=False)


def test_the_bundled_examples_keep_every_op_on_the_accelerator():
    examples = Path(__file__).resolve().parents[3] / "examples"
    for path in sorted(examples.glob("*.onnx")):
        compiled = compile_model(load_model(path), V4X4, cache=KernelCache(disk=False))
        assert not compiled.host_ops, (path.name, [h.name for h in compiled.host_ops])


def test_a_plan_folder_keeps_its_host_ops(compiled, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(mlp_sigmoid_softmax(), model)
    write_plan(compiled, tmp_path / "plan", source=model)
    restored = read_plan(tmp_path / "plan", V4X4, model=model)
    assert [(h.name, h.role, h.reason) for h in restored.host] == \
        [(h.name, h.role, h.reason) for h in compiled.host]


def test_a_plan_with_a_host_chosen_segment_reads_back(tmp_path):
    no_max = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant"))
    compiled = compile_model(_pool(), no_max, optimized=True)
    source = tmp_path / "pool.json"
    source.write_text(json.dumps(to_dict(_pool())))
    write_plan(compiled, tmp_path / "plan", source=source)
    restored = read_plan(tmp_path / "plan", no_max, model=source)
    assert [(h.name, h.role) for h in restored.host_ops] == [("pool", "compute")]


def test_an_add_the_fold_cannot_make_integer_runs_on_the_host():
    """Issue 10: ``DQ(a) + DQ(b)`` with no QuantizeLinear after it is no ``qadd``; it was
    refused with no way to run the model. Now it is a host op, and equals onnxruntime."""
    from onnx import TensorProto, helper

    from tests.fusion.frontend.qlinear_pool_cases import build

    rng = np.random.default_rng(0)
    inits = {"s": np.float32(0.05), "z": np.int8(1), "t": np.float32(0.02), "u": np.int8(-2)}
    nodes = [helper.make_node("DequantizeLinear", ["a", "s", "z"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", "t", "u"], ["db"]),
             helper.make_node("Add", ["da", "db"], ["y"], name="add")]
    feeds = {k: rng.integers(-128, 128, (4, 8)).astype(np.int8) for k in ("a", "b")}
    model = build(nodes, feeds, inits, TensorProto.FLOAT)
    compiled = compile_model(import_onnx(model), V4X4)
    assert [(h.name, h.node.op, h.reason) for h in compiled.host_ops] == [
        ("add", "Add", NO_KERNEL)]
    got = executor.run(compiled.graph, feeds)["y"]
    # exact: one float32 add, correctly rounded (no integer kernel runs: onnxruntime's float
    # path is exact on every CPU here)
    np.testing.assert_array_equal(got, ort_run(model, feeds))
    with pytest.raises(CompileError, match=r"node 'add' \(Add: "):
        compile_model(import_onnx(model), V4X4, host_fallback=False)
