"""The analytical model's DRAM terms against the DDR3 simulation (slow: one build)."""

import pytest

from fusion.cost.analytical import AnalyticalModel
from fusion.kernels.gemm.features import GemmFeatures
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig

V = VariantConfig(rows=8, cols=8, port_bytes=16, mem_addr_bits=21,
                  epilogue=("bias", "requant", "relu"))
DDR3 = PlatformConfig(memory="ddr3")

#: The bound the model is held to per kernel: 35% while it priced loads and stores as if each
#: had the port alone; within 3% of these kernels since it prices the port they share
#: (``sim.dram_interplay``'s figures; its MAPE over 120 kernels is in docs/memory.md).
BOUND = 0.05


@pytest.fixture(scope="session")
def ddr3_build():
    from sim.build import build_variant

    return build_variant(V, platform=DDR3)


@pytest.mark.slow
def test_ddr3_cycles_within_the_stated_bound(ddr3_build):
    from sim.gemm_check import GemmCase, run_gemms

    cases = [GemmCase(64, 64, 64), GemmCase(200, 37, 91, stages=V.epilogue),
             GemmCase(16, 1024, 16), GemmCase(96, 128, 64, stages=V.epilogue, fused=False)]
    reports = run_gemms(V, cases, build=ddr3_build)
    model, ideal = AnalyticalModel(DDR3), AnalyticalModel()
    for case, r in zip(cases, reports, strict=True):
        assert r.ok, r.summary()
        f = GemmFeatures.from_kernel(case.kernel(V))
        predicted = model.predict(f)
        assert abs(predicted - r.cycles) / r.cycles <= BOUND, (case, predicted, r.cycles)
        # the DRAM terms only add cycles to the ideal walk, and the hardware agrees
        assert ideal.predict(f) <= predicted <= r.cycles * (1 + BOUND)
        assert ideal.predict(f) < r.cycles
