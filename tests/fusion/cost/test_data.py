"""Calibration rows and the metrics models are judged by (no simulator)."""

import json
import math

import pytest

from fusion.cost import (
    CostModel,
    Row,
    evaluate,
    mape,
    read_rows,
    regrets,
    spearman,
    write_rows,
)
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.tiling import Tiling
from hwgen.presets import SMALL
from hwgen.reference import EpilogueParams

CFG = SMALL
STAGES = ("bias", "requant", "clamp", "residual")
PARAMS = EpilogueParams(mult=1 << 22, shift=30, zp=-5, clamp_lo=-60, clamp_hi=90)


def test_rows_round_trip_and_name_a_bad_line(tmp_path):
    f = GemmFeatures.for_gemm(CFG, 8, 16, 8, stages=("bias",))
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
    f = GemmFeatures.for_gemm(CFG, 8, 16, 8)
    rows = [Row(f, {"cycles": 100}), Row(f, {"cycles": 200}), Row(f, {"cycles": 1}, ok=False)]
    ev = evaluate(Constant(), rows)
    assert (ev.n, ev.mape, ev.worst) == (2, pytest.approx(25.0), pytest.approx(50.0))
    assert "constant: 2 kernels, MAPE 25.00%" in ev.summary()
    # the same kernel measured twice is one candidate: no choice, so no regret
    assert math.isnan(ev.regret)
    # two candidates of one problem the model cannot tell apart: a tie goes to the first
    # one, here the slower; swapped, the choice costs nothing
    g = GemmFeatures.for_gemm(CFG, 8, 16, 8, tiling=Tiling(tm=1, tn=1, double_buffer=False))
    choice = [Row(g, {"cycles": 200}), rows[0]]
    assert evaluate(Constant(), choice).regret == pytest.approx(100.0)
    assert evaluate(Constant(), choice[::-1]).regret == pytest.approx(0.0)
    with pytest.raises(ValueError, match="no successful calibration rows"):
        evaluate(Constant(), rows[2:])


class ByTiling(CostModel):
    name = "by tiling"

    def predict(self, features):
        return 100.0 * features.tiling.tm


def test_regret_is_the_cost_of_the_models_choice():
    f1 = GemmFeatures.for_gemm(CFG, 16, 16, 16, tiling=Tiling(tm=1))
    f2 = GemmFeatures.for_gemm(CFG, 16, 16, 16, tiling=Tiling(tm=2))
    other = GemmFeatures.for_gemm(CFG, 8, 16, 16)  # a problem with no choice: ignored
    rows = [Row(f1, {"cycles": 150}), Row(f2, {"cycles": 100}), Row(other, {"cycles": 9})]
    assert evaluate(ByTiling(), rows).regret == pytest.approx(50.0)  # picked tm=1: 1.5x
    # a candidate measured more than once counts at its mean
    again = rows + [Row(f1, {"cycles": 130}), Row(f2, {"cycles": 90}), Row(f2, {"cycles": 110})]
    assert evaluate(ByTiling(), again).regret == pytest.approx(40.0)  # 140 against 100
    assert math.isnan(evaluate(ByTiling(), rows[2:]).regret)


def test_a_placed_candidate_is_compared_only_with_candidates_placed_too():
    # at a model's addresses a kernel shares DRAM banks differently than built alone: the
    # alone pair and the placed pair are two choices, never one candidate's mean
    at = {"a": 0, "b": 4096, "c": 8192}
    f1 = GemmFeatures.for_gemm(CFG, 16, 16, 16, tiling=Tiling(tm=1))
    f2 = GemmFeatures.for_gemm(CFG, 16, 16, 16, tiling=Tiling(tm=2))
    alone = [Row(f1, {"cycles": 150}), Row(f2, {"cycles": 100})]
    placed = [Row(f1.at(at), {"cycles": 100}), Row(f2.at(at), {"cycles": 100})]
    r = regrets(alone + placed, [1.0, 2.0, 1.0, 2.0])
    assert sorted(r) == [pytest.approx(0.0), pytest.approx(50.0)]
    # merged, tm=1 would be one candidate at (150 + 100) / 2 against tm=2's 100
    assert regrets([*alone, placed[0]], [1.0, 2.0, 1.0]) == pytest.approx([50.0])


def test_a_rows_placement_travels_in_extra_and_prices_its_features(tmp_path):
    f = GemmFeatures.for_gemm(CFG, 8, 16, 8, stages=("bias",))
    at = {"a": 4096, "b": 0, "bias": 2048, "out": 8192}
    assert f.at(at).placement == (("a", 4096), ("b", 0), ("bias", 2048), ("out", 8192))
    assert f.at(at).to_dict() == f.to_dict()  # not the kernel's identity
    assert f.at(None) == f.at({}) == f
    row = Row(f.at(at), {"cycles": 100}, True, {"placement": at})
    assert Row.from_dict(row.to_dict()) == row
    path = tmp_path / "cal.jsonl"
    write_rows(path, [row])
    assert read_rows(path)[0].features.placement == f.at(at).placement
    bad = {**row.to_dict(), "placement": [4096, 0]}
    with pytest.raises(ValueError, match="region -> word address"):
        Row.from_dict(bad)


@pytest.mark.parametrize("counters, problem", [
    ('{"cycles": 0}', "cycles 0, not a whole number from 1 to"),
    ('{"cycles": -7}', "cycles -7, not a whole number from 1 to"),
    ('{"cycles": Infinity}', "cycles inf, not a whole number from 1 to"),
    ('{"cycles": 1e308}', "cycles 1e+308, not a whole number from 1 to"),
    ('{"cycles": 2.5}', "cycles 2.5, not a whole number from 1 to"),
    ('{"cycles": true}', "cycles True, not a whole number from 1 to"),
    ('{"cycles": 5, "stall_memory": NaN}', "stall_memory nan, not a whole number from 0 to"),
    ('{"cycles": 5, "instret": "7"}', "instret '7', not a whole number from 0 to"),
    ('[5]', "counters are not an object"),
])
def test_odd_counters_are_refused_naming_the_line(tmp_path, counters, problem):
    f = GemmFeatures.for_gemm(CFG, 8, 16, 8, stages=("bias",))
    good = Row(f, {"cycles": 100}, True).to_dict()
    path = tmp_path / "cal.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(good).replace(
        '"counters": {"cycles": 100}', f'"counters": {counters}') + "\n")
    with pytest.raises(ValueError) as exc:
        read_rows(path)
    assert str(exc.value).startswith(f"{path}:2: not a calibration row (counter {problem}") \
        or str(exc.value).startswith(f"{path}:2: not a calibration row ({problem}"), exc.value
