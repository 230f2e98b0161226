"""The fused epilogue: a chain of stream stages between the array (or the epilogue
scratchpad) and the store unit.

Every beat is one row of ``cols`` int32 lanes plus the job it belongs to (enable mask, store
type, addresses), so beats of two tiles can be in the pipeline at once. A stage whose bit is
clear in the beat's mask passes the lanes through unchanged: the same chain runs fused (all
bits) and as standalone memory-to-memory passes (one bit each).
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hwgen.config import EPILOGUE_STAGES, VariantConfig

INT8_MIN, INT8_MAX = -128, 127
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def lanes_layout(config: VariantConfig) -> data.ArrayLayout:
    """One row of int32 lanes."""
    return data.ArrayLayout(signed(config.acc_bits), config.cols)


def beat_layout(config: VariantConfig) -> data.StructLayout:
    """Payload of one epilogue beat."""
    e_bits = ceil_log2(config.spad_e_depth)
    return data.StructLayout({
        "lanes": lanes_layout(config),
        "mask": len(EPILOGUE_STAGES),
        "dt": 1,  # hwgen.isa.Dt: 0 int32, 1 int8
        "bias": e_bits,  # epilogue-scratchpad row of the bias vector
        "res": e_bits,  # epilogue-scratchpad row of this beat's residual row
        "out": config.mem_addr_bits,  # word address of the job's first store
        "first": 1,  # first beat of a job: the store unit takes `out` from it
    })


def beat_signature(config: VariantConfig) -> stream.Signature:
    return stream.Signature(beat_layout(config))


def saturate(value, lo: int, hi: int):
    """``value`` clamped to [lo, hi]."""
    return Mux(value < lo, lo, Mux(value > hi, hi, value))


class EpilogueStage(wiring.Component):
    """Base of a pipeline stage: one register, stream handshake, optional bypass.

    Subclasses set :attr:`name`, define ``lanes(m) -> list`` (the new lane values, as
    expressions of ``self.i.payload``; the base class has none, so a stage without its
    arithmetic fails at elaboration) and may add ports through :meth:`ports`.
    """

    name = ""

    def __init__(self, config: VariantConfig):
        self._config = config
        self._bit = config.epilogue.index(self.name)
        sig = beat_signature(config)
        super().__init__({"i": In(sig), "o": Out(sig), **self.ports(config)})

    def ports(self, config: VariantConfig) -> dict:
        return {}

    def elaborate(self, platform):
        m = Module()
        new = self.lanes(m)
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
            with m.If(self.i.payload.mask[self._bit]):
                m.d.sync += [self.o.payload.lanes[c].eq(v) for c, v in enumerate(new)]
        return m


class _ReadsScratchpad(EpilogueStage):
    """A stage that reads one epilogue-scratchpad row (combinational read port)."""

    field = ""

    def ports(self, config):
        return {"e_addr": Out(ceil_log2(config.spad_e_depth)), "e_data": In(lanes_layout(config))}

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.e_addr.eq(getattr(self.i.payload, self.field))
        return m


class BiasStage(_ReadsScratchpad):
    """``x + bias[c]``, saturating to int32."""

    name, field = "bias", "bias"

    def lanes(self, m):
        return [saturate(self.i.payload.lanes[c] + self.e_data[c], INT32_MIN, INT32_MAX)
                for c in range(self._config.cols)]


class ResidualStage(_ReadsScratchpad):
    """``x + res[r][c]`` (an int8 tensor, sign-extended), saturating to int8; with ``res_max``
    high (CSR ``res_mode``), ``max(x, res[r][c])`` instead, saturated the same way.

    The max mode saturates too so that the stage always ends in int8, whichever mode: an int8
    store of its output is then exact, which the unfused passes rely on
    (:func:`fusion.kernels.epilogue.pass_dtypes`). For int8 ``x`` it is exactly ``max(x, r)``.
    """

    name, field = "residual", "res"

    def ports(self, config):
        return {**super().ports(config), "res_max": In(1)}

    def lanes(self, m):
        out = []
        for c in range(self._config.cols):
            x, r = self.i.payload.lanes[c], self.e_data[c]
            out.append(saturate(Mux(self.res_max, Mux(x > r, x, r), x + r), INT8_MIN, INT8_MAX))
        return out


class RequantStage(EpilogueStage):
    """Fixed-point requantization to int8.

    ``y = sat8(((x * mult + round) >> shift) + zp)`` with ``round = 2**(shift-1)`` (0 when
    ``shift`` is 0) and an arithmetic shift: rounding half toward +infinity. The product is
    exact (64 bits); :func:`hwgen.reference.requantize` is the same rule in numpy.

    Per tensor, ``mult`` and ``shift`` come from the control registers. Per channel
    (``per_channel`` high), lane c's come from epilogue rows ``bias + 1`` and ``bias + 2``
    (read through ``pc_mult_*`` and ``pc_shift_*``); the zero point stays per tensor.
    """

    name = "requant"

    def ports(self, config):
        e_bits = ceil_log2(config.spad_e_depth)
        return {"mult": In(signed(32)), "shift": In(unsigned(6)), "zp": In(signed(32)),
                "per_channel": In(1),
                "pc_mult_addr": Out(e_bits), "pc_mult_data": In(lanes_layout(config)),
                "pc_shift_addr": Out(e_bits), "pc_shift_data": In(lanes_layout(config))}

    def lanes(self, m):
        m.d.comb += [self.pc_mult_addr.eq(self.i.payload.bias + 1),
                     self.pc_shift_addr.eq(self.i.payload.bias + 2)]
        out = []
        for c in range(self._config.cols):
            mult = Mux(self.per_channel, self.pc_mult_data[c], self.mult)
            shift = Signal(unsigned(6), name=f"shift{c}")
            rnd = Signal(unsigned(64), name=f"round{c}")
            m.d.comb += [shift.eq(Mux(self.per_channel, self.pc_shift_data[c][:6], self.shift)),
                         rnd.eq((Const(1, 65) << shift) >> 1)]
            scaled = (self.i.payload.lanes[c] * mult + rnd) >> shift
            out.append(saturate(scaled + self.zp, INT8_MIN, INT8_MAX))
        return out


class ReluStage(EpilogueStage):
    """``max(x, 0)``."""

    name = "relu"

    def lanes(self, m):
        return [Mux(x < 0, 0, x) for x in (self.i.payload.lanes[c]
                                         for c in range(self._config.cols))]


class ClampStage(EpilogueStage):
    """``min(max(x, lo), hi)``."""

    name = "clamp"

    def ports(self, config):
        return {"lo": In(signed(32)), "hi": In(signed(32))}

    def lanes(self, m):
        out = []
        for c in range(self._config.cols):
            x = self.i.payload.lanes[c]
            low = Mux(x < self.lo, self.lo, x)
            out.append(Mux(low > self.hi, self.hi, low))
        return out


STAGE_CLASSES = {cls.name: cls for cls in
                 (BiasStage, RequantStage, ReluStage, ClampStage, ResidualStage)}


class EpiloguePipeline(wiring.Component):
    """The variant's stages in order, joined by ``wiring.connect``.

    Ports: ``i``/``o`` beat streams; ``bias_addr``/``bias_data`` and ``res_addr``/``res_data``
    to read the epilogue scratchpad; the control registers ``mult``, ``shift``, ``zp``,
    ``lo``, ``hi`` and the modes ``per_channel`` (requant) and ``res_max`` (residual); ``busy``
    while any beat is inside.
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        sig = beat_signature(config)
        e_bits = ceil_log2(config.spad_e_depth)
        super().__init__({
            "i": In(sig), "o": Out(sig),
            "bias_addr": Out(e_bits), "bias_data": In(lanes_layout(config)),
            "res_addr": Out(e_bits), "res_data": In(lanes_layout(config)),
            "pc_mult_addr": Out(e_bits), "pc_mult_data": In(lanes_layout(config)),
            "pc_shift_addr": Out(e_bits), "pc_shift_data": In(lanes_layout(config)),
            "mult": In(signed(32)), "shift": In(unsigned(6)), "zp": In(signed(32)),
            "per_channel": In(1), "lo": In(signed(32)), "hi": In(signed(32)),
            "res_max": In(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        stages = [STAGE_CLASSES[name](self._config) for name in self._config.epilogue]
        if not stages:
            wiring.connect(m, wiring.flipped(self.i), wiring.flipped(self.o))
            return m
        for stage in stages:
            m.submodules[stage.name] = stage
            if isinstance(stage, BiasStage):
                m.d.comb += [self.bias_addr.eq(stage.e_addr), stage.e_data.eq(self.bias_data)]
            elif isinstance(stage, ResidualStage):
                m.d.comb += [self.res_addr.eq(stage.e_addr), stage.e_data.eq(self.res_data),
                             stage.res_max.eq(self.res_max)]
            elif isinstance(stage, RequantStage):
                m.d.comb += [stage.mult.eq(self.mult), stage.shift.eq(self.shift),
                             stage.zp.eq(self.zp), stage.per_channel.eq(self.per_channel),
                             self.pc_mult_addr.eq(stage.pc_mult_addr),
                             stage.pc_mult_data.eq(self.pc_mult_data),
                             self.pc_shift_addr.eq(stage.pc_shift_addr),
                             stage.pc_shift_data.eq(self.pc_shift_data)]
            elif isinstance(stage, ClampStage):
                m.d.comb += [stage.lo.eq(self.lo), stage.hi.eq(self.hi)]
        wiring.connect(m, wiring.flipped(self.i), stages[0].i)
        for up, down in zip(stages, stages[1:], strict=False):
            wiring.connect(m, up.o, down.i)
        wiring.connect(m, stages[-1].o, wiring.flipped(self.o))
        busy = 0
        for stage in stages:
            busy = busy | stage.o.valid
        m.d.comb += self.busy.eq(busy)
        return m
