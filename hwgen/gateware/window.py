"""The window unit: depthwise convolutions and pools, one channel a lane (``WINDOW``/``WCFG``).

Why a unit beside the array rather than a mode of it: in a depthwise convolution every output
lane reads its own channel, so an output-stationary array, whose cells share their row's A
operand and their column's B operand, can use only its diagonal (1/cols of its cells; today's
grouped GEMM). The work that matters is reuse: every input pixel is read by up to ``kh * kw``
outputs. This unit keeps a 3x3 window of pixels (each an A row: ``cols`` channels) in
registers and slides it along the output row. Reading three A scratchpad rows a cycle (a
column of the window; three read ports, which an FPGA gets by replicating the block RAM), it
computes one output pixel a cycle at stride 1, with ``9 * cols`` multipliers, as FINN's VVAU
computes beside its matrix unit.

Pipeline, per window column (``hwgen.isa`` WINDOW for the meaning):

- stage 0 addresses the three rows ``ky`` of the column (input pixel ``(iy, ix)`` at A row
  ``a + iy*win + ix``) and notes which lie inside the input;
- stage 1 shifts the column into the window (``fill`` for rows outside the input);
- stage 2, after an output's last column, registers each tap times its weight (read from the
  taps scratchpad, a copy of the low bytes of the epilogue scratchpad's rows), each window
  row's largest tap, and a sum's running total;
- stage 3 reduces them (mac: the sum of the products; max: the largest of the rows') into
  the tile's row.

The ``9 * cols`` products are LUT multipliers (:mod:`hwgen.gateware.products`): the DSP
blocks of an ECP5 go to the array and the epilogue.

An output's first column is its window's first (``kw`` columns) at the start of a tile and
of an output row; otherwise only the ``min(stride, kw)`` new columns are read. Sum mode reads
an image's whole plane a row a cycle through port 0.

A tile whose last row is computed moves to the drain registers (``res``), which feed the
epilogue a row at a time; while the previous tile still drains there, the whole pipeline
holds (the read ports too, so no read is lost). The next tile's first column issues the
cycle after the last one's last column: tiles stream back to back.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.gateware.dma import SPAD_ADDR_BITS
from hwgen.gateware.products import BOOTH_OFFSET, booth_terms
from hwgen.isa import WMode

#: Rows and columns of the window register: the largest kernel the unit runs.
TAPS = 3


def geometry_layout() -> data.StructLayout:
    """The fields ``WCFG`` sets (:mod:`hwgen.isa`)."""
    return data.StructLayout({"win": 12, "hin": 12, "fill": 8, "kh": 2, "kw": 2, "pt": 2,
                              "pl": 2, "stride": 2, "mode": 2})


def drain_layout(config: VariantConfig) -> data.StructLayout:
    """What the epilogue and the store need of a tile (a WINDOW's or a MATMUL's)."""
    return data.StructLayout({"out": config.mem_addr_bits, "bias": SPAD_ADDR_BITS,
                              "mask": len(EPILOGUE_STAGES), "dt": 1, "tr": 1})


def taps_layout(config: VariantConfig) -> data.ArrayLayout:
    """One row of tap weights: the low byte of each lane of an epilogue-scratchpad row."""
    return data.ArrayLayout(signed(8), config.cols)


def window_job_layout(config: VariantConfig) -> data.StructLayout:
    """What the unit needs of a queued WINDOW; ``drain`` travels with the tile."""
    return data.StructLayout({
        "a": SPAD_ADDR_BITS, "w": SPAD_ADDR_BITS, "pos": 32, "count": 5, "ow": 11,
        "drain": drain_layout(config),
    })


class WindowUnit(wiring.Component):
    """Ports: ``geom`` (the last WCFG); ``take``/``job`` (the compute unit hands a job over
    the cycle ``take`` is high, only when ``ready``); ``a_addr``/``a_data``/``a_en`` (three
    synchronous A scratchpad reads); ``w_addr``/``w_data``/``w_en`` (nine synchronous reads
    of the taps' weights: the low byte of each lane of the epilogue scratchpad's rows, a
    block RAM of their own); ``res_valid``, ``res_job``, ``res_row`` and
    ``res_ack`` (the tile being drained, a row at a time, and its job's drain fields);
    ``reading`` (a queued job may still read a scratchpad: until then WAIT FEED waits) and
    ``busy``."""

    def __init__(self, config: VariantConfig):
        self._config = config
        c = config
        e_bits = ceil_log2(c.spad_e_depth)
        lanes = data.ArrayLayout(signed(c.acc_bits), c.cols)
        super().__init__({
            "geom": In(geometry_layout()),
            "take": In(1), "job": In(window_job_layout(c)), "ready": Out(1),
            "a_addr": Out(data.ArrayLayout(SPAD_ADDR_BITS, TAPS)),
            "a_data": In(data.ArrayLayout(c.a_row_bytes * 8, TAPS)), "a_en": Out(1),
            "w_addr": Out(data.ArrayLayout(e_bits, TAPS * TAPS)),
            "w_data": In(data.ArrayLayout(taps_layout(c), TAPS * TAPS)), "w_en": Out(1),
            "res_valid": Out(1), "res_job": Out(drain_layout(c)), "res_row": Out(lanes),
            "res_first": Out(1),
            "res_ack": In(1),
            "reading": Out(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        g = self.geom
        lanes = c.cols
        sum_mode = g.mode == WMode.SUM

        # -- stage 0: walk the tile's outputs and their columns -------------------------------
        cur = Signal(window_job_layout(c))
        active = Signal()
        r = Signal(5)  # output pixel of the tile
        oy, ox = Signal(16), Signal(16)
        col = Signal(2)  # window column being read
        i = Signal(24)  # sum mode: pixel of the plane
        plane = Signal(24)
        m.d.comb += plane.eq(g.hin * g.win)
        new = Mux(g.stride < g.kw, g.stride, g.kw)  # columns an output adds to the last
        last_col = Mux(sum_mode, i == plane - 1, col == g.kw - 1)
        last_out = r == cur.count - 1
        hold = Signal()
        step = active & ~hold
        finishing = step & last_col & last_out
        m.d.comb += self.ready.eq((~active | finishing) & ~hold)

        ix = Signal(signed(18))
        m.d.comb += ix.eq(ox * g.stride - g.pl + col)
        inside = Signal(TAPS)
        for ky in range(TAPS):
            iy = Signal(signed(18), name=f"iy{ky}")
            m.d.comb += iy.eq(oy * g.stride - g.pt + ky)
            row = Mux(sum_mode, (oy + r) * plane + i, iy * g.win + ix) if ky == 0 else \
                iy * g.win + ix
            m.d.comb += [
                self.a_addr[ky].eq(cur.a + row),
                inside[ky].eq(sum_mode | ((ky < g.kh) & (iy >= 0) & (iy < g.hin)
                                          & (ix >= 0) & (ix < g.win))),
            ]
        m.d.comb += self.a_en.eq(~hold)

        with m.If(step):
            with m.If(sum_mode):
                m.d.sync += i.eq(Mux(last_col, 0, i + 1))
            with m.Elif(last_col):
                wrap = ox == cur.ow - 1
                m.d.sync += [ox.eq(Mux(wrap, 0, ox + 1)), oy.eq(Mux(wrap, oy + 1, oy)),
                             col.eq(Mux(wrap, 0, g.kw - new))]
            with m.Else():
                m.d.sync += col.eq(col + 1)
            with m.If(last_col):
                m.d.sync += r.eq(r + 1)
                with m.If(last_out):
                    m.d.sync += active.eq(0)
        with m.If(self.take):
            pos = self.job.pos
            m.d.sync += [cur.eq(self.job), active.eq(1), r.eq(0), i.eq(0), col.eq(0),
                         oy.eq(pos[16:32]), ox.eq(pos[0:16])]

        # -- stage 1: the column enters the window ---------------------------------------------
        s1 = Signal(data.StructLayout({"valid": 1, "inside": TAPS, "last_col": 1, "r": 5,
                                       "last_out": 1, "first": 1, "count": 5, "w": SPAD_ADDR_BITS,
                                       "drain": drain_layout(c)}))
        with m.If(~hold):
            m.d.sync += [s1.valid.eq(step), s1.inside.eq(inside), s1.last_col.eq(last_col),
                         s1.r.eq(r), s1.last_out.eq(last_out), s1.first.eq(i == 0),
                         s1.count.eq(cur.count), s1.w.eq(cur.w), s1.drain.eq(cur.drain)]
        fill = Cat(*[g.fill] * lanes)
        words = [Mux(s1.inside[ky], self.a_data[ky], fill) for ky in range(TAPS)]
        window = [[Signal(c.a_row_bytes * 8, name=f"win_{ky}_{kx}") for kx in range(TAPS)]
                  for ky in range(TAPS)]
        with m.If(s1.valid & ~hold):
            for ky in range(TAPS):
                m.d.sync += [window[ky][0].eq(window[ky][1]), window[ky][1].eq(window[ky][2]),
                             window[ky][2].eq(words[ky])]

        # -- stage 2: an output's window is whole; its products and partial maxima -----------
        s2 = Signal.like(s1)
        with m.If(~hold):
            m.d.sync += s2.eq(s1)
        # tap (ky, kx) sits in window column kx + 3 - kw; its weight row is w + 3*ky + kx.
        # The weights are read as block RAM reads: addressed by the output in stage 1, they
        # arrive with it in stage 2 (and hold with it).
        m.d.comb += self.w_en.eq(~hold)
        terms = []
        for ky in range(TAPS):
            for wc in range(TAPS):
                n = ky * TAPS + wc
                used = Signal(name=f"used_{ky}_{wc}")  # one signal, read by every lane
                m.d.comb += used.eq((ky < g.kh) & (wc + g.kw >= TAPS))
                m.d.comb += self.w_addr[n].eq(s1.w + ky * TAPS + wc + g.kw - TAPS)
                terms.append((used, window[ky][wc], self.w_data[n]))
        # Stage 3's registers: per lane, each tap's product (less BOOTH_OFFSET: LUT
        # multipliers, hwgen.gateware.products), each window row's largest tap, and the sum
        # mode's total. The products are unsigned, so a lane's 9 sum to at most 19 bits.
        products = [[Signal(16, name=f"prod{lane}_{t}") for t in range(len(terms))]
                    for lane in range(lanes)]
        row_max = [[Signal(signed(9), name=f"max{lane}_{ky}") for ky in range(TAPS)]
                   for lane in range(lanes)]
        total = Signal(data.ArrayLayout(signed(c.acc_bits), lanes))  # sum mode's running sum
        with m.If(~hold):
            for lane in range(lanes):
                for t, (used, word, weight) in enumerate(terms):
                    x = word[8 * lane:8 * lane + 8].as_signed()
                    # the window's byte is recoded: it is in a register a cycle before the
                    # weight leaves its block RAM
                    m.d.sync += products[lane][t].eq(
                        sum(booth_terms(weight[lane], Mux(used, x, 0))))
                for ky in range(TAPS):
                    # Each step of the running max is a signal of its own: as an expression it
                    # is read twice by the next step, and Amaranth writes an expression out at
                    # every use (2**9 comparators a lane for a chain of 9).
                    best = Const(-(1 << 8), signed(9))
                    for wc in range(TAPS):
                        used, word, _ = terms[ky * TAPS + wc]
                        x = word[8 * lane:8 * lane + 8].as_signed()
                        step = Signal(signed(9), name=f"max{lane}_{ky}_{wc}")
                        m.d.comb += step.eq(Mux(used & (x > best), x, best))
                        best = step
                    m.d.sync += row_max[lane][ky].eq(best)
                with m.If(s2.valid):  # a sum's pixel arrived in window column 2 in stage 1
                    x = window[0][2][8 * lane:8 * lane + 8].as_signed()
                    m.d.sync += total[lane].eq(Mux(s2.first, 0, total[lane]) + x)

        # -- stage 3: reduce the output's window into the tile --------------------------------
        s3 = Signal.like(s1)
        with m.If(~hold):
            m.d.sync += s3.eq(s2)
        computed = s3.valid & s3.last_col
        result = Signal(data.ArrayLayout(signed(c.acc_bits), lanes))
        for lane in range(lanes):
            acc = sum(products[lane]) + len(terms) * BOOTH_OFFSET
            best = row_max[lane][0]
            for ky in range(1, TAPS):
                step = Signal(signed(9), name=f"best{lane}_{ky}")
                m.d.comb += step.eq(Mux(row_max[lane][ky] > best, row_max[lane][ky], best))
                best = step
            m.d.comb += result[lane].eq(Mux(g.mode == WMode.MAC, acc,
                                            Mux(g.mode == WMode.MAX, best, total[lane])))

        # -- the tile and its drain -----------------------------------------------------------
        rows = [Signal(data.ArrayLayout(signed(c.acc_bits), lanes), name=f"acc{n}")
                for n in range(c.rows)]
        res = [Signal(data.ArrayLayout(signed(c.acc_bits), lanes), name=f"res{n}")
               for n in range(c.rows)]
        res_valid = Signal()
        drain_row = Signal(range(c.rows))
        capture = computed & s3.last_out
        m.d.comb += hold.eq(capture & res_valid)
        with m.If(computed & ~hold):
            for n in range(c.rows):
                with m.If(s3.r == n):
                    m.d.sync += rows[n].eq(result)
            with m.If(s3.last_out):
                # rows from `count` on are 0 (hwgen.isa WINDOW)
                m.d.sync += [res[n].eq(Mux(s3.r == n, result, Mux(n < s3.count, rows[n], 0)))
                             for n in range(c.rows)]
                m.d.sync += [res_valid.eq(1), drain_row.eq(0), self.res_job.eq(s3.drain)]
        m.d.comb += [self.res_valid.eq(res_valid), self.res_first.eq(drain_row == 0)]
        m.d.comb += self.res_row.eq(res[0])
        with m.Switch(drain_row):
            for n in range(c.rows):
                with m.Case(n):
                    m.d.comb += self.res_row.eq(res[n])
        with m.If(self.res_ack):
            m.d.sync += drain_row.eq(drain_row + 1)
            with m.If(drain_row == c.rows - 1):
                m.d.sync += res_valid.eq(0)
        # Stage 3 reads no scratchpad, but a tile counts as reading until its last row is
        # computed: one rule for the cycle model (hwgen.timing.WINDOW_STAGES), one cycle late.
        m.d.comb += [self.reading.eq(active | s1.valid | s2.valid | s3.valid),
                     self.busy.eq(active | s1.valid | s2.valid | s3.valid | res_valid)]
        return m
