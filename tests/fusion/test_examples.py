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
from tests.fusion.references import lsb_errors as diff_in_lsbs
from tests.fusion.references import output_scale

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SEEDS = range(1, 26)  # 500 (CNN) to 6,400 (MLP) output elements per model


@pytest.fixture(scope="module", params=sorted(MODELS))
def example(request):
    name = request.param
    path = EXAMPLES / f"{name}.onnx"
    return name, path, ReferenceEvaluator(onnx.load(str(path)))


def test_bundled_models_are_what_the_script_builds(example):
    """Same graph, same integers, same scales to float32 rounding: not the same bytes.

    The script's arithmetic is exact (``math.fsum``, elementwise IEEE operations), but its
    random weights come through numpy's ziggurat, whose rare wedge test calls the C library's
    ``exp``, and the bytes through onnx's serializer: neither is promised bit-identical across
    machines and versions, so this compares what the file means.
    """
    name, path, _ = example
    have, want = onnx.load(str(path)).graph, MODELS[name]().graph
    stale = f"{path.name} is stale: run examples/build_models.py"
    assert [n.SerializeToString() for n in have.node] == \
        [n.SerializeToString() for n in want.node], stale
    assert (have.input, have.output) == (want.input, want.output), stale
    assert [i.name for i in have.initializer] == [i.name for i in want.initializer], stale
    for a, b in zip(have.initializer, want.initializer, strict=True):
        a, b = onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b)
        assert a.dtype == b.dtype and a.shape == b.shape, stale
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=0, err_msg=stale)
        else:
            np.testing.assert_array_equal(a, b, err_msg=stale)


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
    out = graph.outputs[0]
    scale = output_scale(onnx.load(str(path)), out)
    return np.concatenate([
        diff_in_lsbs(executor.run(graph, {"x": x})[out], reference.run(None, {"x": x})[0], scale)
        for x in (sample_input(name, seed) for seed in SEEDS)])


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
