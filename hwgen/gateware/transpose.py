"""The corner turn in front of the store unit: an int8 tile stored column by column.

A GEMM stores its output tiles row by row (``[R][C]``: ``R`` rows of the output matrix, ``C``
columns each), but the next GEMM reads its A operand K-major (``[Kp][R]``: one row of ``R``
output rows per column), so between two GEMMs the tiles would need a transpose. A MATMUL with
``tr`` set stores its tile transposed instead: :class:`Transposer` collects the ``R`` drained
rows of the tile and hands the store unit its ``C`` columns, each ``R`` int8 lanes, so that the
tile lands in memory in exactly the layout the next GEMM's LOADs read (``hwgen.isa``, MATMUL
``tr``). It needs a square array (``R == C``: a column is as long as a row) and int8 tiles.
With lane sharing a row comes in, and a column goes out, as ``epilogue_share`` beats.

Two tile buffers ping-pong, so the drain writes one tile while the store unit empties the
other: a transposed tile costs no bandwidth, only its ``R`` rows of latency
(:data:`hwgen.timing.TRANSPOSE_DELAY`). Beats without ``tr`` pass straight through
(combinationally) once no transposed tile is left, so every other store keeps its timing.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.gateware.epilogue import beat_layout, beat_part, beat_signature, lane_part


class Transposer(wiring.Component):
    """Ports: ``i`` and ``o`` (epilogue beat streams), ``busy`` while a tile is held."""

    def __init__(self, config: VariantConfig):
        if config.rows != config.cols:
            raise ValueError(f"a transposing store needs a square array, not {config.rows} x "
                             f"{config.cols}")
        self._config = config
        sig = beat_signature(config)
        super().__init__({"i": In(sig), "o": Out(sig), "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        c = self._config
        n = c.rows  # rows per tile == columns per tile
        lanes, share = c.epilogue_lanes, c.epilogue_share  # a row or column is share beats
        # bufs[b][r] holds row r of buffer b as n bytes; meta[b] the beat fields of its row 0
        bufs = [[Signal(8 * n, name=f"buf{b}_row{r}") for r in range(n)] for b in (0, 1)]
        meta = [Signal(beat_layout(c), name=f"meta{b}") for b in (0, 1)]
        full = [Signal(name=f"full{b}") for b in (0, 1)]
        wsel, rsel = Signal(), Signal()
        wrow = Signal(range(n))
        rcol = Signal(range(n))

        # -- write side: transposed beats fill the buffer wsel, one row per share beats -------
        packed = Cat(*(self.i.payload.lanes[j][:8] for j in range(lanes)))
        w_full = Mux(wsel, full[1], full[0])
        take_tr = self.i.valid & self.i.payload.tr & ~w_full
        wpart, w_last = beat_part(m, c, take_tr, "wpart")
        held = full[0] | full[1] | (wrow != 0) | (wpart != 0)
        with m.If(take_tr):
            for b in (0, 1):
                with m.If(wsel == b):
                    for r in range(n):
                        for p in range(share):
                            with m.If((wrow == r) & (wpart == p)):
                                m.d.sync += bufs[b][r][8 * lanes * p:8 * lanes * (p + 1)].eq(
                                    packed)
                    with m.If((wrow == 0) & (wpart == 0)):
                        m.d.sync += meta[b].eq(self.i.payload)
                    with m.If((wrow == n - 1) & w_last):
                        m.d.sync += full[b].eq(1)
            with m.If(w_last):
                with m.If(wrow == n - 1):
                    m.d.sync += [wrow.eq(0), wsel.eq(~wsel)]
                with m.Else():
                    m.d.sync += wrow.eq(wrow + 1)

        # -- read side: the full buffer rsel goes out column by column -----------------------
        r_full = Mux(rsel, full[1], full[0])
        rpart, r_last = beat_part(m, c, r_full & self.o.ready, "rpart")
        out = data.View(beat_layout(c), Mux(rsel, meta[1].as_value(), meta[0].as_value()))
        beat = self.o.payload
        with m.If(r_full):
            m.d.comb += [self.o.valid.eq(1), beat.eq(out),
                         beat.first.eq(out.first & (rcol == 0) & (rpart == 0))]
            if share > 1:
                m.d.comb += beat.part.eq(rpart)
            # lane j of beat rpart: column rcol's byte of row rpart * lanes + j
            col = []
            for r in range(n):
                byte = Signal(8, name=f"col_byte{r}")
                for b in (0, 1):
                    with m.If(rsel == b):
                        m.d.comb += byte.eq(bufs[b][r].word_select(rcol, 8))
                col.append(byte.as_signed())
            m.d.comb += [beat.lanes[j].eq(v) for j, v in enumerate(lane_part(col, rpart, c))]
            with m.If(self.o.ready):
                with m.If(r_last):
                    with m.If(rcol == n - 1):
                        m.d.sync += [rcol.eq(0), rsel.eq(~rsel)]
                        for b in (0, 1):
                            with m.If(rsel == b):
                                m.d.sync += full[b].eq(0)
                    with m.Else():
                        m.d.sync += rcol.eq(rcol + 1)
        with m.Elif(~held):
            # nothing held: a plain beat passes straight through
            m.d.comb += [self.o.valid.eq(self.i.valid & ~self.i.payload.tr),
                         beat.eq(self.i.payload)]
        m.d.comb += self.i.ready.eq(Mux(self.i.payload.tr, ~w_full, ~held & self.o.ready))
        m.d.comb += self.busy.eq(held)
        return m
