"""The compiler prices its candidates on the variant folder's board memory: on DRAM the
first-order memory model (:mod:`fusion.cost.memory`) changes the predicted cycles and can
change the tiling chosen; ``--explain`` says what priced them."""

from dataclasses import replace
from pathlib import Path

from fusion.compiler.plan import compile_model
from fusion.frontend import import_onnx
from fusion.kernels.cache import KernelCache
from hwgen.platform import PlatformConfig
from hwgen.presets import DRAM_TEST

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _compile(platform=None):
    return compile_model(import_onnx(EXAMPLES / "qdq_mlp_residual.onnx"), DRAM_TEST,
                         cache=KernelCache(disk=False), platform=platform)


def test_the_ideal_memory_is_the_default_and_named():
    plan = _compile()
    assert plan.platform == PlatformConfig()
    assert plan.explain().splitlines()[0] == (
        "candidates priced by the analytical model on the ideal memory")
    assert plan.to_dict()["platform"]["memory"] == "ideal"


def test_dram_pricing_is_slower_and_explained():
    ideal, ddr3 = _compile(), _compile(PlatformConfig(memory="ddr3"))
    assert ddr3.explain().splitlines()[0] == (
        "candidates priced by the analytical model on ddr3 MT41K128M16-800, normal refresh")
    assert ddr3.to_dict()["platform"]["memory"] == "ddr3"
    assert len(ideal.kernels) == len(ddr3.kernels)
    for a, b in zip(ideal.kernels, ddr3.kernels, strict=True):
        assert b.predicted_cycles > a.predicted_cycles, (a.name, a.predicted_cycles,
                                                         b.predicted_cycles)
    hot = _compile(PlatformConfig(memory="ddr3", refresh="hot"))
    assert hot.predicted_cycles > ddr3.predicted_cycles


def test_on_dram_each_kernel_is_priced_and_chosen_where_the_memory_plan_puts_it():
    from fusion.cost.analytical import AnalyticalModel

    ddr3 = PlatformConfig(memory="ddr3")
    model = AnalyticalModel(ddr3)
    plan = _compile(ddr3)
    gemms = 0
    for step in plan.kernels:
        placement = plan.memory.placements[step.name]
        features = step.spec.kind.features(DRAM_TEST, step.spec.params)
        assert step.predicted_cycles == model.predict(features.at(placement)), step.name
        if step.spec.kind.name != "gemm":
            continue
        gemms += 1
        # no tiling of the same regions is predicted faster there
        regions = step.spec.regions(DRAM_TEST)
        variants = step.spec.kind.variants(DRAM_TEST, replace(step.spec.params, tiling=None))
        assert len(variants) > 1
        for p in variants:
            if step.spec.kind.regions(DRAM_TEST, p) == regions:
                other = step.spec.kind.features(DRAM_TEST, p).at(placement)
                assert model.predict(other) >= step.predicted_cycles, (step.name, p.tiling)
    assert gemms >= 2
    # on the ideal memory a placement changes nothing: the engine's prices stand
    ideal = _compile()
    for step in ideal.kernels:
        features = step.spec.kind.features(DRAM_TEST, step.spec.params)
        assert step.predicted_cycles == AnalyticalModel().predict(features)
