r"""The runtime's feedback loop: record every kernel it runs, watch the prediction error,
refit when the hardware drifts, and price the next compile with the refitted model.

:class:`OnlineLoop` sits between runs. Before a compile, :meth:`OnlineLoop.model` is the
model to price with: measured profiles of identical kernels (only those measured since the
last refit's mark: older runs describe hardware that is gone), then the base model (the
learned one when given, else the analytical one). After a run, :meth:`OnlineLoop.record`
appends the run's kernels to the profile database (source ``runtime``), hands each kernel's
predicted and measured cycles to two :class:`~fusion.runtime.drift.DriftMonitor`\ s, and
refits between this run and the next when one calls for it:

- the kernels priced by a **measured profile**: their error means the hardware no longer
  runs them as it did (a profile of an identical kernel is exact on unchanged hardware).
  The profile mark moves to the first run of the drift: older profiles are no longer used;
- the kernels priced by the **model**: their error is the model's, logged
  (``model_errors``).

On either, a ``refit`` callable (the learned model refitted with the runs since the mark:
:meth:`fusion.cost.learned.LearnedModel.refitted`) rebuilds the base model; without one only
the profile mark moves.

The runtime is never told that the hardware changed; it sees only its own error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fusion.cost.data import Row
from fusion.cost.model import CostModel
from fusion.cost.profiles import ProfileDB
from fusion.cost.tiered import MEASURED, TieredModel
from fusion.runtime.drift import DriftMonitor
from hwgen.platform import PlatformConfig


def kernel_rows(compiled, report, platform: PlatformConfig, *,
                workload: str, extra: dict[str, Any] | None = None) -> list[Row]:
    """The measured kernels of a run as profile rows (:class:`fusion.cost.data.Row`): each
    kernel's features on the variant, its counters, the platform it ran on, ``workload`` (the
    model's name) and ``extra`` (seed, versions) with the kernel's name. A row exists only for
    a kernel checked equal to the reference (a run stops at the first that is not)."""
    specs = {k.name: k.spec for k in compiled.kernels}
    rows = []
    for run in report.kernels:
        spec = specs[run.name]
        rows.append(Row(spec.kind.features(compiled.config, spec.params), dict(run.counters),
                        True, {**(extra or {}), "kernel": run.name}, platform, workload))
    return rows


def record_runtime(db: ProfileDB, compiled, report, platform: PlatformConfig, *,
                   extra: dict[str, Any] | None = None) -> list[Row]:
    """Append a run's kernels to ``db`` as runtime profiles and return the rows. Each row's
    seed is a run counter (the database's size before), so the same kernel run again is a
    new run, never dropped as a repeat (a run's key is its kernel, platform, seed, source)."""
    first = len(db)
    rows = kernel_rows(compiled, report, platform, workload=f"model {compiled.graph.name}",
                       extra=extra)
    rows = [dataclasses.replace(r, extra={**r.extra, "seed": first + i})
            for i, r in enumerate(rows)]
    db.add(rows, source="runtime")
    return rows


@dataclass
class OnlineLoop:
    """Record, watch, refit.

    Parameters
    ----------
    db : ProfileDB
        Where runs are recorded and profiles looked up.
    platform : PlatformConfig
        The platform the runtime believes it runs on (the variant folder's).
    base : CostModel
        Prices what no recent profile holds.
    monitor : DriftMonitor
        The rolling error and its threshold.
    refit : callable, optional
        ``rows -> CostModel``: rebuilds the base model from the database's rows of the
        variant and platform measured since the profile mark (the drift's start, once one
        was seen), when the profiles went stale or the model's own error crossed the
        threshold (:meth:`fusion.cost.learned.LearnedModel.refitted` makes one); None keeps
        the base model and moves only the profiles' mark.
    """

    db: ProfileDB
    platform: PlatformConfig
    base: CostModel
    monitor: DriftMonitor = field(default_factory=DriftMonitor)
    refit: Callable[[Sequence[Row]], CostModel] | None = None
    #: The model's own error (kernels no profile priced), as ``monitor`` is the profiles'.
    model_monitor: DriftMonitor | None = None
    #: Profiles with an id above this are trusted (0: all).
    since: int = 0
    #: The database id of each profile-priced observation's row, by observation index.
    _ids: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.model_monitor is None:
            self.model_monitor = DriftMonitor(threshold=self.monitor.threshold,
                                              window=self.monitor.window)

    def model(self) -> TieredModel:
        """The model the next compile prices with."""
        return TieredModel(self.base, lambda f: self.db.measured(f, self.platform,
                                                                 since=self.since))

    def record(self, compiled, report) -> bool:
        """Append a run's kernels to the database and watch their errors; refit when due.

        Parameters
        ----------
        compiled : fusion.compiler.plan.CompiledModel
            What ran (its kernels' predictions are the model's at compile time).
        report : fusion.runtime.run.RunReport
            What the counters measured.

        Returns
        -------
        bool
            True if this run's errors triggered a refit.
        """
        rows = record_runtime(self.db, compiled, report, self.platform)
        last = self.db.last_id()
        variant_key, platform_key = compiled.config.key(), self.platform.key()
        tiers = {k.name: k.priced_by for k in compiled.kernels}
        stale = wrong = False
        for i, k in enumerate(report.kernels):
            if tiers.get(k.name) == MEASURED:
                self._ids.append(last - len(rows) + 1 + i)
                stale |= self.monitor.observe(variant_key, platform_key, k.predicted_cycles,
                                              k.cycles)
            else:
                wrong |= self.model_monitor.observe(variant_key, platform_key,
                                                    k.predicted_cycles, k.cycles)
        if stale:
            start = self.monitor.since(variant_key, platform_key)
            if start < len(self._ids):
                self.since = self._ids[start] - 1  # the drift's first run is trusted
            self._log("measured", self.monitor, variant_key)
            self.monitor.refitted(variant_key, platform_key)
        if wrong:
            self._log(self.base.name, self.model_monitor, variant_key)
            self.model_monitor.refitted(variant_key, platform_key)
        if (stale or wrong) and self.refit is not None:
            # the hardware changed (stale profiles) or the model is off: rebuild it from
            # the runs since the drift mark (every run while no drift was seen)
            self.base = self.refit(self.db.rows(variant_key=variant_key,
                                                platform_key=platform_key, since=self.since))
        return stale or (wrong and self.refit is not None)

    def _log(self, model: str, monitor: DriftMonitor, variant_key: str) -> None:
        rolling = monitor.rolling_error(variant_key, self.platform.key())
        self.db.record_error(model, variant_key, self.platform.key(), monitor.window,
                             rolling * 100.0)
