"""Kernel features, calibration rows and the metrics models are judged by (no simulator)."""

import json
import math

import numpy as np
import pytest

from fusion.cost import (
    AnalyticalModel,
    CostModel,
    KernelFeatures,
    Row,
    evaluate,
    mape,
    read_rows,
    spearman,
    write_rows,
)
from fusion.kernels.cache import KernelCache
from fusion.kernels.gemm.build import build_gemm
from fusion.kernels.program import compiled_gemm
from fusion.kernels.tiling import Tiling
from hwgen.presets import SMALL
from hwgen.reference import EpilogueParams

CFG = SMALL
STAGES = ("bias", "requant", "clamp", "residual")
PARAMS = EpilogueParams(mult=1 << 22, shift=30, zp=-5, clamp_lo=-60, clamp_hi=90)


def built(fused=False, tiling=None):
    rng = np.random.default_rng(0)
    return build_gemm(CFG, 9, 20, 11, stages=STAGES, fused=fused, tiling=tiling, params=PARAMS,
                      a=rng.integers(-128, 128, (9, 20)), b=rng.integers(-128, 128, (20, 11)),
                      bias=np.zeros(11, np.int32), residual=np.zeros((9, 11), np.int8))


def test_features_of_a_built_kernel_and_of_a_plan_agree():
    kernel = built(fused=False, tiling=Tiling(tm=1, tn=2, double_buffer=False))
    f = KernelFeatures.from_kernel(kernel)
    planned = KernelFeatures.for_gemm(CFG, 9, 20, 11, stages=STAGES, fused=False,
                                      tiling=Tiling(tm=1, tn=2, double_buffer=False), params=PARAMS)
    assert f.tiling == planned.tiling == kernel.tiling
    assert f.pass_dtypes == planned.pass_dtypes == ("i32", "i8", "i8", "i8")
    assert f.program_words == len(kernel.program) and planned.program_words is None
    assert (f.bytes_loaded, f.bytes_stored) == (kernel.bytes_loaded, kernel.bytes_stored)
    assert AnalyticalModel().predict(f) == AnalyticalModel().predict(planned)


def test_features_of_a_cached_kernel_equal_those_of_the_built_one(tmp_path):
    kernel = built(fused=True)
    cached = compiled_gemm(CFG, 9, 20, 11, stages=STAGES, params=PARAMS,
                           cache=KernelCache(tmp_path))
    assert KernelFeatures.from_kernel(cached) == KernelFeatures.from_kernel(kernel)


def test_features_round_trip_through_json():
    f = KernelFeatures.from_kernel(built(fused=False))
    assert KernelFeatures.from_dict(json.loads(json.dumps(f.to_dict()))) == f


def test_features_refuse_what_they_cannot_describe():
    with pytest.raises(ValueError, match="resolved tiling"):
        KernelFeatures(config=CFG, M=4, K=4, N=4, tiling=Tiling())
    with pytest.raises(ValueError, match=r"has 1 pass dtype\(s\), not \[\]"):
        KernelFeatures(config=CFG, M=4, K=4, N=4, stages=("bias",), fused=False,
                       tiling=Tiling(kt=8))
    data = KernelFeatures.for_gemm(CFG, 4, 4, 4).to_dict()
    with pytest.raises(ValueError, match="features version 0"):
        KernelFeatures.from_dict({**data, "version": 0})
    with pytest.raises(ValueError, match="but their config hashes to"):
        KernelFeatures.from_dict({**data, "variant": "0" * 16})


def test_rows_round_trip_and_name_a_bad_line(tmp_path):
    f = KernelFeatures.for_gemm(CFG, 8, 16, 8, stages=("bias",))
    rows = [Row(f, {"cycles": 100, "instret": 7}, True, {"seed": 3}),
            Row(f, {"cycles": 120}, False)]
    path = tmp_path / "cal.jsonl"
    assert write_rows(path, rows) == 2
    assert read_rows(path) == rows
    with path.open("a") as out:
        out.write('{"format": "something else"}\n')
    with pytest.raises(ValueError, match=r"cal.jsonl:3: not a calibration row"):
        read_rows(path)


def test_mape_and_spearman():
    assert mape([110, 90], [100, 100]) == pytest.approx(10.0)
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties take their average rank: ranks (1.5, 1.5, 3) and (1, 2, 3)
    assert spearman([5, 5, 7], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    assert math.isnan(spearman([1, 1], [1, 2]))
    with pytest.raises(ValueError, match="equally many"):
        mape([1], [1, 2])


class Constant(CostModel):
    name = "constant"

    def predict(self, features):
        return 100.0


def test_evaluate_uses_only_successful_runs():
    f = KernelFeatures.for_gemm(CFG, 8, 16, 8)
    rows = [Row(f, {"cycles": 100}), Row(f, {"cycles": 200}), Row(f, {"cycles": 1}, ok=False)]
    ev = evaluate(Constant(), rows)
    assert (ev.n, ev.mape, ev.worst) == (2, pytest.approx(25.0), pytest.approx(50.0))
    assert "constant: 2 kernels, MAPE 25.00%" in ev.summary()
    # both rows solve the same problem and the model cannot tell them apart: a tie goes to
    # the first row, here the faster one; swapped, the choice costs 2x
    assert ev.regret == pytest.approx(0.0)
    assert evaluate(Constant(), rows[1::-1]).regret == pytest.approx(100.0)
    with pytest.raises(ValueError, match="no successful calibration rows"):
        evaluate(Constant(), rows[2:])


class ByTiling(CostModel):
    name = "by tiling"

    def predict(self, features):
        return 100.0 * features.tiling.tm


def test_regret_is_the_cost_of_the_models_choice():
    f1 = KernelFeatures.for_gemm(CFG, 16, 16, 16, tiling=Tiling(tm=1))
    f2 = KernelFeatures.for_gemm(CFG, 16, 16, 16, tiling=Tiling(tm=2))
    other = KernelFeatures.for_gemm(CFG, 8, 16, 16)  # a problem with no choice: ignored
    rows = [Row(f1, {"cycles": 150}), Row(f2, {"cycles": 100}), Row(other, {"cycles": 9})]
    assert evaluate(ByTiling(), rows).regret == pytest.approx(50.0)  # picked tm=1: 1.5x
    assert math.isnan(evaluate(ByTiling(), rows[2:]).regret)
