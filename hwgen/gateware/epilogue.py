"""The fused epilogue: a chain of stream stages between the array (or the epilogue
scratchpad) and the store unit.

Every beat is one row of ``cols`` int32 lanes plus the job it belongs to (enable mask, store
type, addresses), so beats of two tiles can be in the pipeline at once; with lane sharing
(``VariantConfig.epilogue_share`` = P > 1) a row is P beats of ``cols / P`` lanes, its
``part`` field saying which, and the stages have that many lanes. A stage whose bit is
clear in the beat's mask passes the lanes through unchanged: the same chain runs fused (all
bits) and as standalone memory-to-memory passes (one bit each).

Each stage is declared by its :class:`hwgen.stages.StageSpec`: its control registers make the
``csr`` signature that the sequencer drives and the compute unit and this pipeline pass on
with one ``wiring.connect`` each, and its epilogue-scratchpad reads make the ``e`` read ports.
This module adds only each stage's arithmetic, in Amaranth (:data:`LANES`).
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth import Cat, Const, Module, Mux, Shape, Signal, Value, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.lanes import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN
from hwgen.stages import SPECS, StageSpec, epilogue_credits


def lanes_layout(config: VariantConfig) -> data.ArrayLayout:
    """One row of ``cols`` int32 lanes (of the array, of an epilogue-scratchpad row)."""
    return data.ArrayLayout(signed(config.acc_bits), config.cols)


def beat_lanes_layout(config: VariantConfig) -> data.ArrayLayout:
    """The lanes of one beat: ``cols / epilogue_share`` int32 lanes."""
    return data.ArrayLayout(signed(config.acc_bits), config.epilogue_lanes)


def lane_part(row, part, config: VariantConfig) -> list:
    """Lanes ``part * L .. part * L + L - 1`` of a row of ``cols`` lanes (``L`` =
    ``epilogue_lanes``): the beat ``part`` of it. Without sharing, the row."""
    lanes, share = config.epilogue_lanes, config.epilogue_share
    if share == 1:
        return [row[c] for c in range(lanes)]
    out = []
    for c in range(lanes):
        value = row[c]
        for p in range(1, share):
            value = Mux(part == p, row[p * lanes + c], value)
        out.append(value)
    return out


def beat_part(m: Module, config: VariantConfig, step, name: str) -> tuple:
    """Which beat of its row a stream is at, with lane sharing: ``(part, last)``, ``part``
    counting 0 .. ``epilogue_share - 1`` and moving on in each cycle ``step`` is high, and
    ``last`` while it is the row's last beat. Without sharing, the constants 0 and 1."""
    share = config.epilogue_share
    if share == 1:
        return 0, 1
    part = Signal(range(share), name=name)
    last = part == share - 1
    with m.If(step):
        m.d.sync += part.eq(Mux(last, 0, part + 1))
    return part, last


def beat_layout(config: VariantConfig) -> data.StructLayout:
    """Payload of one epilogue beat."""
    e_bits = ceil_log2(config.spad_e_depth)
    part = {"part": ceil_log2(config.epilogue_share)} if config.epilogue_share > 1 else {}
    return data.StructLayout({
        **part,  # which lanes of the row the beat holds (lane sharing)
        "lanes": beat_lanes_layout(config),
        "mask": len(EPILOGUE_STAGES),
        "dt": 1,  # hwgen.isa.Dt: 0 int32, 1 int8
        "bias": e_bits,  # epilogue-scratchpad row of the bias vector
        "res": e_bits,  # epilogue-scratchpad row of this beat's residual row
        "out": config.mem_addr_bits,  # word address of the job's first store
        "first": 1,  # first beat of a job: the store unit takes `out` from it
        "tr": 1,  # a MATMUL tile stored transposed (hwgen.gateware.transpose)
        "zf": 1,  # the store unit records the tile's zero flag (MATMUL zf) ...
        "zaddr": config.mem_addr_bits,  # ... at this word address
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
    """A synchronous read of one epilogue-scratchpad row: a block RAM's read port. ``data``
    is the row at the ``addr`` given the cycle before with ``en``, held while ``en`` is low."""
    return wiring.Signature({"addr": Out(ceil_log2(config.spad_e_depth)), "en": Out(1),
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


class Pipe:
    """The registers of one stage, made as its arithmetic asks for them.

    A stage's arithmetic (:data:`LANES`) is written straight through: :meth:`cut` puts a
    register after the values it is given (the beat moves with them), and :meth:`read` is
    the row of one of the stage's epilogue-scratchpad reads, which the block RAM delivers
    the cycle after the beat entered the stage, so only after the first cut. Every register
    has a valid bit of its own and loads when it is empty or the next one loads: a stage of
    latency L times beats exactly as L stages of one register each, which is what
    :func:`hwgen.stages.epilogue_latency` counts for the cycle model.

    Attributes
    ----------
    x : list
        The lanes of the beat at the current register (the stage's input before any cut).
    csr : interface
        The stage's control registers (constant while a job's beats are in the chain).
    """

    def __init__(self, m: Module, stage: EpilogueStage):
        self.m, self._stage = m, stage
        self.csr = stage.csr
        self.levels: list[tuple[Signal, Signal, Signal]] = []  # (valid, beat, load)
        self.valid, self.beat = stage.i.valid, stage.i.payload
        self.x = [self.beat.lanes[c] for c in range(stage.config.epilogue_lanes)]

    def cut(self, values: list | tuple = ()) -> list:
        """``values`` registered, with the beat: the stage's next register."""
        m, n = self.m, len(self.levels)
        name = f"{self._stage.name}{n}"
        valid, load = Signal(name=f"{name}_valid"), Signal(name=f"{name}_load")
        beat = Signal(beat_layout(self._stage.config), name=f"{name}_beat")
        regs = [Signal(Value.cast(v).shape(), name=f"{name}_v{k}") for k, v in enumerate(values)]
        with m.If(load):
            m.d.sync += [valid.eq(self.valid), beat.eq(self.beat)]
            m.d.sync += [r.eq(v) for r, v in zip(regs, values, strict=True)]
        self.levels.append((valid, beat, load))
        self.valid, self.beat = valid, beat
        self.x = [beat.lanes[c] for c in range(self._stage.config.epilogue_lanes)]
        return regs

    def read(self, name: str) -> list:
        """The lanes of read ``name`` for the beat in the stage's first register: the
        row's lanes that beat holds (all of them without lane sharing)."""
        if not self.levels:
            raise ValueError(f"stage {self._stage.name!r} uses its read {name!r} before its "
                             f"first register: the block RAM delivers the row a cycle later")
        config = self._stage.config
        first_beat = self.levels[0][1]
        part = first_beat.part if config.epilogue_share > 1 else 0
        return lane_part(getattr(self._stage.e, name).data, part, config)


#: ``lanes(p) -> new lanes``: a stage's arithmetic on the lanes of a beat, given the
#: :class:`Pipe` that holds them, its control registers and its scratchpad reads.
Lanes = Callable[[Pipe], list]


def _bias(p):
    """``x + bias[c]``, saturating to int32: the bias row arrives with the first register
    and is registered before the add (a block RAM's output is slow: 5.8 ns on the ECP5)."""
    p.cut()
    bias = p.cut(p.read("bias"))
    return [saturate(v + bias[c], INT32_MIN, INT32_MAX) for c, v in enumerate(p.x)]


def _split_product(a, b):
    """``a * b`` of two signed 32-bit values as four products of at most 17 x 17 bits (one
    MULT18X18D each); summed by :func:`_sum_product`. Returns the four, to be registered."""
    al, ah = a[:16].as_unsigned(), a[16:32].as_signed()
    bl, bh = b[:16].as_unsigned(), b[16:32].as_signed()
    return [al * bl, al * bh, ah * bl, ah * bh]


def _sum_product(parts):
    """The exact 64-bit product from :func:`_split_product`'s four parts."""
    ll, lh, hl, hh = parts
    return ll + ((lh + hl) << 16) + (hh << 32)


def _half(shift, width: int):
    """``2**(shift-1)`` (0 for ``shift`` 0) in ``width`` bits: a decoder, no adder."""
    return (Const(1, width + 1) << shift)[:width + 1] >> 1


def _below_half(shift, width: int):
    """``2**(shift-1) - 1`` (0 for ``shift`` 0) in ``width`` bits: the bits below
    ``shift - 1``, a shifted mask rather than a subtraction."""
    return (~(Const(-1, width + 1) << shift))[:width + 1] >> 1


def _round_add(value, base, carry, width: int):
    """``value + base + carry`` (``carry`` one bit) in ``width`` bits, signed, as one carry
    chain: ``carry`` enters below the sum's lowest bit, where ``2*value + 1`` plus
    ``2*base + carry`` carries exactly when it is set. (Written as a three-term sum, yosys
    builds two chained adders: the rounding paths of the requantize and residual stages were
    the 2x2's critical path.)"""
    value = value.as_signed()
    extended = Cat(value, value[-1].replicate(width - len(value)))
    wide = Cat(Const(1, 1), extended) + Cat(carry, base[:width])
    return wide[1:width + 1].as_signed()


def _requant(p):
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

    Registers: the rows' read; the rows; the four partial products (each a MULT18X18D);
    their sum; the rounding add; the shift; then the zero point and the saturation.
    """
    csr = p.csr
    lanes = len(p.x)
    per_channel, even = csr.req_mode[0], csr.req_mode[1]
    p.cut()
    rows = p.cut(p.read("pc_mult") + [v[:6] for v in p.read("pc_shift")])
    pc_mult, pc_shift = rows[:lanes], rows[lanes:]
    parts, shifts = [], []
    for c, v in enumerate(p.x):
        mult = Mux(per_channel, pc_mult[c], csr.req_mult)
        parts += _split_product(v, mult)
        shifts.append(Mux(per_channel, pc_shift[c], csr.req_shift))
    regs = p.cut(parts + shifts)
    parts, shifts = regs[:4 * lanes], regs[4 * lanes:]
    products = [_sum_product(parts[4 * c:4 * c + 4]) for c in range(lanes)]
    regs = p.cut([v.as_signed()[:64].as_signed() for v in products] + shifts)
    products, shifts = regs[:lanes], regs[lanes:]
    sums = []
    for product, shift in zip(products, shifts, strict=True):
        parity = (product >> shift)[0]
        odd = even & (shift != 0)
        sums.append(_round_add(product, Mux(odd, _below_half(shift, 65), _half(shift, 65)),
                               odd & parity, 65))
    regs = p.cut(sums + shifts)
    sums, shifts = regs[:lanes], regs[lanes:]
    scaled = p.cut([s >> shift for s, shift in zip(sums, shifts, strict=True)])
    return [saturate(v + csr.req_zp, INT8_MIN, INT8_MAX) for v in scaled]


def _relu(p):
    """``max(x, 0)``."""
    return [Mux(v < 0, 0, v) for v in p.x]


def _clamp(p):
    """``min(max(x, lo), hi)``, with both compares on ``x``, side by side: a compare of
    ``max(x, lo)`` would wait for the first's multiplexer (two carry chains in a row: 15.9 ns
    on the shared 4x4). ``hi`` wins where ``x > hi`` and wherever ``lo > hi``."""
    lo, hi = p.csr.clamp_lo, p.csr.clamp_hi
    empty = Signal(name="clamp_empty")  # a compare of two control registers
    p.m.d.comb += empty.eq(lo > hi)
    return [Mux(empty | (v > hi), hi, Mux(v < lo, lo, v)) for v in p.x]


def _narrow_product(d, mult):
    """``d * mult`` of a narrow signed ``d`` (at most 18 bits) and a signed 32-bit ``mult``
    as two products of at most 18 x 17 bits (one MULT18X18D each): the low and the high
    half of ``mult``. Summed by ``lo + (hi << 16)``."""
    return [d * mult[:16].as_unsigned(), d * mult[16:32].as_signed()]


def _residual(p):
    """By ``res_mode``: 0, ``sat8(x + r)``; 1, ``sat8(max(x, r))``; 2, the scaled add of two
    quantized tensors, ``min(max(rne(((x - res_x_zp) * res_x_mult + (r - res_r_zp) *
    res_r_mult) / 2**res_shift) + res_zp, res_lo), res_hi)`` (``r`` is the int8 residual
    row, sign-extended).

    The add and max modes saturate so that the stage always ends in int8, whichever mode: an
    int8 store of its output is then exact, which the unfused passes rely on
    (:func:`fusion.kernels.epilogue.pass_dtypes`). For int8 ``x`` max is exactly ``max(x, r)``.

    The scaled add takes an int8 ``x`` (its spec's ``in_range``: a qadd's inputs are
    quantized tensors) and keeps the whole sum, so it is exact: ``x - res_x_zp`` and
    ``r - res_r_zp`` have 10 bits, each times a 32-bit multiplier is two MULT18X18D, and the
    sum has 42 bits. A shift beyond the sum's width gives 0 however far it goes (the sum is
    under half of ``2**shift``), so the rounding and the shift are as wide as the sum.
    Rounding half to even is one addition: ``2**(shift-1) - 1`` plus bit ``shift`` of the
    sum (the parity of the truncated quotient) carries into the quotient above a half
    always, at exactly a half only when the quotient is odd
    (:func:`hwgen.lanes.round_shift_even` is the same rule in numpy).

    Registers: the row's read; the row; the four partial products; their sum; the rounding
    add; the shift; then the zero point, the bounds and the mode.
    """
    csr = p.csr
    lanes = len(p.x)
    p.cut()
    res = p.cut([v[:8].as_signed() for v in p.read("res")])  # the int8 residual row
    parts, plain = [], []
    for c, v in enumerate(p.x):
        r = res[c]
        dx = v[:8].as_signed() - csr.res_x_zp
        dr = r - csr.res_r_zp
        parts += _narrow_product(dx, csr.res_x_mult) + _narrow_product(dr, csr.res_r_mult)
        either = Mux(csr.res_mode[0], Mux(v > r, v, r), v + r)
        plain.append(saturate(either, INT8_MIN, INT8_MAX))
    regs = p.cut(parts + plain)
    parts, plain = regs[:4 * lanes], regs[4 * lanes:]
    totals = []
    for c in range(lanes):
        xl, xh, rl, rh = parts[4 * c:4 * c + 4]
        totals.append(((xl + rl) + ((xh + rh) << 16))[:SCALED_BITS].as_signed())
    regs = p.cut(totals + plain)
    totals, plain = regs[:lanes], regs[lanes:]
    shift = Signal(range(SCALED_BITS + 1))  # a constant of the job: no path through it
    p.m.d.comb += shift.eq(Mux(csr.res_shift > SCALED_BITS, SCALED_BITS, csr.res_shift))
    below = _below_half(shift, SCALED_BITS + 1)
    rounded = []
    for total in totals:
        parity = (total >> shift)[0]
        rounded.append(_round_add(total, below, (shift != 0) & parity, SCALED_BITS + 1))
    regs = p.cut(rounded + plain)
    rounded, plain = regs[:lanes], regs[lanes:]
    regs = p.cut([v >> shift for v in rounded] + plain)
    shifted, plain = regs[:lanes], regs[lanes:]
    out = []
    for v, pl in zip(shifted, plain, strict=True):
        scaled = v + csr.res_zp
        bounded = Mux(scaled < csr.res_lo, csr.res_lo, Mux(scaled > csr.res_hi, csr.res_hi,
                                                           scaled))
        out.append(Mux(csr.res_mode[1], bounded, pl))
    return out


#: Bits of the scaled add's exact sum: two 10-bit differences times 32-bit multipliers.
SCALED_BITS = 42


#: Stage name -> its arithmetic (:data:`Lanes`); everything else about a stage is its spec's.
LANES: dict[str, Lanes] = {"bias": _bias, "requant": _requant, "relu": _relu,
                           "clamp": _clamp, "residual": _residual}


class EpilogueStage(wiring.Component):
    """One stage of the chain: its spec's ``latency`` registers (:class:`Pipe`), stream
    handshake, bypass when its mask bit is clear. Its ports beyond the streams come from its
    spec: ``csr`` (its control registers) and ``e`` (its epilogue-scratchpad reads, each
    addressed at the beat's ``bias`` or ``res`` row plus the read's offset when the beat
    enters the stage); its arithmetic is ``LANES[spec.name]``; ``busy`` while a beat is in.
    """

    def __init__(self, config: VariantConfig, spec: StageSpec):
        self._config, self._spec = config, spec
        self._bit = config.epilogue.index(spec.name)
        self.name = spec.name
        sig = beat_signature(config)
        super().__init__({"i": In(sig), "o": Out(sig), "csr": In(stage_csr_signature(spec)),
                          "e": Out(e_reads_signature(config, (spec.name,))), "busy": Out(1)})

    @property
    def config(self) -> VariantConfig:
        return self._config

    def elaborate(self, platform):
        m = Module()
        pipe = Pipe(m, self)
        new = LANES[self._spec.name](pipe)
        if len(pipe.levels) + 1 != self._spec.latency:
            raise ValueError(f"stage {self.name!r} declares latency {self._spec.latency}, but "
                             f"its gateware has {len(pipe.levels) + 1} registers: make them "
                             f"agree (hwgen/stages.py), or the cycle model is wrong")
        # The handshake, from the output back: a register loads when it is empty or the one
        # after it loads.
        load = ~self.o.valid | self.o.ready
        busy = self.o.valid
        for valid, _, level_load in reversed(pipe.levels):
            m.d.comb += level_load.eq(~valid | load)
            load = level_load
            busy = busy | valid
        m.d.comb += [self.i.ready.eq(load), self.busy.eq(busy)]
        # The reads are addressed by the beat entering the first register.
        first_load = pipe.levels[0][2] if pipe.levels else load
        for r in self._spec.reads:
            base = getattr(self.i.payload, r.base)
            port = getattr(self.e, r.name)
            m.d.comb += [port.addr.eq(base + r.offset if r.offset else base),
                         port.en.eq(first_load)]
        out_load = ~self.o.valid | self.o.ready
        with m.If(out_load):
            m.d.sync += [self.o.valid.eq(pipe.valid), self.o.payload.eq(pipe.beat)]
            with m.If(pipe.beat.mask[self._bit]):
                m.d.sync += [self.o.payload.lanes[c].eq(v) for c, v in enumerate(new)]
        return m


class EpiloguePipeline(wiring.Component):
    """The variant's stages in order, joined by ``wiring.connect``, and the queue after them.

    The stages never stall: every register moves on every cycle, and what the consumer (the
    store, the transposer) does not take at once waits in a queue after the last stage (a
    first-word-fall-through FIFO: a beat the consumer takes as it arrives passes it by). A
    beat enters only with a credit: at most ``credits`` = (the stages' registers) + 1 beats
    are inside, so the queue never overflows. The back-pressure is one registered count,
    not a ready signal through every register of the chain (19 of them with every stage),
    which set the clock.

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
        credits = epilogue_credits(self._config.epilogue)
        inside = Signal(range(credits + 1))  # beats entered and not yet taken at the output
        credit = Signal()
        m.d.comb += credit.eq(inside < credits)
        first, last = stages[0], stages[-1]
        m.d.comb += [first.i.valid.eq(self.i.valid & credit), first.i.payload.eq(self.i.payload),
                     self.i.ready.eq(credit)]
        for up, down in zip(stages, stages[1:], strict=False):
            wiring.connect(m, up.o, down.i)
        m.submodules.queue = queue = fifo.SyncFIFO(
            width=Shape.cast(beat_layout(self._config)).width, depth=credits)
        arriving = last.o.payload.as_value()
        m.d.comb += [
            last.o.ready.eq(1),  # so every register of the chain moves every cycle
            self.o.valid.eq(queue.r_rdy | last.o.valid),
            self.o.payload.eq(Mux(queue.r_rdy, queue.r_data, arriving)),
            queue.r_en.eq(self.o.ready),
            # a beat the consumer does not take as it arrives waits, behind any before it
            queue.w_en.eq(last.o.valid & (queue.r_rdy | ~self.o.ready)),
            queue.w_data.eq(arriving),
        ]
        entered = self.i.valid & credit
        taken = self.o.valid & self.o.ready
        m.d.sync += inside.eq(inside + entered - taken)
        busy = queue.r_rdy
        for stage in stages:
            busy = busy | stage.busy
        m.d.comb += self.busy.eq(busy)
        return m
