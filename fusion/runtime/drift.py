"""Watching the cost model's error while the runtime runs, and deciding when to refit.

The runtime knows, for every kernel it runs, what the model predicted and what the counters
measured. :class:`DriftMonitor` keeps a rolling window of the relative errors per variant and
platform (the platform the runtime believes it runs on: a board that heats up does not say
so) and reports when the window's mean error crosses a threshold. The caller then refits the
model on the profiles measured since the drift began (:meth:`DriftMonitor.since`) and calls
:meth:`DriftMonitor.refitted`; the new model prices the next compile, and the window starts
again, so the error is seen to recover (or not).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Observation:
    """One kernel run: what was predicted and what was measured."""

    index: int
    variant_key: str
    platform_key: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        """Relative error of the prediction, ``|predicted - measured| / measured``."""
        return abs(self.predicted - self.measured) / self.measured


@dataclass
class DriftMonitor:
    """Rolling prediction error per (variant, platform), and when it says "refit".

    Parameters
    ----------
    threshold : float
        The window's mean relative error above which a refit is due (0.05: 5%).
    window : int
        Kernel runs in the rolling window; a refit is due only once the window is full, so
        a single odd kernel does not trigger one.

    Attributes
    ----------
    history : list of Observation
        Every observation, in order (the timeline of a drift demonstration).
    refits : list of int
        The observation index at which each refit was made.
    """

    threshold: float = 0.05
    window: int = 20
    history: list[Observation] = field(default_factory=list)
    refits: list[int] = field(default_factory=list)
    _windows: dict[tuple[str, str], deque] = field(default_factory=dict, repr=False)
    _drift_start: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.threshold, float | int) and 0 < self.threshold < 1):
            raise ValueError(f"threshold is a relative error between 0 and 1, not "
                             f"{self.threshold!r}")
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
            raise ValueError(f"window is a number of kernel runs, 1 or more, not {self.window!r}")

    def observe(self, variant_key: str, platform_key: str, predicted: float,
                measured: float) -> bool:
        """Record one run; True when the window's mean error is above the threshold (a refit
        is due).

        Raises
        ------
        ValueError
            If ``measured`` is not positive (a run takes at least a cycle).
        """
        if not measured > 0:
            raise ValueError(f"measured cycles must be positive, not {measured!r}")
        obs = Observation(len(self.history), variant_key, platform_key, float(predicted),
                          float(measured))
        self.history.append(obs)
        key = (variant_key, platform_key)
        win = self._windows.setdefault(key, deque(maxlen=self.window))
        win.append(obs.error)
        if obs.error > self.threshold and key not in self._drift_start:
            self._drift_start[key] = obs.index  # the first run the model got wrong
        elif obs.error <= self.threshold and self.rolling_error(variant_key, platform_key) \
                <= self.threshold:
            self._drift_start.pop(key, None)
        return len(win) == self.window and self.rolling_error(variant_key,
                                                               platform_key) > self.threshold

    def rolling_error(self, variant_key: str, platform_key: str) -> float:
        """The mean relative error over the window (0.0 with no run yet)."""
        win = self._windows.get((variant_key, platform_key))
        return sum(win) / len(win) if win else 0.0

    def since(self, variant_key: str, platform_key: str) -> int:
        """The index of the first observation of the current drift (the runs a refit should
        trust more than the older profiles), or the next index if there is none."""
        return self._drift_start.get((variant_key, platform_key), len(self.history))

    def refitted(self, variant_key: str, platform_key: str) -> None:
        """A refit was made: start the window again (the new model is judged afresh)."""
        key = (variant_key, platform_key)
        self._windows.pop(key, None)
        self._drift_start.pop(key, None)
        self.refits.append(len(self.history))

    def timeline(self, every: int = 1) -> list[dict[str, float | int | bool]]:
        """The history as rows ``{"run", "error", "rolling", "refit"}`` (every ``every``-th),
        the rolling error recomputed over the history as it was then."""
        out = []
        windows: dict[tuple[str, str], deque] = {}
        refits = set(self.refits)
        for obs in self.history:
            key = (obs.variant_key, obs.platform_key)
            if obs.index in refits:
                windows.pop(key, None)
            win = windows.setdefault(key, deque(maxlen=self.window))
            win.append(obs.error)
            if obs.index % every == 0:
                out.append({"run": obs.index, "error": round(obs.error, 4),
                            "rolling": round(sum(win) / len(win), 4),
                            "refit": obs.index in refits})
        return out
