r"""The runtime's feedback loop: record every kernel it runs, watch the prediction error,
refit when the hardware drifts, and price the next compile with the refitted model.

:class:`OnlineLoop` sits between runs. Before a compile, :meth:`OnlineLoop.model` is the
model to price with: measured profiles of identical kernels (only those measured since the
last refit's mark: older runs describe hardware that is gone), then the base model (the
learned one when given, else the analytical one). After a run, :meth:`OnlineLoop.record`
appends the run's kernels to the profile database (source ``runtime``, with each kernel's
placement), watches two rolling errors (:class:`~fusion.runtime.drift.DriftMonitor`), and
refits between this run and the next when one calls for it:

- every kernel that **ran before at the same placement** (since the mark), against what it
  measured then: on unchanged hardware it repeats to the cycle, so a change means the
  hardware no longer runs it as it did. (Not against its profile's price: on a DRAM the same
  kernel at another placement, when the plan around it changed, takes a few percent more or
  less, which would look like drift.) The profile mark moves to the first run of the drift:
  older profiles are no longer used;
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
    a kernel checked equal to the reference (a run stops at the first that is not). The
    kernel's placement (its regions' addresses) goes in ``extra`` too: on a DRAM it changes the
    cycles (:meth:`fusion.cost.profiles.ProfileDB.measured`)."""
    steps = {k.name: k for k in compiled.kernels}
    rows = []
    for run in report.kernels:
        step = steps[run.name]
        features = step.spec.kind.features(compiled.config, step.spec.params)
        rows.append(Row(features.at(step.compiled.placement), dict(run.counters), True,
                        {**(extra or {}), "kernel": run.name,
                         "placement": step.compiled.placement}, platform, workload))
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
        The rolling change of kernels run again at the same placement, and its threshold.
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
        steps = {k.name: k for k in compiled.kernels}
        # the same kernels at the same placements, as measured before this run (since the
        # mark): on unchanged hardware they repeat to the cycle, so a change is drift
        before = {k.name: self.db.measured(
            steps[k.name].spec.kind.features(compiled.config, steps[k.name].spec.params),
            self.platform, since=self.since, placement=steps[k.name].compiled.placement)
            for k in report.kernels}
        rows = record_runtime(self.db, compiled, report, self.platform)
        last = self.db.last_id()
        variant_key, platform_key = compiled.config.key(), self.platform.key()
        stale = wrong = False
        for i, k in enumerate(report.kernels):
            if before[k.name] is not None:
                self._ids.append(last - len(rows) + 1 + i)
                stale |= self.monitor.observe(variant_key, platform_key, before[k.name],
                                              k.cycles)
            if steps[k.name].priced_by != MEASURED:
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
