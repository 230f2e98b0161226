"""The bundled example models import, run, and agree with onnx.reference.ReferenceEvaluator.

Two levels:

* the imported graph (ONNX semantics, before any pass) agrees with the reference on every
  tensor: integer tensors exactly, float tensors to float32 rounding;
* the integer-domain graph after the passes (Q/DQ folded into qmatmul/qconv2d, bias_add,
  requant, relu/clamp, qadd) is within 1 LSB of the reference's quantized output, with at least
  99% of elements exact.

Why one LSB can differ: ONNX requantizes with a float multiplication (``acc * (s_in * s_w /
s_out)`` in float32/float64) and rounds half to even; the hardware multiplies by the 31-bit
fixed-point ``mult * 2**-shift`` and rounds half toward +inf. The two agree except where the
exact value lies within the multiplier's error (about ``2**-31`` relative, see
``test_requant_property.py``) of a rounding tie, or exactly on a tie; there they round to
neighbouring integers. A ``qadd`` also approximates the ratio of its input scales by int8
multipliers (the accelerator's GEMM weights), which can move its sum by a small fraction of
an LSB (``fusion.ir.ops.qadd_error_bound``; the Q/DQ fold refuses an ``Add`` where it could reach
half an LSB).
"""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from examples.build_models import MODELS, sample_input
from fusion.frontend import import_onnx
from fusion.reference import executor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SEEDS = range(1, 26)  # 500 (CNN) to 6,400 (MLP) output elements per model


@pytest.fixture(scope="module", params=sorted(MODELS))
def example(request):
    name = request.param
    path = EXAMPLES / f"{name}.onnx"
    return name, path, ReferenceEvaluator(onnx.load(str(path)))


def test_bundled_models_are_what_the_script_builds(example):
    name, path, _ = example
    assert onnx.load(str(path)).SerializeToString() == MODELS[name]().SerializeToString(), \
        f"{path.name} is stale: run examples/build_models.py"


def test_imported_graph_matches_the_reference_on_every_tensor(example):
    name, path, reference = example
    graph = import_onnx(path)
    x = sample_input(name)
    got = executor.run(graph, {"x": x}, keep=True)
    names = [n for n in got if n not in graph.initializers and n != "x"]
    for tensor, want in zip(names, reference.run(names, {"x": x}), strict=True):
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(got[tensor], want, err_msg=tensor)
        else:
            np.testing.assert_allclose(got[tensor], want, rtol=1e-6, atol=1e-6, err_msg=tensor)


def lsb_errors(name, graph, reference, path) -> np.ndarray:
    """Differences, in output LSBs, between ``graph`` and the reference over all seeds."""
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    diffs = []
    for seed in SEEDS:
        x = sample_input(name, seed)
        got = executor.run(graph, {"x": x})[graph.outputs[0]]
        want = reference.run(None, {"x": x})[0]
        if want.dtype.kind == "f":  # a dequantized output: compare in units of its scale
            diffs.append(np.rint((got.astype(np.float64) - want) / inits["y_scale"]))
        else:
            diffs.append(got.astype(np.int64) - want)
    return np.concatenate([d.ravel() for d in diffs])


@pytest.mark.parametrize("legalize", [False, True], ids=["folded", "legalized"])
def test_integer_graph_is_within_one_lsb(example, legalize, capsys):
    from fusion.passes.driver import optimize

    name, path, reference = example
    graph = optimize(import_onnx(path), legalize=legalize)
    float_compute = {"MatMul", "Gemm", "Conv", "Add", "Relu", "Clip", "QLinearMatMul",
                     "QLinearConv", "MatMulInteger", "ConvInteger"}
    left = sorted({n.op for n in graph.nodes} & float_compute)
    assert not left, f"{name}: ONNX compute ops left after the passes: {left}"
    errors = lsb_errors(name, graph, reference, path)
    exact = float(np.mean(errors == 0))
    with capsys.disabled():
        print(f"\n{name} ({'legalized' if legalize else 'folded'}): {errors.size} elements, "
              f"max |diff| {int(np.abs(errors).max())} LSB, {100 * exact:.2f}% exact")
    assert np.abs(errors).max() <= 1
    assert exact >= 0.99
