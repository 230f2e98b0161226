"""The compute unit: feeds queued MATMULs through the PE array, drains finished tiles into
the epilogue, runs standalone epilogue passes, and stores the results.

Timing, per MATMUL: one k-slice enters the array per cycle with no gap between MATMULs. A
tile's final slice is held back only while the previous tile is still draining (counted as
``stall_epilogue``); the array itself never stops, so tiles overlap their fill, compute and
drain.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.gateware.array import SystolicArray
from hwgen.gateware.dma import SPAD_ADDR_BITS, StoreUnit
from hwgen.gateware.epilogue import (
    EpiloguePipeline,
    beat_part,
    csr_signature,
    e_reads_signature,
    lane_part,
    lanes_layout,
)
from hwgen.gateware.ports import write_layout
from hwgen.gateware.transpose import Transposer
from hwgen.gateware.window import TAPS, WindowUnit, geometry_layout, taps_layout
from hwgen.timing import array_latency


def job_layout(config: VariantConfig) -> data.StructLayout:
    """A queued MATMUL, EPIPASS or WINDOW (a pass uses ``a`` as its source row, ``k`` as
    rows; a WINDOW ``b`` as its weights' row, ``k`` as ``count | ow << 5``, and ``pos``; a
    MATMUL with ``zf`` has its zero flag's address in ``res``)."""
    fields = {
        "is_pass": 1, "a": SPAD_ADDR_BITS, "b": SPAD_ADDR_BITS, "k": 16, "last": 1,
        "out": config.mem_addr_bits, "bias": SPAD_ADDR_BITS,
        # a residual row, or with zf the zero flag's word address
        "res": max(SPAD_ADDR_BITS, config.mem_addr_bits),
        "mask": len(EPILOGUE_STAGES), "dt": 1, "tr": 1, "zf": 1,
    }
    if config.window_unit:
        fields |= {"win": 1, "pos": 32}
    if config.acc_banks > 1:
        fields |= {"bank": ceil_log2(config.acc_banks)}
    return data.StructLayout(fields)


class ComputeUnit(wiring.Component):
    """Ports: ``job`` (the job queue); ``a_*``/``b_*`` (synchronous scratchpad reads of the
    feeder); ``src_*`` (the epilogue-scratchpad row a pass reads next cycle: a synchronous
    read, always enabled); ``csr`` and ``e``, the
    epilogue's control registers and scratchpad reads, passed on to the
    :class:`~hwgen.gateware.epilogue.EpiloguePipeline`; ``wr`` (memory writes); idle flags and
    the counters' events. With the window unit (:mod:`hwgen.gateware.window`), also ``geom``
    (the last WCFG) and its scratchpad reads, ``wa_*`` (three A rows) and ``ww_*`` (nine
    epilogue rows, the weights)."""

    def __init__(self, config: VariantConfig):
        self._config = config
        c = config
        e_bits = ceil_log2(c.spad_e_depth)
        window = {}
        if c.window_unit:
            window = {
                "geom": In(geometry_layout()),
                "wa_addr": Out(data.ArrayLayout(SPAD_ADDR_BITS, TAPS)),
                "wa_data": In(data.ArrayLayout(c.a_row_bytes * 8, TAPS)), "wa_en": Out(1),
                "ww_addr": Out(data.ArrayLayout(e_bits, TAPS * TAPS)),
                "ww_data": In(data.ArrayLayout(taps_layout(c), TAPS * TAPS)), "ww_en": Out(1),
            }
        super().__init__({
            **window,
            "job": In(stream.Signature(job_layout(c))),
            "a_addr": Out(SPAD_ADDR_BITS), "a_data": In(c.a_row_bytes * 8),
            "b_addr": Out(SPAD_ADDR_BITS), "b_data": In(c.b_row_bytes * 8),
            "src_addr": Out(e_bits), "src_data": In(lanes_layout(c)),
            "csr": In(csr_signature(c)), "e": Out(e_reads_signature(c)),
            "wr": Out(stream.Signature(write_layout(c))),
            "feed_idle": Out(1), "feeding": Out(1), "idle": Out(1),
            "issue": Out(1), "stall_epilogue": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        m.submodules.array = array = SystolicArray(c)
        m.submodules.epilogue = epi = EpiloguePipeline(c)
        m.submodules.store = store = StoreUnit(c)

        # -- feeder: stage 0 addresses the scratchpads, stage 1 presents the operands ---------
        cur = Signal(job_layout(c))
        running = Signal()
        kk = Signal(16)
        tile_pending = Signal()  # a finished tile is in flight or draining
        tile_job = Signal(job_layout(c))
        last_slice = kk == cur.k - 1
        ends_tile = last_slice & cur.last
        blocked = ends_tile & tile_pending
        issue = running & ~blocked
        m.d.comb += [self.a_addr.eq(cur.a + kk), self.b_addr.eq(cur.b + kk),
                     self.issue.eq(issue), self.stall_epilogue.eq(running & blocked)]
        with m.If(issue):
            m.d.sync += kk.eq(kk + 1)
            with m.If(ends_tile):
                m.d.sync += [tile_pending.eq(1), tile_job.eq(cur)]
            with m.If(last_slice):
                m.d.sync += running.eq(0)

        # The operand register: the first of the hwgen.timing.TILE_GAP registers between a
        # tile's final slice and its first drained row (drain_active is the second).
        s1_valid, s1_last = Signal(), Signal()
        m.d.sync += [s1_valid.eq(issue), s1_last.eq(issue & ends_tile)]
        if c.acc_banks > 1:  # the bank travels with the slice (the array delays it as `last`)
            s1_bank = Signal.like(cur.bank)
            m.d.sync += s1_bank.eq(cur.bank)
            m.d.comb += array.bank.eq(s1_bank)
        # The A zero point (bias stage's a_zp, 0 unless a zero-skipping GEMM set it) is
        # subtracted here, so the array's A operands are 9-bit: a skipped all-zero-point A
        # tile then contributes exactly nothing (fusion.kernels.gemm.skip).
        a_zp = self.csr.bias.a_zp if "bias" in c.epilogue else 0
        for i in range(c.rows):
            m.d.comb += array.a[i].eq(
                Mux(s1_valid, self.a_data[8 * i:8 * i + 8].as_signed() - a_zp, 0))
        for j in range(c.cols):
            m.d.comb += array.b[j].eq(Mux(s1_valid, self.b_data[8 * j:8 * j + 8].as_signed(), 0))
        m.d.comb += array.last.eq(s1_last)

        # The finished tile is complete in the array `array_latency` cycles after its last
        # slice; only one can be pending, so a chain of valid bits is enough.
        token = s1_last
        for n in range(array_latency(c)):
            nxt = Signal(name=f"token_d{n}")
            m.d.sync += nxt.eq(token)
            token = nxt

        # -- drain: tile rows, top first, into the epilogue ---------------------------------
        drain_active = Signal()  # the second register of hwgen.timing.TILE_GAP
        drain_row = Signal(range(c.rows))
        with m.If(token):
            m.d.sync += [drain_active.eq(1), drain_row.eq(0)]

        # -- standalone passes read rows of the epilogue scratchpad -------------------------
        pass_job = Signal(job_layout(c))
        pass_active = Signal()
        pass_row = Signal(16)
        take_pass = Signal()  # a pass leaves the queue this cycle
        pass_step = Signal()  # the epilogue takes a pass row this cycle
        # The scratchpad's read is synchronous: it is addressed at the row the pass reads
        # next cycle, so the row is there when the pass needs it, as a combinational read
        # of the current row would be.
        m.d.comb += self.src_addr.eq(
            Mux(take_pass, self.job.payload.a, pass_job.a)
            + Mux(take_pass, 0, pass_row + pass_step))

        # -- the window unit: its own pipeline, sharing the epilogue and the store ------------
        # One unit drains into the epilogue at a time: a WINDOW starts once the array and
        # any pass are done, a MATMUL or a pass once the window unit is.
        # Without the unit these are no terms at all: the option adds nothing to the Verilog
        # of a variant that does not have it.
        wu = None

        def unless(flag: str, value):
            return value if wu is None else value & ~getattr(wu, flag)

        if c.window_unit:
            m.submodules.window = wu = WindowUnit(c)
            job = self.job.payload
            m.d.comb += [
                wu.geom.eq(self.geom), wu.job.a.eq(job.a), wu.job.w.eq(job.b),
                wu.job.pos.eq(job.pos), wu.job.count.eq(job.k[0:5]), wu.job.ow.eq(job.k[5:16]),
                wu.job.drain.out.eq(job.out), wu.job.drain.bias.eq(job.bias),
                wu.job.drain.mask.eq(job.mask), wu.job.drain.dt.eq(job.dt),
                wu.job.drain.tr.eq(job.tr),
                self.wa_addr.eq(wu.a_addr), wu.a_data.eq(self.wa_data), self.wa_en.eq(wu.a_en),
                self.ww_addr.eq(wu.w_addr), wu.w_data.eq(self.ww_data), self.ww_en.eq(wu.w_en),
            ]

        # -- taking the next job ------------------------------------------------------------
        free = ~running | (issue & last_slice)
        array_empty = ~running & ~s1_valid & ~tile_pending
        with m.If(self.job.valid):
            if c.window_unit:
                with m.If(self.job.payload.win):
                    with m.If(array_empty & ~pass_active & ~drain_active & wu.ready):
                        m.d.comb += [self.job.ready.eq(1), wu.take.eq(1)]
            with (m.Elif if c.window_unit else m.If)(self.job.payload.is_pass):
                with m.If(unless("busy", array_empty & ~pass_active)):
                    m.d.comb += [self.job.ready.eq(1), take_pass.eq(1)]
                    m.d.sync += [pass_job.eq(self.job.payload), pass_row.eq(0),
                                 pass_active.eq(self.job.payload.k != 0)]
            with m.Elif(unless("busy", free)):
                m.d.comb += self.job.ready.eq(1)
                m.d.sync += [cur.eq(self.job.payload), kk.eq(0),
                             running.eq(self.job.payload.k != 0)]

        # -- the epilogue's input: a drained row or a pass row -------------------------------
        # With lane sharing a row enters as epilogue_share beats of epilogue_lanes lanes, one
        # a cycle (`part`); the row's source moves on after its last part.
        beat = epi.i.payload
        took = epi.i.valid & epi.i.ready
        part, last_part = beat_part(m, c, took, "part")
        if c.epilogue_share > 1:
            m.d.comb += beat.part.eq(part)
        src = data.View(job_layout(c), Mux(drain_active, tile_job.as_value(), pass_job.as_value()))
        row = Mux(drain_active, drain_row, pass_row)
        m.d.comb += [
            epi.i.valid.eq(drain_active | pass_active),
            beat.mask.eq(src.mask), beat.dt.eq(src.dt), beat.out.eq(src.out),
            beat.bias.eq(src.bias), beat.res.eq(src.res + row),
            beat.first.eq((row == 0) & (part == 0)), beat.tr.eq(src.tr),
            beat.zf.eq(src.zf & drain_active), beat.zaddr.eq(src.res),
        ]
        lanes = lane_part([Mux(drain_active, array.top[j], self.src_data[j])
                           for j in range(c.cols)], part, c)
        m.d.comb += [beat.lanes[j].eq(v) for j, v in enumerate(lanes)]
        if c.window_unit:
            # a window tile drains like an array tile (no residual: its row is never read)
            with m.If(wu.res_valid):
                d = wu.res_job
                m.d.comb += [
                    epi.i.valid.eq(1), beat.mask.eq(d.mask), beat.dt.eq(d.dt),
                    beat.out.eq(d.out), beat.bias.eq(d.bias), beat.res.eq(0),
                    beat.first.eq(wu.res_first & (part == 0)), beat.tr.eq(d.tr),
                    beat.zf.eq(0),
                    wu.res_ack.eq(epi.i.ready & last_part),
                ]
                m.d.comb += [beat.lanes[j].eq(v)
                             for j, v in enumerate(lane_part(wu.res_row, part, c))]
        accepted = unless("res_valid", took) & last_part  # a row's last part went in
        with m.If(accepted & drain_active):
            m.d.comb += array.shift.eq(1)
            m.d.sync += drain_row.eq(drain_row + 1)
            with m.If(drain_row == c.rows - 1):
                m.d.sync += [drain_active.eq(0), tile_pending.eq(0)]
        m.d.comb += pass_step.eq(accepted & ~drain_active)
        with m.If(pass_step):
            m.d.sync += pass_row.eq(pass_row + 1)
            with m.If(pass_row == pass_job.k - 1):
                m.d.sync += pass_active.eq(0)

        wiring.connect(m, wiring.flipped(self.csr), epi.csr)
        wiring.connect(m, epi.e, wiring.flipped(self.e))
        turn_busy = 0
        if c.rows == c.cols:  # a transposing store needs a square array (hwgen.isa: MATMUL tr)
            m.submodules.transpose = turn = Transposer(c)
            wiring.connect(m, epi.o, turn.i)
            wiring.connect(m, turn.o, store.i)
            turn_busy = turn.busy
        else:
            wiring.connect(m, epi.o, store.i)
        wiring.connect(m, store.wr, wiring.flipped(self.wr))
        if "requant" in c.epilogue:  # a tile's zero point is its requantized output's
            m.d.comb += store.zp.eq(self.csr.requant.req_zp[:8])

        m.d.comb += [
            self.feed_idle.eq(unless("reading", ~running & ~self.job.valid)),
            # a job taken off the queue that still reads its operands (a counted WAIT FEED)
            self.feeding.eq(running if wu is None else running | wu.reading),
            self.idle.eq(unless("busy", array_empty & ~pass_active & ~drain_active)
                         & ~self.job.valid & ~epi.busy & ~turn_busy & ~store.busy),
        ]
        return m

