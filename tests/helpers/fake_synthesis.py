"""Stand-ins for yosys and nextpnr (:mod:`synth.flow`), for tests of everything around
them: they count their calls and return fixed figures at once."""

from __future__ import annotations

from collections import Counter

import pytest

#: What the fake yosys reports: a small netlist that fits the 25k part.
CELLS = {"LUT4": 1200, "CCU2C": 100, "TRELLIS_FF": 900, "MULT18X18D": 4, "DP16KD": 6,
         "TRELLIS_DPR16X4": 10, "PFUMX": 30}


class FakeTools:
    """Patches ``synth.flow._yosys`` and ``_nextpnr``; ``calls`` counts them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fmax: float = 87.5,
                 status: str = "ok", yosys_error: str | None = None,
                 cells: dict[str, int] | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.fmax, self.status, self.yosys_error = fmax, status, yosys_error
        self.cells = dict(CELLS if cells is None else cells)
        monkeypatch.setattr("synth.flow._yosys", self._yosys)
        monkeypatch.setattr("synth.flow._nextpnr", self._nextpnr)

    def _yosys(self, job, work):
        self.calls["yosys"] += 1
        if self.yosys_error is not None:
            return None, 0.5, self.yosys_error
        return dict(self.cells), 0.5, None

    def _nextpnr(self, job, work, part):
        self.calls["nextpnr"] += 1
        record = {"device": part.nextpnr_device, "package": "CABGA381", "speed": 6,
                  "target_mhz": job.clock_hz / 1e6, "timeout_s": job.pnr_timeout,
                  "critical_path": None}
        if self.status == "timeout":
            return {**record, "status": "timeout", "fmax_mhz": None, "seconds": None,
                    "reason": f"nextpnr did not finish within {job.pnr_timeout:g} s"}
        path = {"from": "seq.imem.0.6.DOB4", "to": "compute.array.pe_0_0.acc.DI",
                "delay_ns": round(1000 / self.fmax, 2), "through": ["seq.imem", "compute.array"]}
        return {**record, "status": "ok", "fmax_mhz": self.fmax, "seconds": 1.0,
                "reason": None, "meets_target": False, "critical_path": path}
