"""Directed shadow inputs: every kernel of the bundled examples gets input sets that reach its
stages' edge cases, where the model's random inputs miss some (no simulator needed)."""

from pathlib import Path

import numpy as np
import pytest

from fusion.compiler.plan import HostStep, compile_model
from fusion.frontend.load import load_model
from fusion.reference import executor
from fusion.runtime.edge_cases import unreachable
from fusion.runtime.run import evaluate_nodes, random_inputs, run_compiled
from fusion.runtime.shadow_inputs import directed_inputs, kernel_coverage
from hwgen.config import EPILOGUE_STAGES, VariantConfig

CONFIG = VariantConfig(rows=4, cols=4, epilogue=EPILOGUE_STAGES)
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def kernels_with_values(name):
    """Each kernel step of an example, with its input values from random_inputs(seed 0)."""
    compiled = compile_model(load_model(str(EXAMPLES / f"{name}.onnx"), {}), CONFIG)
    graph = compiled.graph
    env = dict(graph.initializers)
    env.update(executor.coerce_inputs(graph, random_inputs(graph, 0)))
    out = []
    for step in compiled.steps:
        if isinstance(step, HostStep):
            executor.evaluate_node(graph, step.node, env)
            continue
        out.append((compiled, step, {t: env[t] for t in step.spec.inputs}))
        evaluate_nodes(graph, [graph.node(n) for n in step.spec.nodes], env)
    return out


def test_random_inputs_miss_the_relu_edge_that_directed_sets_reach():
    """The issue's escape: a ReLU letting -1 through passed `hwgen run qdq_cnn.onnx` with the
    default seed, whose values never bring a ReLU input to exactly -1."""
    (compiled, step, values), = [k for k in kernels_with_values("qdq_cnn")
                                 if k[1].name == "conv2/qconv2d/qmatmul"]
    graph = compiled.graph
    own = kernel_coverage(graph, step.spec, step.compiled, values, CONFIG)
    assert own["relu: x = -1"] == 0
    sets = directed_inputs(graph, step.spec, step.compiled, values, CONFIG, 2)
    assert all(kernel_coverage(graph, step.spec, step.compiled, s, CONFIG)["relu: x = -1"]
               for s in sets)


@pytest.mark.parametrize("name", ["qdq_cnn", "qdq_mlp_residual", "qop_mlp"])
def test_directed_sets_reach_every_edge_case_but_ties(name):
    """Ties need a multiplier whose odd part is small; a model's 31-bit ones have none within
    the accumulators' range, so only the other edge cases can be asked for."""
    for compiled, step, values in kernels_with_values(name):
        graph = compiled.graph
        sets = directed_inputs(graph, step.spec, step.compiled, values, CONFIG, 2)
        assert len(sets) == 2
        for s in sets:
            assert set(s) == set(values)
            for t, v in s.items():
                assert v.dtype == values[t].dtype and v.shape == values[t].shape
        covered = {}
        for s in sets:
            for event, count in kernel_coverage(graph, step.spec, step.compiled, s,
                                                CONFIG).items():
                covered[event] = covered.get(event, 0) + count
        missing = {e for e, n in covered.items() if not n and "tie" not in e}
        if len(set(step.spec.inputs)) < len(step.spec.inputs):
            # its residual is its own input: the sum cannot be steered apart from x
            missing = {e for e in missing if not e.startswith("residual")}
        assert not missing - unreachable(step.compiled.stages, step.compiled.params), (
            step.name, missing)


def test_a_scaled_add_after_a_relu_cannot_reach_its_lower_bound():
    """The residual MLP's add follows a ReLU (x >= 0) and its residual's scale is below the
    output's: no sum reaches -128, and its 31-bit multipliers make no exact half; that is all
    the directed sets may leave out."""
    (found,) = [(step.compiled.stages, step.compiled.params)
                for _, step, _ in kernels_with_values("qdq_mlp_residual")
                if step.compiled.params.residual_op == "scaled"]
    assert unreachable(*found) == {"residual scaled: y < lo", "residual scaled: y = lo",
                                   "residual scaled: tie"}


def test_directed_sets_are_deterministic_and_differ_from_each_other():
    compiled, step, values = kernels_with_values("qdq_mlp_residual")[0]
    one = directed_inputs(compiled.graph, step.spec, step.compiled, values, CONFIG, 3, seed=4)
    two = directed_inputs(compiled.graph, step.spec, step.compiled, values, CONFIG, 3, seed=4)
    (t,) = step.spec.inputs
    assert all(np.array_equal(a[t], b[t]) for a, b in zip(one, two, strict=True))
    assert not np.array_equal(one[0][t], one[1][t])
    assert directed_inputs(compiled.graph, step.spec, step.compiled, values, CONFIG, 0) == []


def test_a_negative_count_of_shadow_inputs_is_refused_before_anything_runs():
    compiled = kernels_with_values("qop_mlp")[0][0]
    with pytest.raises(ValueError, match="shadow_inputs is a count"):
        run_compiled(compiled, random_inputs(compiled.graph), shadow_inputs=-1)
