"""Judging cost models on held-out workloads: the split, the metrics, the side-by-side report.

Rows are split by :attr:`fusion.cost.data.Row.workload`, never row by row: one shape's
tilings and stage sets are near-duplicates, and a model that saw one of them would be judged
on what it memorized. :func:`heldout_report` fits the learned model on the training side and
scores it, the analytical model and SCALE-Sim's formula on the held-out side (``hwgen
train`` prints it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fusion.cost.data import Row, mape, regrets, spearman
from fusion.cost.learned import GRID, LearnedModel, Spec
from fusion.cost.scalesim import ScaleSimModel
from fusion.cost.vectors import energy_nj

#: Share of the workloads held out when none are named.
TEST_FRACTION = 0.25


def split_by_workload(rows: Sequence[Row], test_workloads: Sequence[str] | None = None, *,
                      fraction: float = TEST_FRACTION, seed: int = 0,
                      ) -> tuple[list[Row], list[Row]]:
    """Training and test rows, each workload wholly on one side.

    Parameters
    ----------
    rows : sequence of Row
    test_workloads : sequence of str, optional
        The workloads to hold out; by default ``fraction`` of them (at least one), drawn
        with ``seed`` from the sorted names.
    fraction : float
        Share of the workloads held out when none are named.
    seed : int

    Raises
    ------
    ValueError
        A named workload no row has, or too few workloads to leave two for training (the
        learned model's cross-validation folds by workload) and one for testing.
    """
    names = sorted({r.workload for r in rows})
    if test_workloads is None:
        if len(names) < 3:
            raise ValueError(
                f"holding out by workload needs rows of at least 3 workloads, not "
                f"{len(names)} ({', '.join(map(repr, names)) or 'no rows'}); calibrate more "
                f"kernel shapes (each row's workload names its group)")
        shuffled = names[:]
        random.Random(seed).shuffle(shuffled)
        held = set(shuffled[:min(len(names) - 2, max(1, round(fraction * len(names))))])
    else:
        held = set(test_workloads)
        if not held:
            raise ValueError("no test workloads named; name at least one, or none for the "
                             "default split")
        unknown = sorted(held - set(names))
        if unknown:
            raise ValueError(f"no rows of workload(s) {', '.join(unknown)}; the workloads are "
                             f"{', '.join(names)}")
        if len(set(names) - held) < 2:
            raise ValueError(f"holding out {', '.join(sorted(held))} leaves "
                             f"{len(set(names) - held)} training workload(s); the learned "
                             f"model needs 2 to cross-validate: hold out fewer")
    return ([r for r in rows if r.workload not in held], [r for r in rows if r.workload in held])


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def scores(rows: Sequence[Row], predicted: Sequence[float]) -> dict[str, Any]:
    """MAPE (percent), Spearman's rho, and selection regret (percent: mean and worst over
    the problems with a choice, :func:`fusion.cost.data.regrets`) of ``predicted`` cycles;
    None where undefined (no problem with a choice, constant predictions)."""
    measured = [r.cycles for r in rows]
    r = regrets(rows, predicted)
    return {"n": len(rows), "mape": mape(predicted, measured),
            "spearman": _finite(spearman(predicted, measured)),
            "regret_mean": float(r.mean()) if len(r) else None,
            "regret_max": float(r.max()) if len(r) else None, "choices": len(r)}


def _by_platform(test: Sequence[Row], cycles: np.ndarray, analytical: Sequence[float],
                 energy: np.ndarray) -> dict[str, dict[str, Any]]:
    out = {}
    for platform in sorted({r.platform for r in test}, key=lambda p: p.describe()):
        index = [i for i, r in enumerate(test) if r.platform == platform]
        rows = [test[i] for i in index]
        out[platform.describe()] = {
            "learned": scores(rows, [cycles[i] for i in index]),
            "analytical": scores(rows, [analytical[i] for i in index]),
            "energy_mape": mape(energy[index], np.array([energy_nj(r) for r in rows])),
            "by_placement": _by_placement(rows, [cycles[i] for i in index],
                                          [analytical[i] for i in index])}
    return out


def _by_placement(rows: Sequence[Row], cycles: Sequence[float],
                  analytical: Sequence[float]) -> dict[str, dict[str, Any]]:
    """The scores of the kernels built alone and of those at a model's placement
    (:func:`fusion.cost.data.regrets` never compares the two), each where there are any."""
    out = {}
    for name, placed in (("alone", False), ("placed", True)):
        index = [i for i, r in enumerate(rows) if (r.features.placement is not None) == placed]
        if index:
            part = [rows[i] for i in index]
            out[name] = {"learned": scores(part, [cycles[i] for i in index]),
                         "analytical": scores(part, [analytical[i] for i in index])}
    return out


def heldout_report(rows: Sequence[Row], test_workloads: Sequence[str] | None = None, *,
                   seed: int = 0, grid: Sequence[Spec] = GRID,
                   ) -> tuple[LearnedModel, dict[str, Any]]:
    """Fit the learned model on the training workloads and score it, the analytical model
    and SCALE-Sim's formula on the held-out ones.

    Each row is priced on its own platform. SCALE-Sim's formula covers GEMM-like kinds only
    (:func:`fusion.cost.scalesim.gemm_shape`); its entry is scored on those rows, counted in
    its ``n``.

    Returns
    -------
    LearnedModel
        The model fitted on the training rows.
    dict
        ``n_train``, ``n_test``, and per model ``mape``, ``spearman``, ``regret_mean``,
        ``regret_max`` (with ``n`` and ``choices``); ``energy`` (the energy head's MAPE),
        ``by_platform`` (the learned and analytical scores and the energy MAPE on each
        platform's rows, by :meth:`~hwgen.platform.PlatformConfig.describe`, and in
        ``by_placement`` the same scores of its kernels built ``alone`` and of those
        ``placed`` where a model's memory plan put them),
        ``test_workloads`` and the ``chosen`` specs (by memory).

    Raises
    ------
    ValueError
        As :func:`split_by_workload`; or no successful row on either side.
    """
    ok = [r for r in rows if r.ok]
    if not ok:
        raise ValueError("no successful calibration rows (every run mismatched, or none); "
                         "re-run the calibration")
    train, test = split_by_workload(ok, test_workloads, seed=seed)
    model = LearnedModel.fit(train, seed=seed, grid=grid)
    cycles, energy = model.predict_rows(test)
    analytical = [r.features.analytical_cycles(r.platform) for r in test]
    scalesim = ScaleSimModel()
    covered = [r for r in test if scalesim.covers(r.features)]
    report: dict[str, Any] = {
        "n_train": len(train), "n_test": len(test),
        "learned": scores(test, cycles),
        "analytical": scores(test, analytical),
        "scalesim": (scores(covered, scalesim.predict_many([r.features for r in covered]))
                     if covered else {"n": 0, "mape": None, "spearman": None,
                                      "regret_mean": None, "regret_max": None, "choices": 0}),
        "energy": {"n": len(test),
                   "mape": mape(energy, np.array([energy_nj(r) for r in test]))},
        "by_platform": _by_platform(test, cycles, analytical, energy),
        "test_workloads": sorted({r.workload for r in test}),
        "platforms": sorted({r.platform.describe() for r in test}),
        "chosen": {q: {m: sp.to_dict() for m, sp in specs.items()}
                   for q, specs in (("cycles", model.cycles_spec),
                                    ("energy", model.energy_spec))},
    }
    return model, report


#: The models of the side-by-side table, in its order.
MODELS = ("learned", "analytical", "scalesim")


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(report: dict[str, Any], output: Path | str) -> str:
    """:func:`heldout_report`'s report as ``hwgen train`` prints it: one line per model, then
    per platform, the specs chosen, and where the model was written."""
    lines = [f"trained on {report['n_train']} rows, tested on {report['n_test']} rows of "
             f"{len(report['test_workloads'])} held-out workload(s): "
             f"{', '.join(report['test_workloads'])} ({'; '.join(report['platforms'])})",
             f"{'model':<11} {'n':>5} {'MAPE %':>9} {'Spearman':>9} {'regret %':>9} "
             f"{'worst %':>8}"]
    for name in MODELS:
        s = report[name]
        lines.append(f"{name:<11} {s['n']:>5} {_cell(s['mape'], '.3f'):>9} "
                     f"{_cell(s['spearman'], '.4f'):>9} {_cell(s['regret_mean'], '.3f'):>9} "
                     f"{_cell(s['regret_max'], '.3f'):>8}")
    skipped = report["n_test"] - report["scalesim"]["n"]
    if skipped:
        lines.append(f"scalesim left out {skipped} kernel(s) without a GEMM shape")
    chosen = report["chosen"]
    lines.append(f"energy: learned MAPE {report['energy']['mape']:.3f}% against the counters' "
                 f"estimate")
    for platform, by in report["by_platform"].items():
        lines.append(f"  {platform} ({by['learned']['n']} kernels): MAPE learned "
                     f"{_cell(by['learned']['mape'], '.2f')}%, analytical "
                     f"{_cell(by['analytical']['mape'], '.2f')}%; regret learned "
                     f"{_cell(by['learned']['regret_mean'], '.2f')}% (worst "
                     f"{_cell(by['learned']['regret_max'], '.2f')}%), analytical "
                     f"{_cell(by['analytical']['regret_mean'], '.2f')}% (worst "
                     f"{_cell(by['analytical']['regret_max'], '.2f')}%); energy "
                     f"{_cell(by['energy_mape'], '.2f')}%")
        for where, part in by.get("by_placement", {}).items():
            lines.append(f"    {where} ({part['learned']['n']} kernels, "
                         f"{part['learned']['choices']} choices): MAPE learned "
                         f"{_cell(part['learned']['mape'], '.2f')}%, analytical "
                         f"{_cell(part['analytical']['mape'], '.2f')}%; regret learned "
                         f"{_cell(part['learned']['regret_mean'], '.2f')}% (worst "
                         f"{_cell(part['learned']['regret_max'], '.2f')}%), analytical "
                         f"{_cell(part['analytical']['regret_mean'], '.2f')}% (worst "
                         f"{_cell(part['analytical']['regret_max'], '.2f')}%)")
    for memory in sorted(chosen["cycles"]):
        lines.append(f"chosen on {memory} by grouped cross-validation: cycles "
                     f"{_describe(chosen['cycles'][memory])}; energy "
                     f"{_describe(chosen['energy'][memory])}")
    lines.append(f"model written to {output}")
    return "\n".join(lines)


def _describe(spec: dict[str, Any]) -> str:
    return Spec.from_dict(spec).describe()
