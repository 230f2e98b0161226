"""Calibration rows, and how a cost model is judged against them.

A row is one measured kernel: its features (:class:`~fusion.cost.model.Features` of its kind)
and the counters the hardware reported, one JSON object per line (JSONL). ``sim.calibrate``
writes them; this module reads them, so that cost models learn and are evaluated without the
simulator.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusion.cost.model import CostModel, Features
from hwgen.platform import PlatformConfig

#: Format tag and version of a calibration row.
ROW_FORMAT = "hwgen-calibration"
ROW_VERSION = 1


@dataclass(frozen=True)
class Row:
    """One measured kernel.

    Attributes
    ----------
    features : Features
        The kernel on its variant (the kind's features).
    counters : dict of str to int
        Every counter the run reported.
    ok : bool
        The run's output equalled the reference (a mismatch is recorded, never learned from).
    extra : dict, optional
        Anything else recorded (seed, wall times, tool versions).
    platform : PlatformConfig
        The board memory it ran on.
    workload : str
        What the kernel came from (a calibration sweep's name, a model's): cross-validation
        keeps one workload's kernels on one side of a split.
    """

    features: Features
    counters: dict[str, int]
    ok: bool = True
    extra: dict[str, Any] | None = None
    platform: PlatformConfig = field(default_factory=PlatformConfig)
    workload: str = ""

    @property
    def cycles(self) -> int:
        return int(self.counters["cycles"])

    def to_dict(self) -> dict[str, Any]:
        return {"format": ROW_FORMAT, "version": ROW_VERSION,
                "variant": self.features.config.key(), "features": self.features.to_dict(),
                "platform": self.platform.to_dict(), "workload": self.workload,
                "counters": dict(self.counters), "ok": self.ok, **(self.extra or {})}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        if data.get("format") != ROW_FORMAT or data.get("version") != ROW_VERSION:
            raise ValueError(f"not a version {ROW_VERSION} calibration row "
                             f"(format {data.get('format')!r}, version {data.get('version')!r})")
        extra = {k: v for k, v in data.items() if k not in
                 {"format", "version", "variant", "features", "counters", "ok", "platform",
                  "workload"}}
        platform = PlatformConfig.from_dict(data.get("platform") or {})
        return cls(row_features(data["features"], extra), check_counters(data["counters"]),
                   bool(data.get("ok", True)), extra or None, platform,
                   str(data.get("workload", "")))


#: The largest value a counter is read with: 2**62 cycles are over a thousand years at
#: 100 MHz, so anything above is damage, not a measurement (and 1e308 would be priced).
MAX_COUNTER = 1 << 62


def check_counter(name: str, value: Any) -> int:
    """``value`` as the counter ``name``: a whole number from 0 (``cycles``: from 1, as a run
    takes at least one cycle and the engine divides by it) to :data:`MAX_COUNTER`.

    Raises
    ------
    ValueError
        Anything else (a float, a bool, text, a negative number), naming the counter.
    """
    low = 1 if name == "cycles" else 0
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNTER:
        raise ValueError(f"counter {name} {value!r}, not a whole number from {low} to 2**62")
    return value


def check_counters(counters: Any) -> dict[str, int]:
    """A row's counters, each checked by :func:`check_counter`.

    Raises
    ------
    ValueError
        Counters that are not an object, or a counter out of range, naming it.
    """
    if not isinstance(counters, dict):
        raise ValueError("counters are not an object")
    return {str(name): check_counter(str(name), value) for name, value in counters.items()}


def row_features(data: dict[str, Any], extra: dict[str, Any] | None) -> Features:
    """A row's features from their JSON (:meth:`Features.to_dict`), at the placement its
    ``extra`` records (a model's kernel, where its memory plan put it): on a DRAM that
    prices it (:attr:`fusion.cost.model.Features.placement`).

    Raises
    ------
    KeyError, TypeError, ValueError
        Features or a placement this hwgen cannot read.
    """
    # the kinds' registry reads each kind's features; imported here, not at the top, so
    # that the kinds (which use fusion.cost.analytical) can import this package
    from fusion.kernels.kinds import features_from_dict

    placement = (extra or {}).get("placement")
    if placement is not None and not isinstance(placement, dict):
        raise ValueError(f"a placement is a region -> word address object, not {placement!r}")
    return features_from_dict(data).at(placement)


def write_rows(path: Path | str, rows: Iterable[Row], *, append: bool = True) -> int:
    """Write ``rows`` as JSONL (appending by default); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a" if append else "w") as f:
        for row in rows:
            f.write(json.dumps(row.to_dict(), sort_keys=True) + "\n")
            n += 1
    return n


def read_rows(path: Path | str) -> list[Row]:
    """Rows of a JSONL file, naming the line of any malformed one.

    Raises
    ------
    ValueError
        A line that is not JSON or not a calibration row of this version.
    """
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(Row.from_dict(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: not a calibration row ({exc})") from None
    return rows


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error, in percent."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    if len(p) != len(m) or not len(m):
        raise ValueError(f"need equally many predictions and measurements, not {len(p)} and "
                         f"{len(m)}")
    return float(np.mean(np.abs(p - m) / m) * 100.0)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties given their average rank (as Spearman's rho needs)."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), float)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's r of the tie-averaged ranks)."""
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    if len(ra) < 2 or ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


@dataclass(frozen=True)
class Evaluation:
    """How well a model's predictions match measured cycles.

    ``regret`` is what choosing by the model costs: over each group of rows that solve the
    same problem (kind, variant, platform and :attr:`fusion.cost.model.Features.problem`:
    shape, stages; see :func:`regrets`) in different ways (fused or not, tilings), how much
    slower the kernel with the least predicted cycles measured than the fastest one, in
    percent, averaged over the groups with a choice (NaN when none has).
    """

    model: str
    n: int
    mape: float
    spearman: float
    worst: float  # the largest absolute percentage error
    regret: float = math.nan

    def summary(self) -> str:
        return (f"{self.model}: {self.n} kernels, MAPE {self.mape:.2f}%, "
                f"Spearman {self.spearman:.4f}, worst {self.worst:.1f}%, "
                f"regret {self.regret:.3f}%")


#: The fields of a kernel's features known only once it is built (a sweep builds its kernels;
#: the engine prices candidates before it builds them, and the runtime records a kernel's
#: features from its parameters): no model may use them, and a kernel is the same candidate
#: with or without them.
BUILT_FIELDS = frozenset({"program_words", "bytes_loaded", "bytes_stored"})

#: The fields of a kernel's features that are the engine's choice for one computation (fusion,
#: tiling, loop order, buffering, streaming; and the passes' types, which follow from
#: fusion). Kernels that differ only in these are candidates of one choice; any other
#: difference (shape, stages, quantization, layout) is another computation.
STRATEGY_FIELDS = frozenset({"fused", "tiling", "pass_dtypes"})


def regrets(rows: Sequence[Row], predicted: Sequence[float]) -> np.ndarray:
    """Selection regret of each choice ``predicted`` makes among ``rows``, in percent.

    Rows are grouped by what they compute on which hardware (their features but for
    :data:`STRATEGY_FIELDS`, and the platform) under which conditions: built alone, or at a
    model's placement (:attr:`fusion.cost.model.Features.placement`: on a DRAM the banks
    its regions fall in change its cycles, so a candidate measured alone is not compared
    with one measured at a model's addresses). Within a group, rows are grouped by candidate
    (identical features and placement): a kernel measured several times is one candidate,
    its measured cycles their mean. In each group of more than one candidate, the regret is
    how much slower the candidate with the least predicted cycles measured than the fastest
    candidate. Empty when no group has a choice (kinds without strategies, such as passes,
    never have one).
    """
    groups: dict[tuple, dict[str, list]] = {}
    for row, p in zip(rows, predicted, strict=True):
        d = {k: v for k, v in row.features.to_dict().items() if k not in BUILT_FIELDS}
        computation = {k: v for k, v in d.items() if k not in STRATEGY_FIELDS}
        placed = row.features.placement
        candidates = groups.setdefault(
            (row.platform.key(), placed is not None, json.dumps(computation, sort_keys=True)),
            {})
        key = json.dumps([d, placed], sort_keys=True)
        candidates.setdefault(key, [float(p), []])[1].append(row.cycles)
    out = []
    for candidates in groups.values():
        if len(candidates) < 2:
            continue
        g = [(p, float(np.mean(cycles))) for p, cycles in candidates.values()]
        # a tie in the predictions goes to the first candidate: a model that cannot tell
        # kernels apart gets no credit for the order they happened to be measured in
        out.append((min(g, key=lambda pc: pc[0])[1] / min(c for _, c in g) - 1) * 100.0)
    return np.array(out, dtype=float)


def _regret(rows: Sequence[Row], predicted: np.ndarray) -> float:
    r = regrets(rows, predicted)
    return float(r.mean()) if len(r) else math.nan


def evaluate(model: CostModel, rows: Sequence[Row]) -> Evaluation:
    """``model``'s MAPE, Spearman correlation and regret over ``rows`` (those that ran ``ok``)."""
    rows = [r for r in rows if r.ok]
    if not rows:
        raise ValueError("no successful calibration rows to evaluate against")
    predicted = model.predict_many([r.features for r in rows])
    measured = np.array([r.cycles for r in rows], float)
    errors = np.abs(predicted - measured) / measured * 100.0
    return Evaluation(model=model.name, n=len(rows), mape=float(errors.mean()),
                      spearman=spearman(predicted, measured), worst=float(errors.max()),
                      regret=_regret(rows, predicted))
