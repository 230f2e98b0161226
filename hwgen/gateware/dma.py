"""Data movement between the external memory port and the on-chip buffers.

:class:`LoadEngine` runs strided LOAD commands (``count`` segments of ``len`` words) and
window loads (LOADW) from the read channel into a scratchpad, through a :class:`Gearbox` that
cuts the word stream into scratchpad rows (or, for a window load, picks each row's lanes from
its words). Commands overlap: the next one is taken in the cycle the one before makes its last
request and starts requesting the cycle after, while that one's words are still on their way,
so a run of short loads (a convolution's window loads, a streamed GEMM's chunks) keeps the
port busy and pays its latency once, not once each. Responses come
back in order, so each command's context (where its words go, how many) waits in two small
queues, one for the stage that routes words and one for the stage that writes rows.
:class:`StoreUnit` packs epilogue rows into words on the write channel.

All widths are powers of two (checked by :class:`~hwgen.config.VariantConfig`), so every
conversion is a whole ratio. The read channel has no back-pressure and its latency may vary
(a DRAM controller delivers words late, then several back to back): words land in a read
buffer of :attr:`~hwgen.config.VariantConfig.read_credits` entries, and a request needs a
free entry (a credit: requested-and-unused words stay below the depth). The word stage takes
a word when no gearbox is still cutting the one before into rows; an arriving word it can
take at once passes the buffer by, so a fixed-latency memory sees no added cycle. The load
engine still issues at most one request every ``word/row`` cycles when a word holds several
rows, the rate at which a gearbox can empty it.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.gateware.epilogue import beat_signature
from hwgen.gateware.ports import write_layout
from hwgen.isa import Dst, times_const
from hwgen.timing import LOAD_CONTEXTS

SPAD_ADDR_BITS = 16


#: Commands whose words the load engine may have in flight at once (requested, not yet all
#: written): the next command starts issuing as soon as the one before has issued its last
#: request, while that one's words still come back.
CONTEXTS = LOAD_CONTEXTS


def response_layout(config: VariantConfig) -> data.StructLayout:
    """What the word and row stages keep of a command: where its words go and how many;
    for a window load, the byte each lane of a row picks from the row's words (``at``,
    computed as the command is taken, not on the words' path)."""
    at = {"at": data.ArrayLayout(6, config.rows)} if config.window_loads else {}
    return data.StructLayout({
        "dst": 3, "spad": SPAD_ADDR_BITS, "win": 1, "keep": 1, "mask": 16, "fill": 8,
        "len": 16, "words": 32, "rows": 32, **at,
    })


def load_cmd_layout(config: VariantConfig) -> data.StructLayout:
    """A queued LOAD or LOADW command: ``len`` words a segment (row), ``wstep`` words apart
    (1 for LOAD), ``words`` = ``count * len`` in all (the sequencer multiplies the
    instruction's fields as it queues the command: from registers, not on the engine's path
    from the queue to its contexts); a window load (``win``) also has its lane selection,
    fill and ``keep``."""
    return data.StructLayout({
        "dst": 3, "ext": config.mem_addr_bits, "spad": SPAD_ADDR_BITS,
        "stride": config.mem_addr_bits, "count": 16, "len": 16, "words": 32,
        "win": 1, "keep": 1, "wstep": config.mem_addr_bits, "shift": 4, "step": 2,
        "mask": 16, "fill": 8,
    })



class Gearbox(wiring.Component):
    """Cut a stream of ``word_bytes`` words into ``row_bytes`` rows (either may be larger).

    Words must not arrive faster than one every ``word_bytes // row_bytes`` cycles; rows
    come out one cycle after the word that completes them, lowest bytes first.
    """

    def __init__(self, word_bytes: int, row_bytes: int):
        self.word_bytes, self.row_bytes = word_bytes, row_bytes
        super().__init__({
            "i_valid": In(1), "i_data": In(word_bytes * 8),
            "o_valid": Out(1), "o_data": Out(row_bytes * 8),
            "busy": Out(1),
        })

    @property
    def splits(self) -> bool:
        """A word holds several rows: the gearbox needs ``words_per_issue`` cycles a word."""
        return self.word_bytes > self.row_bytes

    @property
    def words_per_issue(self) -> int:
        """Cycles the gearbox needs per word: the load engine's issue interval."""
        return max(1, self.word_bytes // self.row_bytes)

    def elaborate(self, platform):
        m = Module()
        wbits, rbits = self.word_bytes * 8, self.row_bytes * 8
        m.d.sync += self.o_valid.eq(0)
        if self.row_bytes >= self.word_bytes:
            # Collect `n` words, then emit one row.
            n = self.row_bytes // self.word_bytes
            held = Signal(rbits)
            count = Signal(range(n))
            with m.If(self.i_valid):
                merged = Cat(held[wbits:], self.i_data)  # the new word lands on top
                m.d.sync += held.eq(merged)
                with m.If(count == n - 1):
                    m.d.sync += [count.eq(0), self.o_valid.eq(1), self.o_data.eq(merged)]
                with m.Else():
                    m.d.sync += count.eq(count + 1)
            m.d.comb += self.busy.eq(count != 0)
        else:
            # Split each word into `n` rows over `n` cycles.
            n = self.word_bytes // self.row_bytes
            held = Signal(wbits)
            left = Signal(range(n))
            with m.If(self.i_valid):
                m.d.sync += [self.o_valid.eq(1), self.o_data.eq(self.i_data[:rbits]),
                             held.eq(self.i_data >> rbits), left.eq(n - 1)]
            with m.Elif(left != 0):
                m.d.sync += [self.o_valid.eq(1), self.o_data.eq(held[:rbits]),
                             held.eq(held >> rbits), left.eq(left - 1)]
            m.d.comb += self.busy.eq(left != 0)
        return m


class LoadEngine(wiring.Component):
    """Executes LOAD and LOADW commands in order, up to :data:`CONTEXTS` of them in flight.

    Ports: ``cmd`` (a stream of :func:`load_cmd_layout`), the memory read channel
    (``rd_addr``, ``rd_valid``/``rd_data``), one write port per scratchpad (``a_*``, ``b_*``,
    ``e_*``: address, data, enable; ``a_lanes``, the A row's bytes written when ``a_en``: all
    but those a LOADW with ``keep`` leaves), ``busy``, ``unfinished`` (commands taken whose
    last row is not yet written: a counted ``WAIT``) and ``read_beat`` (one pulse per word
    received, for the byte counter). A LOAD to ``Dst.Z`` writes no scratchpad: each word
    it reads is one tile flag (``z_valid``, ``z_flag``: the word is not 0), for the
    sequencer's tile-flag queue.
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        c = config
        super().__init__({
            "cmd": In(stream.Signature(load_cmd_layout(c))),
            "rd_addr": Out(stream.Signature(c.mem_addr_bits)),
            "rd_valid": In(1), "rd_data": In(c.port_bits),
            "a_addr": Out(SPAD_ADDR_BITS), "a_data": Out(c.a_row_bytes * 8), "a_en": Out(1),
            "a_lanes": Out(c.a_row_bytes),
            "b_addr": Out(SPAD_ADDR_BITS), "b_data": Out(c.b_row_bytes * 8), "b_en": Out(1),
            "e_addr": Out(SPAD_ADDR_BITS), "e_data": Out(c.e_row_bytes * 8), "e_en": Out(1),
            "z_valid": Out(1), "z_flag": Out(1),
            "busy": Out(1), "read_beat": Out(1),
            "unfinished": Out(range(CONTEXTS + 2)),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        # One gearbox per distinct row width: A rows, B/int8-epilogue rows, int32 rows, and
        # whole words (tile flags, one a word).
        widths = {Dst.A: c.a_row_bytes, Dst.B: c.b_row_bytes,
                  Dst.E32: c.e_row_bytes, Dst.E8: c.b_row_bytes, Dst.Z: c.port_bytes}
        boxes = {}
        for width in sorted(set(widths.values())):
            boxes[width] = Gearbox(c.port_bytes, width)
            m.submodules[f"gearbox_{width}"] = boxes[width]
        ctx_layout = response_layout(c)
        # Each command's response context, in both the word stage (which gearbox or window
        # a word goes to) and the row stage (which scratchpad row a finished row is written
        # to): responses come back in order, so each stage takes the next context when the
        # one it holds is done, and commands overlap (module docstring).
        m.submodules.word_contexts = ififo = fifo.SyncFIFO(width=ctx_layout.size,
                                                           depth=CONTEXTS)
        m.submodules.row_contexts = ofifo = fifo.SyncFIFO(width=ctx_layout.size,
                                                          depth=CONTEXTS)
        # Words that arrived while the word stage could not take them (module docstring).
        m.submodules.read_buffer = rbuf = fifo.SyncFIFO(width=c.port_bits,
                                                        depth=c.read_credits)

        # -- request side ----------------------------------------------------------------
        cmd = Signal(load_cmd_layout(c))
        seg_base = Signal(c.mem_addr_bits)
        word_addr = Signal(c.mem_addr_bits)
        # Requests left after the current one, in its segment and in the command, counted
        # down, with registered flags for "this request ends its segment" and "... the
        # command": the command take waits on them, so they are bits, not compares.
        words_left = Signal(16)
        segs_left = Signal(16)
        seg_end = Signal()
        cmd_end = Signal()
        issuing = Signal()
        # words requested and not yet taken by the word stage: on their way, or waiting in
        # the read buffer (one counter, so the credit check is one compare of a register)
        used = Signal(range(c.read_credits + 1))
        wait = Signal(range(c.port_bytes + 1))  # issue interval counter
        interval = Signal(range(c.port_bytes + 1))
        m.d.comb += interval.eq(Mux(
            cmd.dst == Dst.A, boxes[widths[Dst.A]].words_per_issue - 1,
            Mux(cmd.dst == Dst.E32, boxes[widths[Dst.E32]].words_per_issue - 1,
                Mux(cmd.dst == Dst.Z, 0, boxes[widths[Dst.B]].words_per_issue - 1))))

        new = self.cmd.payload
        room = ififo.w_rdy & ofifo.w_rdy
        requested = self.rd_addr.valid & self.rd_addr.ready
        last_request = requested & seg_end & cmd_end
        # The next command is taken in the cycle of this one's last request, so a run of
        # loads requests back to back (a streamed GEMM's chunks lose no cycle between them).
        m.d.comb += self.cmd.ready.eq((~issuing | last_request) & room)
        ctx = Signal(ctx_layout)
        words = Signal(32)
        m.d.comb += [words.eq(new.words),
                     ctx.dst.eq(new.dst), ctx.spad.eq(new.spad), ctx.win.eq(new.win),
                     ctx.keep.eq(new.keep), ctx.mask.eq(new.mask),
                     ctx.fill.eq(new.fill), ctx.len.eq(new.len), ctx.words.eq(words)]
        if c.window_loads:
            m.d.comb += [ctx.at[r].eq(new.shift + times_const(new.step, r))
                         for r in range(c.rows)]
        with m.If(new.win):
            m.d.comb += ctx.rows.eq(new.count)
        with m.Else():
            with m.Switch(new.dst):
                for dst, width in widths.items():
                    with m.Case(dst):
                        if width >= c.port_bytes:
                            m.d.comb += ctx.rows.eq(words // (width // c.port_bytes))
                        else:
                            m.d.comb += ctx.rows.eq(words * (c.port_bytes // width))
        # A credit: the words requested and not yet received, plus those waiting in the read
        # buffer, stay below its depth, so whatever arrives has room.
        credit = used < c.read_credits
        m.d.comb += [self.rd_addr.valid.eq(issuing & (wait == 0) & credit),
                     self.rd_addr.payload.eq(word_addr)]
        with m.If(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        next_base = seg_base + cmd.stride  # the next segment's first word
        with m.If(requested):
            m.d.sync += wait.eq(interval)
            with m.If(seg_end):
                m.d.sync += [words_left.eq(cmd.len - 1), seg_end.eq(cmd.len == 1),
                             segs_left.eq(segs_left - 1), cmd_end.eq(segs_left == 1),
                             seg_base.eq(next_base), word_addr.eq(next_base)]
                with m.If(cmd_end):
                    m.d.sync += issuing.eq(0)
            with m.Else():
                m.d.sync += [words_left.eq(words_left - 1), seg_end.eq(words_left == 1),
                             word_addr.eq(word_addr + cmd.wstep)]
        # after the request's updates: a command taken in its last request's cycle wins
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [cmd.eq(new), seg_base.eq(new.ext), word_addr.eq(new.ext),
                         words_left.eq(new.len - 1), seg_end.eq(new.len == 1),
                         segs_left.eq(new.count - 1), cmd_end.eq(new.count == 1),
                         issuing.eq(words != 0)]
            with m.If(words != 0):  # a command without words has nothing to wait for
                m.d.comb += [ififo.w_en.eq(1), ififo.w_data.eq(ctx),
                             ofifo.w_en.eq(1), ofifo.w_data.eq(ctx)]

        # -- read buffer: the word stage takes a word when no gearbox is still cutting one ---
        m.d.comb += self.read_beat.eq(self.rd_valid)
        cutting = 0
        for box in boxes.values():
            if box.splits:
                cutting = cutting | box.busy
        word_valid = Signal()
        word_data = Signal(c.port_bits)
        with m.If(requested & ~word_valid):
            m.d.sync += used.eq(used + 1)
        with m.Elif(~requested & word_valid):
            m.d.sync += used.eq(used - 1)
        m.d.comb += [word_valid.eq(~cutting & (rbuf.r_rdy | self.rd_valid)),
                     word_data.eq(Mux(rbuf.r_rdy, rbuf.r_data, self.rd_data)),
                     rbuf.r_en.eq(~cutting),
                     # an arriving word waits unless it goes straight to the word stage
                     rbuf.w_en.eq(self.rd_valid & (cutting | rbuf.r_rdy)),
                     rbuf.w_data.eq(self.rd_data)]

        # -- word stage: each word to its context's gearbox, or its window row -------------
        wctx = Signal(ctx_layout)
        wleft = Signal(32)  # words of wctx still to come; 0: the next word starts the next
        wnew = Signal(init=1)  # wleft == 0, registered: it chooses where every word goes
        cur = data.View(ctx_layout, Mux(wnew, ififo.r_data, wctx.as_value()))
        with m.If(word_valid):
            with m.If(wnew):
                m.d.comb += ififo.r_en.eq(1)
                m.d.sync += [wctx.eq(ififo.r_data), wleft.eq(cur.words - 1),
                             wnew.eq(cur.words == 1)]
            with m.Else():
                m.d.sync += [wleft.eq(wleft - 1), wnew.eq(wleft == 1)]
        for width, box in boxes.items():
            chosen = 0
            for dst, w in widths.items():
                if w == width:
                    chosen = chosen | (cur.dst == dst)
            m.d.comb += [box.i_valid.eq(word_valid & chosen & ~cur.win),
                         box.i_data.eq(word_data)]

        # A window load's row: its words collected, then each lane's byte picked (or the
        # fill), ready one cycle after the row's last word, like a gearbox row.
        win_valid = Signal()
        win_row = Signal(c.a_row_bytes * 8)
        win_lanes = Signal(c.a_row_bytes)  # the lanes the row writes (keep: only the mask's)
        got = Signal(2)  # words of the window row received so far
        if c.window_loads:
            held = [Signal(c.port_bits, name=f"win_word{i}") for i in range(2)]
            row_bytes = Cat(held[0], held[1], word_data)  # the last word arrives now
            m.d.sync += win_valid.eq(0)
            with m.If(word_valid & cur.win):
                with m.If(got == cur.len - 1):
                    strings = {1: Cat(word_data), 2: Cat(held[0], word_data),
                               3: row_bytes}
                    lanes = []
                    for r in range(c.rows):
                        pick = Signal(8, name=f"win_lane{r}")
                        at = cur.at[r]
                        with m.Switch(cur.len):
                            for n, bits in strings.items():
                                with m.Case(n):
                                    m.d.comb += pick.eq(bits.word_select(at, 8))
                        lanes.append(Mux(cur.mask[r], pick, cur.fill))
                    m.d.sync += [win_valid.eq(1), win_row.eq(Cat(*lanes)), got.eq(0),
                                 win_lanes.eq(Mux(cur.keep, cur.mask, ~0))]
                with m.Else():
                    m.d.sync += [held[0].eq(Mux(got == 0, word_data, held[0])),
                                 held[1].eq(Mux(got == 1, word_data, held[1])),
                                 got.eq(got + 1)]

        # -- row stage: each finished row to its context's scratchpad row ---------------
        rctx = Signal(ctx_layout)
        rleft = Signal(32)  # rows of rctx still to come; 0: the next row starts the next
        rnew = Signal(init=1)  # rleft == 0, registered
        row = Signal(SPAD_ADDR_BITS)  # the row the next row of rctx goes to
        out = data.View(ctx_layout, Mux(rnew, ofifo.r_data, rctx.as_value()))
        row_out = win_valid
        for box in boxes.values():
            row_out = row_out | box.o_valid  # rows come out one at a time, in order
        at_row = Mux(rnew, out.spad, row)
        with m.If(row_out):
            with m.If(rnew):
                m.d.comb += ofifo.r_en.eq(1)
                m.d.sync += [rctx.eq(ofifo.r_data), rleft.eq(out.rows - 1),
                             rnew.eq(out.rows == 1),
                             row.eq(out.spad + 1)]
            with m.Else():
                m.d.sync += [rleft.eq(rleft - 1), rnew.eq(rleft == 1), row.eq(row + 1)]
        a_box, b_box, e_box = boxes[widths[Dst.A]], boxes[widths[Dst.B]], boxes[widths[Dst.E32]]
        # int8 epilogue rows are sign-extended into the int32 lanes
        lanes = [b_box.o_data[8 * i:8 * i + 8].as_signed() for i in range(c.cols)]
        widened = Signal(c.e_row_bytes * 8)
        for i, lane in enumerate(lanes):
            m.d.comb += widened[32 * i:32 * i + 32].eq(lane)
        m.d.comb += [
            self.a_addr.eq(at_row), self.a_data.eq(Mux(out.win, win_row, a_box.o_data)),
            self.a_en.eq(row_out & (out.dst == Dst.A)),
            self.a_lanes.eq(Mux(out.win, win_lanes, ~0)),
            self.b_addr.eq(at_row), self.b_data.eq(b_box.o_data),
            self.b_en.eq(row_out & (out.dst == Dst.B)),
            self.e_addr.eq(at_row),
            self.e_data.eq(Mux(out.dst == Dst.E8, widened, e_box.o_data)),
            self.e_en.eq(row_out & ((out.dst == Dst.E32) | (out.dst == Dst.E8))),
            self.z_valid.eq(row_out & (out.dst == Dst.Z)),
            self.z_flag.eq(boxes[widths[Dst.Z]].o_data.any()),
        ]

        # Commands taken and not finished: those whose context still waits for its first
        # row, and the one whose rows are being written. A command's count drops the cycle
        # after its last row is written (a command without words never counts).
        m.d.comb += self.unfinished.eq(ofifo.level + ~rnew)

        # Busy from the cycle after a command is taken until its last row is written, and
        # one cycle more (hwgen.timing.LOAD_TAIL: the gearbox's output register and this
        # one).
        gear_busy = 0
        for box in boxes.values():
            gear_busy = gear_busy | box.busy | box.o_valid
        working = (issuing | ififo.r_rdy | ofifo.r_rdy | ~wnew | ~rnew
                   | (used != 0) | gear_busy | win_valid | (got != 0))
        lingering = Signal()
        m.d.sync += lingering.eq(working)
        m.d.comb += self.busy.eq(working | lingering)
        return m


class StoreUnit(wiring.Component):
    """Packs epilogue beats (``epilogue_lanes`` lanes, stored as int32 or as their low
    bytes) into memory words on the write channel, at consecutive addresses from the job's
    ``out``: a row's beats hold its lanes in order, so they pack as its bytes would.

    A tile with ``zf`` (MATMUL ``zf``) is also compared, byte by byte as it passes, with the
    output zero point ``zp`` (the low byte of ``req_zp``); after its last word the unit
    writes one more, its zero flag (1: every byte was the zero point) at ``zaddr``, and takes
    no beat meanwhile: a flagged tile holds the store one cycle longer
    (``fusion.cost.machine`` counts it).
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        super().__init__({
            "i": In(beat_signature(config)),
            "wr": Out(stream.Signature(write_layout(config))),
            "zp": In(8),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        wbytes = c.port_bytes
        addr = Signal(c.mem_addr_bits)
        lanes = c.epilogue_lanes
        row8 = Cat(*(self.i.payload.lanes[i][:8] for i in range(lanes)))
        row32 = Cat(*(self.i.payload.lanes[i] for i in range(lanes)))
        bytes8, bytes32 = lanes, 4 * lanes  # of a beat stored as int8, as int32

        # The word being written, and how many more words the held row still holds.
        word = Signal(wbytes * 8)
        word_valid = Signal()
        held = Signal(max(bytes32, wbytes) * 8)
        held_words = Signal(range(bytes32 // min(wbytes, bytes32) + 1))
        fill = Signal(range(max(1, wbytes // bytes8) + 1))  # int8 beats packed so far

        # The zero flag of a flagged tile: its address, whether every byte so far was the
        # zero point, the beats of the tile still to come, and the flag word waiting for the
        # word register (``flag_word``: the register holds it, written at ``zaddr``).
        tile_beats = c.rows * c.epilogue_share
        zf, zall, zaddr = Signal(), Signal(), Signal(c.mem_addr_bits)
        zleft = Signal(range(tile_beats))
        flag_due, flag_word = Signal(), Signal()
        beat_zero = Signal()
        m.d.comb += beat_zero.eq(Cat(*(self.i.payload.lanes[i][:8] == self.zp
                                       for i in range(lanes))).all())

        m.d.comb += [self.wr.valid.eq(word_valid), self.wr.payload.data.eq(word),
                     self.wr.payload.addr.eq(Mux(flag_word, zaddr, addr))]
        wrote = self.wr.valid & self.wr.ready
        with m.If(wrote):
            m.d.sync += [word_valid.eq(0), flag_word.eq(0)]
            with m.If(~flag_word):
                m.d.sync += addr.eq(addr + 1)
        # the output word register is free this cycle, or frees itself this cycle
        word_free = ~word_valid | self.wr.ready

        took = self.i.valid & self.i.ready
        with m.If(took):
            first = self.i.payload.first
            m.d.sync += zleft.eq(Mux(first, tile_beats - 1, zleft - 1))
            with m.If(first):
                m.d.sync += [zf.eq(self.i.payload.zf), zaddr.eq(self.i.payload.zaddr),
                             zall.eq(beat_zero)]
            with m.Else():
                m.d.sync += zall.eq(zall & beat_zero)
            # the tile's last beat: its flag goes out after its last word
            last_beat = (Mux(first, self.i.payload.zf, zf)
                         & Mux(first, tile_beats == 1, zleft == 1))
            with m.If(last_beat):
                m.d.sync += flag_due.eq(1)

        with m.If(flag_due):
            # every word of the tile is in the word register or out: the flag follows
            m.d.comb += self.i.ready.eq(0)
            with m.If(word_free & (held_words == 0) & (fill == 0)):
                m.d.sync += [word.eq(zall), word_valid.eq(1), flag_word.eq(1),
                             flag_due.eq(0)]
        with m.Elif(held_words != 0):
            m.d.comb += self.i.ready.eq(0)
            with m.If(word_free):
                m.d.sync += [word.eq(held[:wbytes * 8]), word_valid.eq(1),
                             held.eq(held >> (wbytes * 8)), held_words.eq(held_words - 1)]
        with m.Else():
            m.d.comb += self.i.ready.eq(word_free)
            with m.If(self.i.valid & word_free):
                with m.If(self.i.payload.first):
                    # addr is advanced by `wrote` in the same cycle only for the old job,
                    # whose words are all out by now (rows are whole words per job)
                    m.d.sync += addr.eq(self.i.payload.out)
                for dt, row, nbytes in ((0, row32, bytes32), (1, row8, bytes8)):
                    with m.If(self.i.payload.dt == dt):
                        if nbytes >= wbytes:
                            m.d.sync += [word.eq(row[:wbytes * 8]), word_valid.eq(1),
                                         held.eq(row >> (wbytes * 8)),
                                         held_words.eq(nbytes // wbytes - 1)]
                        else:
                            per_word = wbytes // nbytes
                            with m.Switch(fill):
                                for k in range(per_word):
                                    with m.Case(k):
                                        m.d.sync += word.eq(
                                            (word if k else 0) | (row << (8 * nbytes * k)))
                            with m.If(fill == per_word - 1):
                                m.d.sync += [fill.eq(0), word_valid.eq(1)]
                            with m.Else():
                                m.d.sync += fill.eq(fill + 1)
        m.d.comb += self.busy.eq(word_valid | (held_words != 0) | (fill != 0) | flag_due)
        return m
