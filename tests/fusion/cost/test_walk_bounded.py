"""Pricing is bounded whatever the shape: the analytical walk runs a loop's body until the
machine repeats itself, then extrapolates, so 1000 times the rows is no more work."""

import pytest

from fusion.cost import estimate
from fusion.cost.machine import Machine
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.tiling import Tiling
from hwgen.config import EPILOGUE_STAGES
from hwgen.presets import SIM_VARIANTS, SMALL


def body_runs(monkeypatch, features) -> int:
    runs = [0]
    repeat = Machine.repeat

    def counting(self, count, body):
        def counted():
            runs[0] += 1
            body()
        return repeat(self, count, counted)

    monkeypatch.setattr(Machine, "repeat", counting)
    estimate(features)
    monkeypatch.setattr(Machine, "repeat", repeat)
    return runs[0]


@pytest.mark.parametrize(("config", "k", "n", "stages", "fused", "tiling"), [
    (SIM_VARIANTS["2x2"], 64, 16, EPILOGUE_STAGES, True, Tiling(tm=4, tn=2)),
    (SIM_VARIANTS["4x4"], 300, 64, ("bias", "requant", "relu"), False, Tiling(tm=2, tn=1)),
    (SMALL, 1000, 5, ("bias",), True, Tiling(kt=8)),
    (SIM_VARIANTS["4x8"], 7, 200, (), True, Tiling(tm=8, tn=3, order="nm")),
])
def test_the_walk_does_not_grow_with_the_rows(monkeypatch, config, k, n, stages, fused,
                                              tiling):
    runs = [body_runs(monkeypatch, GemmFeatures.for_gemm(
        config, m, k, n, stages=stages, fused=fused, tiling=tiling)) for m in (3001, 3_000_001)]
    assert runs[1] <= 2 * runs[0], runs  # walked tile by tile it would be 1000 times
