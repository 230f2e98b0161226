"""Hardware performance counters."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.gateware.ports import counters_signature
from hwgen.perf import COUNTERS, MAX_INPUTS, VALUE_INPUTS


class PerfCounters(wiring.Component):
    """Counts events while the program runs (from ``start`` until ``done``).

    Inputs are one-cycle event flags; ``bytes_read``/``bytes_written`` count memory beats and
    add ``port_bytes`` each; the counters of :data:`hwgen.perf.VALUE_INPUTS` add the value
    given each cycle, those of :data:`hwgen.perf.MAX_INPUTS` keep the largest value given
    while their ``valid`` flag is set (``max_valid``). The counters hold their values after
    ``done`` until ``clear`` (the host's start) or reset.
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        super().__init__({
            "running": In(1),
            "clear": In(1),
            "events": In(wiring.Signature({
                name: Out(VALUE_INPUTS.get(name, MAX_INPUTS.get(name, 1))) for name in COUNTERS})),
            "max_valid": In(wiring.Signature({name: Out(1) for name in MAX_INPUTS})),
            "perf": Out(counters_signature()),
        })

    def elaborate(self, platform):
        m = Module()
        for name in COUNTERS:
            step = self._config.port_bytes if name.startswith("bytes_") else 1
            counter = getattr(self.perf, name)
            event = getattr(self.events, name)
            if name in MAX_INPUTS:
                with m.If(self.running & getattr(self.max_valid, name) & (event > counter)):
                    m.d.sync += counter.eq(event)
            elif name in VALUE_INPUTS:
                with m.If(self.running):
                    m.d.sync += counter.eq(counter + event)
            else:
                with m.If(self.running & event):
                    m.d.sync += counter.eq(counter + step)
            with m.If(self.clear):  # last: it wins over a count in the same cycle
                m.d.sync += counter.eq(0)
        return m

