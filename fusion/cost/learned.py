"""The learned cost model: scikit-learn regressors fitted to calibration rows.

A kernel becomes a vector of named numbers (:func:`fusion.cost.vectors.featurize`: its kind
and shapes, tiling, variant, platform, and the analytical estimate on that platform, so that
a regressor can learn what the analytical model misses rather than the whole cost). Two
heads are fitted on the same vectors: one predicts the ``cycles`` counter, the other the
energy :func:`hwgen.energy.estimate` gives from the counters.

Each head's regressor (a random forest, histogram gradient boosting, or a constant: the
analytical estimate as it is or scaled), its hyperparameters and its target (``log`` of the
quantity, or the ``residual`` log of measured over analytical) are chosen from :data:`GRID`
by grouped cross-validation: the folds split by :attr:`fusion.cost.data.Row.workload`, so
near-duplicates (one shape's tilings) are never on both sides of a fold.

A model is saved without pickle (:mod:`fusion.cost.learned_store`): the training rows, the
chosen specs and a few recorded predictions, and the fitted regressors with ``skops`` (an
allow-list of types) so that loading does not refit.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.cost.data import Row
from fusion.cost.model import CostModel, Features
from fusion.cost.vectors import energy_nj, matrix, row_vectors, vectors
from hwgen.platform import PlatformConfig

#: What a head's regressor fits: ``log`` of the quantity, or the ``residual`` log of the
#: quantity over its analytical estimate (the regressor learns the analytical model's error;
#: see :func:`fusion.cost.vectors.analytical`).
TARGETS: tuple[str, ...] = ("log", "residual")

#: Percentage points of cross-validated MAPE a later (more complex) spec of the grid must
#: gain to be chosen over an earlier one. On the ideal memory the analytical estimate is
#: exact on nearly every kernel and a forest of its residuals gains a few hundredths of a
#: point on the sweep's odd GEMMs, then adds as much error on kernels where the estimate is
#: exact; a difference that small is no evidence (a DRAM refresh's phase alone moves a
#: kernel by more).
CV_TOLERANCE = 0.1


@dataclass(frozen=True)
class Spec:
    """One candidate of the grid: a regressor, its hyperparameters and a target.

    Parameters
    ----------
    regressor : {"forest", "boosting", "constant"}
        scikit-learn's ``RandomForestRegressor``, ``HistGradientBoostingRegressor``, or
        ``DummyRegressor`` (a constant: on the ``residual`` target, the analytical estimate
        as it is, or scaled by the median ratio; cross-validation keeps it when the trees do
        not beat it).
    params : dict
        Keyword arguments of the regressor (JSON types; the seed is added when built).
    target : {"log", "residual"}
        See :data:`TARGETS`.
    """

    regressor: str
    params: dict[str, Any] = field(hash=False)
    target: str = "residual"

    def __post_init__(self) -> None:
        if self.regressor not in _REGRESSORS:
            raise ValueError(f"regressor must be one of {', '.join(_REGRESSORS)}, not "
                             f"{self.regressor!r}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, not "
                             f"{self.target!r}")

    def build(self, seed: int) -> Any:
        """The unfitted regressor, seeded."""
        return _REGRESSORS[self.regressor](seed, **self.params)

    def describe(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.regressor}({params}) on {self.target} target"

    def to_dict(self) -> dict[str, Any]:
        return {"regressor": self.regressor, "params": dict(self.params),
                "target": self.target}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Spec:
        return cls(str(data["regressor"]), dict(data["params"]), str(data["target"]))


def _forest(seed: int, **kw: Any) -> Any:
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_jobs=1, random_state=seed, **kw)


def _boosting(seed: int, **kw: Any) -> Any:
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(early_stopping=False, random_state=seed, **kw)


def _constant(seed: int, **kw: Any) -> Any:
    from sklearn.dummy import DummyRegressor

    return DummyRegressor(**kw)


_REGRESSORS = {"forest": _forest, "boosting": _boosting, "constant": _constant}

#: The candidates cross-validation chooses from: small, since calibrations are hundreds to
#: thousands of rows and a tree ensemble's defaults are already sound there. The constants
#: come first, so that a tree ensemble has to do better than the analytical estimate (as it
#: is, or scaled) to be chosen, not merely as well: on the ideal memory the estimate is
#: within a few cycles and the trees only add noise to it.
GRID: tuple[Spec, ...] = (
    Spec("constant", {"strategy": "constant", "constant": 0.0}, "residual"),
    Spec("constant", {"strategy": "median"}, "residual"),
    *(Spec(regressor, params, target)
      for target in TARGETS
      for regressor, params in (
          [("forest", {"n_estimators": 60, "min_samples_leaf": leaf, "max_features": 1.0})
           for leaf in (1, 3)]
          + [("boosting", {"max_iter": 200, "learning_rate": lr, "min_samples_leaf": leaf,
                           "max_leaf_nodes": 15})
             for lr, leaf in ((0.1, 3), (0.1, 10), (0.05, 3))])))


# -- one head: a regressor of one quantity ---------------------------------------------------


@dataclass
class Head:
    """A fitted regressor of one quantity (``"cycles"`` or ``"energy"``) over given columns."""

    quantity: str
    spec: Spec
    columns: list[str]
    regressor: Any

    @classmethod
    def fit(cls, quantity: str, spec: Spec, columns: list[str], x: np.ndarray, y: np.ndarray,
            base: np.ndarray, seed: int) -> Head:
        reg = spec.build(seed)
        with _one_thread():
            reg.fit(x, _to_target(spec.target, y, base))
        return cls(quantity, spec, columns, reg)

    def predict(self, x: np.ndarray, base: np.ndarray) -> np.ndarray:
        with _one_thread():
            return _from_target(self.spec.target, self.regressor.predict(x), base)


def _to_target(target: str, y: np.ndarray, base: np.ndarray) -> np.ndarray:
    return np.log(y) - (np.log(base) if target == "residual" else 0.0)


def _from_target(target: str, t: np.ndarray, base: np.ndarray) -> np.ndarray:
    # base * exp(t), not exp(log base + t): a zero residual gives the base to the last bit
    return base * np.exp(t) if target == "residual" else np.exp(t)


def _one_thread() -> Any:
    """Fits and predictions on one OpenMP thread: the data are small, and on a machine whose
    cores are busy (simulations) spinning OpenMP threads make a fit ten times slower; one
    thread also sums in the same order everywhere."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="openmp")


def _folds(groups: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Grouped folds (up to five): one workload's rows are all in one fold's test side."""
    from sklearn.model_selection import GroupKFold

    n = len(set(groups))
    if n < 2:
        raise ValueError(f"cross-validation needs rows of at least 2 workloads, not {n}; "
                         f"calibrate more kernel shapes (each row's workload names its group)")
    idx = np.zeros(len(groups))
    return list(GroupKFold(n_splits=min(5, n)).split(idx, groups=list(groups)))


def _choose(grid: Sequence[Spec], x: np.ndarray, y: np.ndarray, base: np.ndarray,
            folds: list[tuple[np.ndarray, np.ndarray]], seed: int) -> tuple[Spec, list[dict]]:
    """The first spec of ``grid`` whose out-of-fold MAPE is within :data:`CV_TOLERANCE` of
    the least (the grid lists the simplest first), and every score."""
    scores = []
    for spec in grid:
        oof = np.empty(len(y))
        for train, test in folds:
            head = Head.fit("", spec, [], x[train], y[train], base[train], seed)
            oof[test] = head.predict(x[test], base[test])
        scores.append({**spec.to_dict(),
                       "cv_mape": float(np.mean(np.abs(oof - y) / y) * 100.0)})
    least = min(s["cv_mape"] for s in scores)
    best = next(i for i, s in enumerate(scores) if s["cv_mape"] <= least + CV_TOLERANCE)
    return grid[best], scores


def _kernel_key(row: Row) -> tuple:
    return row.platform, json.dumps(row.features.to_dict(), sort_keys=True)


def _by_memory(rows: Sequence[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault(r.platform.memory, []).append(r)
    return out


def _spec_of(spec: Spec | dict[str, Spec], memory: str) -> Spec:
    if isinstance(spec, Spec):
        return spec
    if memory not in spec:
        raise ValueError(f"no spec for the {memory} memory's rows (specs for "
                         f"{', '.join(sorted(spec))})")
    return spec[memory]


def _training_rows(rows: Sequence[Row]) -> list[Row]:
    rows = [r for r in rows if r.ok]
    if not rows:
        raise ValueError("no successful calibration rows to learn from; record some with "
                         "sim.calibrate (rows whose output mismatched are never learned from)")
    return rows


# -- the model ------------------------------------------------------------------------------


class LearnedModel(CostModel):
    """Cycles (and energy) predicted by regressors fitted to calibration rows.

    Each memory (``ideal``, ``sdr``, ``ddr3``: :attr:`hwgen.platform.PlatformConfig.memory`)
    has its own pair of heads, fitted to its own rows and chosen by its own cross-validation:
    on the ideal memory the analytical estimate is exact and the constant wins there, while
    on a DRAM the trees learn what the first-order memory model misses; one regressor over
    both would trade the one's exactness for the other's residual. A platform whose memory
    has no rows is refused (:meth:`covers`), never priced by another memory's heads.

    Make one with :meth:`fit` (choosing by cross-validation) or
    :func:`fusion.cost.learned_store.load`. A model is
    bound to one platform for :meth:`predict` (the interface's predict takes only features):
    the ideal memory by default, another through :meth:`on`.

    Parameters
    ----------
    rows : sequence of Row
        Calibration rows (those not ``ok`` are left out).
    cycles, energy : Spec or dict of str to Spec
        Each head's spec: one for every memory, or one per memory of the rows.
    seed : int
        The regressors' seed.
    platform : PlatformConfig, optional
        The memory :meth:`predict` prices kernels on (the ideal memory by default).
    cv : dict, optional
        Cross-validation scores, by memory then head (kept for the record).

    Attributes
    ----------
    rows : list of Row
        The rows it was fitted to (``ok`` ones only).
    memories : tuple of str
        The memories it has heads for.
    """

    name = "learned"

    def __init__(self, rows: Sequence[Row], cycles: Spec | dict[str, Spec],
                 energy: Spec | dict[str, Spec], *, seed: int = 0,
                 platform: PlatformConfig | None = None,
                 cv: dict[str, dict[str, list[dict]]] | None = None) -> None:
        self.rows = _training_rows(rows)
        self.seed = seed
        self.platform = platform if platform is not None else PlatformConfig()
        self.cv = cv or {}
        self._heads: dict[str, dict[str, Head]] = {}
        for memory, group in _by_memory(self.rows).items():
            specs = {"cycles": _spec_of(cycles, memory), "energy": _spec_of(energy, memory)}
            self._heads[memory] = _fit_heads(group, *row_vectors(group), specs, seed)
        self.memories = tuple(sorted(self._heads))

    @classmethod
    def fit(cls, rows: Sequence[Row], *, seed: int = 0,
            grid: Sequence[Spec] = GRID) -> LearnedModel:
        """Choose each memory's heads' specs from ``grid`` by cross-validation grouped by
        workload, then fit them to all of that memory's rows.

        Parameters
        ----------
        rows : sequence of Row
            Calibration rows (those not ``ok`` are left out), of at least two workloads on
            each memory.
        seed : int
            Seed of every regressor: the same rows and seed give the same model.
        grid : sequence of Spec
            The candidates (:data:`GRID` by default).

        Raises
        ------
        ValueError
            No usable rows, or fewer than two workloads on a memory to fold by.
        """
        rows = _training_rows(rows)
        if not grid:
            raise ValueError("the grid of candidates is empty; pass at least one Spec")
        heads: dict[str, dict[str, Head]] = {}
        cv: dict[str, dict[str, list[dict]]] = {}
        for memory, group in _by_memory(rows).items():
            vecs, bases = row_vectors(group)  # featurized once: for the folds and the fit
            x = matrix(vecs, sorted({c for v in vecs for c in v}))
            try:
                folds = _folds([r.workload for r in group])
            except ValueError as exc:
                raise ValueError(f"on the {memory} memory: {exc}") from None
            cv[memory], specs = {}, {}
            for quantity, y in (("cycles", _cycles(group)), ("energy", _energies(group))):
                specs[quantity], cv[memory][quantity] = _choose(
                    grid, x, y, bases[quantity], folds, seed)
            heads[memory] = _fit_heads(group, vecs, bases, specs, seed)
        return cls.from_fitted(rows, heads, seed=seed, platform=PlatformConfig(), cv=cv)

    @property
    def cycles_spec(self) -> dict[str, Spec]:
        """The cycles heads' regressor, hyperparameters and target, by memory."""
        return {m: h["cycles"].spec for m, h in self._heads.items()}

    @property
    def energy_spec(self) -> dict[str, Spec]:
        """The energy heads' regressor, hyperparameters and target, by memory."""
        return {m: h["energy"].spec for m, h in self._heads.items()}

    def refitted(self, rows: Sequence[Row]) -> LearnedModel:
        """The same specs fitted again with ``rows`` (newer measurements, such as the
        runtime's since the hardware drifted): each replaces the model's own rows of the
        same kernel on the same platform, and the rest of the model's rows stay. Bound to
        the same platform.

        Raises
        ------
        ValueError
            No successful row in ``rows``.
        """
        rows = _training_rows(rows)
        newer = {_kernel_key(r) for r in rows}
        kept = [r for r in self.rows if _kernel_key(r) not in newer]
        return LearnedModel(kept + rows, self.cycles_spec, self.energy_spec, seed=self.seed,
                            platform=self.platform)

    def covers(self, platform: PlatformConfig) -> bool:
        """Whether the model was trained on rows of ``platform``'s memory."""
        return platform.memory in self._heads

    def on(self, platform: PlatformConfig) -> LearnedModel:
        """The same fitted model, pricing kernels on ``platform``'s memory.

        Raises
        ------
        ValueError
            The model has no rows of that memory (:meth:`covers`).
        """
        self._check(platform)
        bound = copy.copy(self)
        bound.platform = platform
        return bound

    def _check(self, platform: PlatformConfig) -> None:
        if not self.covers(platform):
            raise ValueError(
                f"the learned model was trained on the {', '.join(self.memories)} memory, "
                f"not {platform.memory}; calibrate on a variant folder of that memory "
                f"(hwgen calibrate --variant DIR) and retrain with hwgen train")

    # -- prediction -------------------------------------------------------------------------

    def _predict(self, quantities: Sequence[str], features: Sequence[Features],
                 platforms: Sequence[PlatformConfig]) -> list[np.ndarray]:
        """Each of ``quantities`` for every kernel; the kernels are featurized once (the
        analytical walk) for all of them."""
        out = [np.zeros(len(features)) for _ in quantities]
        for memory in sorted({p.memory for p in platforms}):
            index = [i for i, p in enumerate(platforms) if p.memory == memory]
            self._check(platforms[index[0]])
            vecs, bases = vectors([features[i] for i in index], [platforms[i] for i in index])
            for values, quantity in zip(out, quantities, strict=True):
                head = self._heads[memory][quantity]
                values[index] = head.predict(matrix(vecs, head.columns), bases[quantity])
        return out

    def predict(self, features: Features) -> float:
        return float(self.predict_many([features])[0])

    def predict_many(self, features: Sequence[Features]) -> np.ndarray:
        return self._predict(("cycles",), features, [self.platform] * len(features))[0]

    def predict_energy(self, features: Features) -> float:
        """Predicted energy in nJ (what :func:`hwgen.energy.estimate` would give from the
        run's counters)."""
        return float(self.predict_energy_many([features])[0])

    def predict_energy_many(self, features: Sequence[Features]) -> np.ndarray:
        """:meth:`predict_energy` of each, as a float array."""
        return self._predict(("energy",), features, [self.platform] * len(features))[0]

    def predict_rows(self, rows: Sequence[Row]) -> tuple[np.ndarray, np.ndarray]:
        """Predicted cycles and energy of each row's kernel on the row's own platform."""
        features, platforms = [r.features for r in rows], [r.platform for r in rows]
        cycles, energy = self._predict(("cycles", "energy"), features, platforms)
        return cycles, energy

    # -- persistence: fusion.cost.learned_store (save, load) ------------------------------

    @classmethod
    def from_fitted(cls, rows: Sequence[Row], heads: dict[str, dict[str, Head]], *,
                    seed: int, platform: PlatformConfig, cv: dict | None = None,
                    ) -> LearnedModel:
        """A model of heads already fitted to ``rows`` (what a saved model holds)."""
        model = cls.__new__(cls)
        model.rows, model.seed, model.platform = _training_rows(rows), seed, platform
        model.cv = cv or {}
        model._heads = heads
        model.memories = tuple(sorted(heads))
        return model

    @property
    def heads(self) -> dict[str, dict[str, Head]]:
        """The fitted heads, by memory then quantity."""
        return self._heads


def _fit_heads(group: Sequence[Row], vecs: list[dict[str, float]],
               bases: dict[str, np.ndarray], specs: dict[str, Spec],
               seed: int) -> dict[str, Head]:
    """The cycles and energy heads of one memory's rows, from their feature vectors."""
    columns = sorted({c for v in vecs for c in v})
    x = matrix(vecs, columns)
    targets = {"cycles": _cycles(group), "energy": _energies(group)}
    return {q: Head.fit(q, specs[q], columns, x, targets[q], bases[q], seed)
            for q in ("cycles", "energy")}


def _cycles(rows: Sequence[Row]) -> np.ndarray:
    return np.array([r.cycles for r in rows], float)


def _energies(rows: Sequence[Row]) -> np.ndarray:
    return np.array([energy_nj(r) for r in rows], float)
