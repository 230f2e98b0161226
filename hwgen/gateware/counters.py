"""Hardware performance counters."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.gateware.ports import counters_signature
from hwgen.perf import COUNTERS


class PerfCounters(wiring.Component):
    """Counts events while the program runs (from ``start`` until ``done``).

    Inputs are one-cycle event flags; ``bytes_read``/``bytes_written`` count memory beats and
    add ``port_bytes`` each. The counters hold their values after ``done`` until reset.
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        super().__init__({
            "running": In(1),
            "events": In(wiring.Signature({name: Out(1) for name in COUNTERS})),
            "perf": Out(counters_signature()),
        })

    def elaborate(self, platform):
        m = Module()
        for name in COUNTERS:
            step = self._config.port_bytes if name.startswith("bytes_") else 1
            counter = getattr(self.perf, name)
            with m.If(self.running & getattr(self.events, name)):
                m.d.sync += counter.eq(counter + step)
        return m

