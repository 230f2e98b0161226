"""Time, not only cycles: what a run's cycles mean at the clock the variant can run at.

A variant runs at the lower of two clocks: its routed Fmax (nextpnr's figure, in the
descriptor's ``synthesis`` record when ``hwgen variants build`` made the folder) and the
platform's clock (the DRAM controller's, 100 MHz by default), which the memory timing the
simulation models assumes. Without a routed Fmax the platform's clock is all that is known,
and the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Clock:
    """The clocks of one variant on one platform.

    Attributes
    ----------
    platform_hz : int
        The platform's clock.
    fmax_mhz : float or None
        The variant's routed Fmax, if it was placed and routed.
    """

    platform_hz: int
    fmax_mhz: float | None = None

    @classmethod
    def of(cls, descriptor: dict[str, Any], platform_hz: int) -> Clock:
        """The clocks of a variant folder's descriptor on a platform.

        Raises
        ------
        ValueError
            If the descriptor records an Fmax that is not a positive number.
        """
        synthesis = descriptor.get("synthesis")
        fmax = synthesis.get("fmax_mhz") if isinstance(synthesis, dict) else None
        if fmax is not None and (isinstance(fmax, bool) or not isinstance(fmax, int | float)
                                 or not math.isfinite(fmax) or fmax <= 0):
            raise ValueError(f"the variant's descriptor records an Fmax of {fmax!r} MHz, not a "
                             f"positive number; rebuild it with 'hwgen variants build'")
        return cls(platform_hz=platform_hz, fmax_mhz=None if fmax is None else float(fmax))

    @property
    def mhz(self) -> float:
        """The clock it runs at: the lower of the two."""
        platform = self.platform_hz / 1e6
        return platform if self.fmax_mhz is None else min(self.fmax_mhz, platform)

    @property
    def limited_by(self) -> str:
        """Which clock :attr:`mhz` is: ``"fmax"``, ``"platform"`` or ``"platform (no routed
        Fmax)"``."""
        if self.fmax_mhz is None:
            return "platform (no routed Fmax)"
        return "fmax" if self.fmax_mhz < self.platform_hz / 1e6 else "platform"

    def figures(self, cycles: int, batch: int = 1) -> dict[str, Any]:
        """Latency and throughput of ``cycles`` for ``batch`` inferences, for ``--json``."""
        seconds = cycles / (self.mhz * 1e6)
        return {"clock_mhz": round(self.mhz, 3), "clock": self.limited_by,
                "fmax_mhz": self.fmax_mhz, "platform_mhz": self.platform_hz / 1e6,
                "latency_us": round(seconds * 1e6, 3),
                "inferences_per_second": round(batch / seconds, 1) if seconds else None}

    def summary(self, cycles: int, batch: int = 1) -> str:
        """One line for the text report."""
        f = self.figures(cycles, batch)
        line = (f"time: {f['latency_us']:,.1f} us for {batch} inference(s), "
                f"{f['inferences_per_second'] or 0:,.1f} inferences/s at {f['clock_mhz']:g} MHz")
        if self.fmax_mhz is None:
            return line + (" (the platform's clock; the variant has no routed Fmax: build it "
                           "with 'hwgen variants build' for one)")
        if self.limited_by == "fmax":
            return line + (f" (the routed Fmax, below the platform's {self.platform_hz / 1e6:g} "
                           f"MHz clock: the DRAM timing simulated assumes the faster clock)")
        return line + f" (the platform's clock; routed Fmax {self.fmax_mhz:g} MHz)"
