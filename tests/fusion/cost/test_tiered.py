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
    # in a batch, the same answers and counts; the rest go to the model in one call
    batch = TieredModel(AnalyticalModel(), {f: 1234.0}.get)
    assert list(batch.predict_many([f, other, f])) == [1234.0, AnalyticalModel().predict(other),
                                                       1234.0]
    assert batch.counts == {MEASURED: 2, "analytical": 1}


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


def test_a_kernel_stored_k_major_is_priced_as_it_runs():
    """The store layout is chosen after pricing (a GEMM feeding GEMMs stores K-major): the
    kernel that runs is priced again, by the same tiers, so its profile is found."""
    graph = import_onnx(EXAMPLES / "real" / "fc_autoencoder_qdq.onnx")
    plain = compile_model(graph, DRAM_TEST, cache=KernelCache(disk=False))
    kmajor = [k for k in plain.kernels if getattr(k.spec.params, "kmajor_out", False)]
    assert kmajor, "the autoencoder's GEMMs feed GEMMs"
    # profiles of every kernel as it ran
    ran = {k.spec.kind.features(DRAM_TEST, k.spec.params): 1000.0 + i
           for i, k in enumerate(plain.kernels)}
    again = compile_model(graph, DRAM_TEST, cache=KernelCache(disk=False),
                          model=TieredModel(AnalyticalModel(), ran.get))
    by_name = {k.name: k for k in again.kernels}
    found = 0
    for k in kmajor:
        step = by_name[k.name]
        features = step.spec.kind.features(DRAM_TEST, step.spec.params)
        if features in ran:  # the same choice again
            assert step.priced_by == MEASURED and step.predicted_cycles == ran[features]
            found += 1
    assert found
