"""Tiered pricing: a measured profile of the identical kernel wins over any model, each
candidate says which tier priced it, and the compiler's --explain shows it."""

from pathlib import Path

from fusion.compiler.plan import compile_model
from fusion.cost import AnalyticalModel
from fusion.cost.tiered import MEASURED, TieredModel
from fusion.frontend import import_onnx
from fusion.kernels.cache import KernelCache
from fusion.kernels.gemm.features import GemmFeatures
from hwgen.presets import DRAM_TEST, SMALL

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_a_profile_of_the_identical_kernel_comes_first():
    f = GemmFeatures.for_gemm(SMALL, 8, 16, 8, stages=("bias",))
    other = GemmFeatures.for_gemm(SMALL, 8, 32, 8, stages=("bias",))
    model = TieredModel(AnalyticalModel(), {f: 1234.0}.get)
    assert model.predict(f) == 1234.0 and model.source(f) == MEASURED
    assert model.predict(other) == AnalyticalModel().predict(other)
    assert model.source(other) == "analytical"
    assert model.counts == {MEASURED: 1, "analytical": 1}
    assert model.describe() == ("measured profiles of identical kernels, then the analytical "
                                "model")
    assert TieredModel(AnalyticalModel()).describe() == "the analytical model"


def test_explain_names_the_tier_of_each_candidate():
    graph = import_onnx(EXAMPLES / "qdq_mlp_residual.onnx")
    plain = compile_model(graph, DRAM_TEST, cache=KernelCache(disk=False))
    first = plain.kernels[0]
    features = first.spec.kind.features(DRAM_TEST, first.spec.params)
    # the chosen kernel of the first chain measured 10 cycles faster than its prediction
    measured = {features: first.predicted_cycles - 10}
    tiered = compile_model(graph, DRAM_TEST, cache=KernelCache(disk=False),
                           model=TieredModel(AnalyticalModel(), measured.get))
    text = tiered.explain()
    assert text.splitlines()[0].startswith(
        "candidates priced by measured profiles of identical kernels, then the analytical model")
    assert f"{first.predicted_cycles - 10:,.0f} cycles (measured)" in text
    assert "cycles (analytical)" in text
    assert tiered.kernels[0].predicted_cycles == first.predicted_cycles - 10
