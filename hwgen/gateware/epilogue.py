"""The fused epilogue: a chain of stream stages between the array (or the epilogue
scratchpad) and the store unit.

Every beat is one row of ``cols`` int32 lanes plus the job it belongs to (enable mask, store
type, addresses), so beats of two tiles can be in the pipeline at once. A stage whose bit is
clear in the beat's mask passes the lanes through unchanged: the same chain runs fused (all
bits) and as standalone memory-to-memory passes (one bit each).

Each stage is declared by its :class:`hwgen.stages.StageSpec`: its control registers make the
``csr`` signature that the sequencer drives and the compute unit and this pipeline pass on
with one ``wiring.connect`` each, and its epilogue-scratchpad reads make the ``e`` read ports.
This module adds only each stage's arithmetic, in Amaranth (:data:`LANES`).
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.lanes import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN
from hwgen.stages import SPECS, StageSpec


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
        "tr": 1,  # a MATMUL tile stored transposed (hwgen.gateware.transpose)
    })


def beat_signature(config: VariantConfig) -> stream.Signature:
    return stream.Signature(beat_layout(config))


def stage_csr_signature(spec: StageSpec) -> wiring.Signature:
    """One stage's control registers, one member each, as its spec shapes them."""
    return wiring.Signature({r.name: Out(signed(r.width) if r.signed else unsigned(r.width))
                             for r in spec.regs})


def csr_signature(config: VariantConfig) -> wiring.Signature:
    """The control registers of the variant's stages: a member per stage that has any,
    holding its :func:`stage_csr_signature` (driven by the sequencer)."""
    return wiring.Signature({name: Out(stage_csr_signature(SPECS[name]))
                             for name in config.epilogue if SPECS[name].regs})


def e_read_signature(config: VariantConfig) -> wiring.Signature:
    """A combinational read of one epilogue-scratchpad row."""
    return wiring.Signature({"addr": Out(ceil_log2(config.spad_e_depth)),
                             "data": In(lanes_layout(config))})


def e_reads_signature(config: VariantConfig, names: tuple[str, ...] | None = None
                      ) -> wiring.Signature:
    """The epilogue-scratchpad reads of the stages ``names`` (default: the variant's chain),
    one member per :class:`hwgen.stages.ERead`, by its name."""
    names = config.epilogue if names is None else names
    return wiring.Signature({r.name: Out(e_read_signature(config))
                             for name in names for r in SPECS[name].reads})


def saturate(value, lo: int, hi: int):
    """``value`` clamped to [lo, hi]."""
    return Mux(value < lo, lo, Mux(value > hi, hi, value))


#: ``lanes(m, x, csr, e) -> new lanes``: a stage's arithmetic on the lanes ``x`` of a beat,
#: given its control registers ``csr`` (None without any) and the data of its scratchpad reads
#: ``e`` (read name -> lanes).
Lanes = Callable[[Module, list, object, dict], list]


def _bias(m, x, csr, e):
    """``x + bias[c]``, saturating to int32."""
    return [saturate(v + e["bias"][c], INT32_MIN, INT32_MAX) for c, v in enumerate(x)]


def _requant(m, x, csr, e):
    """Fixed-point requantization to int8.

    ``y = sat8(((x * mult + round) >> shift) + zp)`` with ``round = 2**(shift-1)`` (0 when
    ``shift`` is 0) and an arithmetic shift: rounding half toward +infinity. With
    ``req_mode`` bit 1, exact halves round to even instead: ``round`` is then
    ``2**(shift-1) - 1`` plus bit ``shift`` of the product (the truncated quotient's parity),
    which carries at a half just when the quotient is odd. The product is exact (64 bits);
    :func:`hwgen.lanes.requantize` is the same rule in numpy.

    Per tensor, ``mult`` and ``shift`` come from the control registers. Per channel
    (``req_mode`` bit 0), lane c's come from the bias group's rows (reads ``pc_mult`` and
    ``pc_shift``, :data:`hwgen.stages.REQ_MULT_ROW` and :data:`~hwgen.stages.REQ_SHIFT_ROW`);
    the zero point stays per tensor.
    """
    out = []
    per_channel, even = csr.req_mode[0], csr.req_mode[1]
    for c, v in enumerate(x):
        mult = Mux(per_channel, e["pc_mult"][c], csr.req_mult)
        shift = Signal(unsigned(6), name=f"shift{c}")
        rnd = Signal(unsigned(64), name=f"round{c}")
        product = Signal(signed(64), name=f"product{c}")
        m.d.comb += [shift.eq(Mux(per_channel, e["pc_shift"][c][:6], csr.req_shift)),
                     product.eq(v * mult)]
        parity = (product >> shift)[0]
        m.d.comb += rnd.eq(Mux(even & (shift != 0), (Const(1, 65) << shift >> 1) - 1 + parity,
                               (Const(1, 65) << shift) >> 1))
        scaled = (product + rnd) >> shift
        out.append(saturate(scaled + csr.req_zp, INT8_MIN, INT8_MAX))
    return out


def _relu(m, x, csr, e):
    """``max(x, 0)``."""
    return [Mux(v < 0, 0, v) for v in x]


def _clamp(m, x, csr, e):
    """``min(max(x, lo), hi)``."""
    out = []
    for v in x:
        low = Mux(v < csr.clamp_lo, csr.clamp_lo, v)
        out.append(Mux(low > csr.clamp_hi, csr.clamp_hi, low))
    return out


def _residual(m, x, csr, e):
    """By ``res_mode``: 0, ``sat8(x + r)``; 1, ``sat8(max(x, r))``; 2, the scaled add of two
    quantized tensors, ``min(max(rne(((x - res_x_zp) * res_x_mult + (r - res_r_zp) *
    res_r_mult) / 2**res_shift) + res_zp, res_lo), res_hi)`` (``r`` is the int8 residual
    row, sign-extended).

    The add and max modes saturate so that the stage always ends in int8, whichever mode: an
    int8 store of its output is then exact, which the unfused passes rely on
    (:func:`fusion.kernels.epilogue.pass_dtypes`). For int8 ``x`` max is exactly ``max(x, r)``.

    The scaled add keeps the whole sum (Amaranth widens each product to 65 bits), so it is
    exact for any int32 ``x``. Rounding half to even is one addition: ``2**(shift-1) - 1``
    plus bit ``shift`` of the sum (the parity of the truncated quotient) carries into the
    quotient above a half always, at exactly a half only when the quotient is odd
    (:func:`hwgen.lanes.round_shift_even` is the same rule in numpy).
    """
    out = []
    half = Signal(unsigned(64), name="res_half")
    m.d.comb += half.eq((Const(1, 65) << csr.res_shift) >> 1)
    for c, v in enumerate(x):
        r = e["res"][c]
        total = Signal(signed(67), name=f"res_sum{c}")
        m.d.comb += total.eq((v - csr.res_x_zp) * csr.res_x_mult
                             + (r - csr.res_r_zp) * csr.res_r_mult)
        parity = (total >> csr.res_shift)[0]
        rounded = Mux(csr.res_shift == 0, total, (total + half - 1 + parity) >> csr.res_shift)
        scaled = rounded + csr.res_zp
        bounded = Mux(scaled < csr.res_lo, csr.res_lo, Mux(scaled > csr.res_hi, csr.res_hi,
                                                           scaled))
        plain = saturate(Mux(csr.res_mode[0], Mux(v > r, v, r), v + r), INT8_MIN, INT8_MAX)
        out.append(Mux(csr.res_mode[1], bounded, plain))
    return out


#: Stage name -> its arithmetic (:data:`Lanes`); everything else about a stage is its spec's.
LANES: dict[str, Lanes] = {"bias": _bias, "requant": _requant, "relu": _relu,
                           "clamp": _clamp, "residual": _residual}


class EpilogueStage(wiring.Component):
    """One stage of the chain: one register, stream handshake, bypass when its mask bit is
    clear. Its ports beyond the streams come from its spec: ``csr`` (its control registers)
    and ``e`` (its epilogue-scratchpad reads, each addressed at the beat's ``bias`` or ``res``
    row plus the read's offset); its arithmetic is ``LANES[spec.name]``.
    """

    def __init__(self, config: VariantConfig, spec: StageSpec):
        if spec.latency != 1:
            raise ValueError(f"stage {spec.name!r} declares latency {spec.latency}, but the "
                             f"gateware builds every stage as one register: give it latency 1 "
                             f"or pipeline EpilogueStage")
        self._config, self._spec = config, spec
        self._bit = config.epilogue.index(spec.name)
        self.name = spec.name
        sig = beat_signature(config)
        super().__init__({"i": In(sig), "o": Out(sig), "csr": In(stage_csr_signature(spec)),
                          "e": Out(e_reads_signature(config, (spec.name,)))})

    def elaborate(self, platform):
        m = Module()
        payload = self.i.payload
        for r in self._spec.reads:
            base = getattr(payload, r.base)
            m.d.comb += getattr(self.e, r.name).addr.eq(base + r.offset if r.offset else base)
        x = [payload.lanes[c] for c in range(self._config.cols)]
        e = {r.name: getattr(self.e, r.name).data for r in self._spec.reads}
        new = LANES[self._spec.name](m, x, self.csr, e)
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(payload)]
            with m.If(payload.mask[self._bit]):
                m.d.sync += [self.o.payload.lanes[c].eq(v) for c, v in enumerate(new)]
        return m


class EpiloguePipeline(wiring.Component):
    """The variant's stages in order, joined by ``wiring.connect``.

    Ports: ``i``/``o`` beat streams; ``csr`` (:func:`csr_signature`), the control registers;
    ``e`` (:func:`e_reads_signature`), the stages' epilogue-scratchpad reads; ``busy`` while
    any beat is inside.
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        sig = beat_signature(config)
        super().__init__({"i": In(sig), "o": Out(sig), "csr": In(csr_signature(config)),
                          "e": Out(e_reads_signature(config)), "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        stages = [EpilogueStage(self._config, SPECS[name]) for name in self._config.epilogue]
        if not stages:
            wiring.connect(m, wiring.flipped(self.i), wiring.flipped(self.o))
            return m
        for stage in stages:
            m.submodules[stage.name] = stage
            if stage.name in self.csr.signature.members:
                wiring.connect(m, wiring.flipped(getattr(self.csr, stage.name)), stage.csr)
            for name in stage.e.signature.members:
                wiring.connect(m, getattr(stage.e, name), wiring.flipped(getattr(self.e, name)))
        wiring.connect(m, wiring.flipped(self.i), stages[0].i)
        for up, down in zip(stages, stages[1:], strict=False):
            wiring.connect(m, up.o, down.i)
        wiring.connect(m, stages[-1].o, wiring.flipped(self.o))
        busy = 0
        for stage in stages:
            busy = busy | stage.o.valid
        m.d.comb += self.busy.eq(busy)
        return m
