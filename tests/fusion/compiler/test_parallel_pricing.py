"""Chains priced on several cores (:mod:`fusion.compiler.parallel_pricing`): the same plan as
one core, byte for byte; only the analytical model prices in forked workers."""

import json

from fusion.compiler.parallel_pricing import _analytical, _deal
from fusion.compiler.plan import compile_model
from fusion.cost.analytical import AnalyticalModel
from fusion.cost.tiered import TieredModel
from fusion.frontend.load import load_model
from hwgen.config import VariantConfig

V4 = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant", "relu", "clamp", "residual"))


def test_two_cores_give_the_plan_one_core_gives():
    graph = load_model("examples/qdq_cnn.onnx")
    plans = [json.dumps(compile_model(graph, V4, jobs=jobs).to_dict(), sort_keys=True,
                        default=str) for jobs in (1, 2)]
    assert plans[0] == plans[1]


def test_chains_are_dealt_largest_first_and_only_the_analytical_model_forks():
    assert _deal([6, 2, 2, 2], 2) == [[0], [1, 2, 3]]
    assert _deal([1], 3) == [[0]]
    analytical = AnalyticalModel()
    assert _analytical(analytical) and _analytical(TieredModel(analytical, None))
    assert not _analytical(TieredModel(analytical, lambda f: None))  # a measured tier
