"""fusion/runtime/whole_model.py: a run's outputs against the imported graph's reference, and
the first tensor where a compiled graph and the imported one part.

A compiled graph that means something else is made here by doctoring the graph after the
passes (the product is never changed): one of its constants altered, so that the run's outputs
(the doctored graph's, as the shadow-checked hardware would give) leave the bound.
"""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fusion.frontend.load import load_model
from fusion.passes.driver import optimize
from fusion.reference import executor
from fusion.runtime.run import random_inputs
from fusion.runtime.whole_model import OutputDeviation, check_whole_model, first_parting

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _graphs(name):
    imported = load_model(EXAMPLES / name)
    compiled = optimize(imported)
    return imported, compiled, random_inputs(compiled, 0)


def _doctored(graph, tensor, change):
    """``graph`` with initializer ``tensor`` replaced by ``change(value)``."""
    inits = dict(graph.initializers)
    inits[tensor] = change(inits[tensor])
    return dataclasses.replace(graph, initializers=inits)


@pytest.mark.parametrize("name", ["qdq_cnn.onnx", "qop_mlp.onnx", "qdq_mlp_residual.onnx"])
def test_a_faithful_compiled_graph_is_within_the_bound(name):
    imported, compiled, inputs = _graphs(name)
    check = check_whole_model(imported, compiled, inputs, executor.run(compiled, inputs))
    assert check.done and check.ok and check.parted_at is None
    (out,) = check.outputs
    assert out.max_diff == 0 and out.share_exact == 1.0
    assert out.kind == ("integer" if name.startswith("qop") else "dequantized")
    assert "max 0 LSB, 100.00% exact" in check.summary()


def test_a_doctored_compiled_graph_fails_naming_the_first_tensor_that_parts():
    imported, compiled, inputs = _graphs("qdq_cnn.onnx")
    # the first convolution's int32 bias, moved: its quantized output c1_q (a name both graphs
    # keep) is the first tensor that differs; the tensors before it are the same
    bias = next(n.inputs[1] for n in compiled.topo_order() if n.op == "bias_add")
    doctored = _doctored(compiled, bias, lambda b: (b + 5000).astype(b.dtype))
    check = check_whole_model(imported, doctored, inputs, executor.run(doctored, inputs))
    assert check.done and not check.ok
    assert check.parted_at == "c1_q"
    assert "first part at tensor 'c1_q' (made by QuantizeLinear 'c1_q'" in check.failure()
    assert check.to_dict()["parted_at"] == "c1_q" and check.to_dict()["ok"] is False


def test_first_parting_follows_the_imported_graphs_order():
    imported, compiled, inputs = _graphs("qop_mlp.onnx")
    want = executor.run(imported, inputs, keep=True)
    got = dict(want)
    order = [o for n in imported.topo_order() for o in n.outputs]
    for name in order[-1:1:-1]:  # every tensor but the first two differs
        got[name] = want[name] + np.ones((), want[name].dtype)
    assert first_parting(imported, want, got)[0] == order[2]
    assert first_parting(imported, want, want) == (None, "")


def test_an_integer_output_must_be_exact():
    imported, compiled, inputs = _graphs("qop_mlp.onnx")
    out = executor.run(compiled, inputs)
    name = imported.outputs[0]
    off = dict(out)
    off[name] = out[name].copy()
    off[name].flat[0] += 1 if off[name].flat[0] < 255 else -1
    check = check_whole_model(imported, compiled, inputs, off)
    assert not check.ok and check.outputs[0].max_diff == 1


@pytest.mark.parametrize(("elements", "worst", "exact", "within"), [
    (10, 1, 0.8, True),      # a 10-class output: one element is 10%; only the max counts
    (1000, 1, 0.995, True),
    (1000, 1, 0.98, False),  # under 99% exact
    (1000, 2, 0.999, False),
])
def test_the_dequantized_bound(elements, worst, exact, within):
    assert OutputDeviation("y", "dequantized", elements, worst, exact, 0.1).within is within


def test_a_graph_of_other_inputs_is_not_checked():
    imported, compiled, inputs = _graphs("qdq_cnn.onnx")
    check = check_whole_model(imported, compiled, {"other": np.zeros(1)}, {})
    assert not check.done and check.ok and "not checked" in check.summary()


def test_an_output_of_another_shape_is_beyond_the_bound_not_an_error():
    imported, compiled, inputs = _graphs("qdq_cnn.onnx")
    name = imported.outputs[0]
    check = check_whole_model(imported, compiled, inputs, {name: np.zeros(3, np.float32)})
    assert check.done and not check.ok
    (out,) = check.outputs
    assert out.kind == "dequantized" and out.max_diff == float("inf") and out.share_exact == 0
    assert not OutputDeviation("p", "float", 10, float("inf"), 0.0).within
