"""The hardware and microcode faults that ``make mutate`` injects (:mod:`bench.mutate`).

Each :class:`Mutation` is one small textual patch of a gateware module (``hwgen/gateware/``) or
a microcode template (``rtl_templates/microcode/``), or of the compiler code that decides what a
kernel may skip (``fusion/kernels/gemm/sparse.py``): the text ``old`` must occur exactly once
in the file (so the campaign fails loudly when the code moves on and a patch no longer
applies), and is replaced by ``new``. Each models a plausible bug, chosen so that it changes
only some results: off-by-one boundaries, rounding of exact ties, one wrong lane, a counter
that counts the wrong unit, a wait that does not wait.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    """One injected fault.

    Attributes
    ----------
    name : str
        Short identifier (the table's first column).
    path : str
        The file patched, relative to the repository root.
    old, new : str
        The text replaced (exactly one occurrence) and its replacement.
    doc : str
        What the fault does.
    variant : str
        Which variant of :data:`bench.mutate.VARIANTS` the mutant is built as and checked
        on: ``"base"``, ``"window"`` for the parts only a variant whose A row is one
        memory word has (window loads, the window unit), ``"ddr3"`` for the parts that
        only a memory with variable latency exercises (the read buffer, the DRAM adapter),
        or ``"banks"`` for the accumulator banks.
    """

    name: str
    path: str
    old: str
    new: str
    doc: str
    variant: str = "base"


EPI = "hwgen/gateware/epilogue.py"
#: Patches whose text is too long for one line of the table below.
TRANSPOSE_OLD = "m.d.comb += byte.eq(bufs[b][r].word_select(rcol, 8))"
TRANSPOSE_NEW = "m.d.comb += byte.eq(bufs[b][r].word_select(rcol ^ 1, 8))"
LOADW_OLD = "lanes.append(Mux(cur.mask[r], pick, cur.fill))"
LOADW_NEW = "lanes.append(pick)"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("pe-one-bank", "hwgen/gateware/pe.py", "acc = accs[self.bank_in]",
             "acc = accs[0]",
             "every processing element sums every tile in bank 0: a super tile's tiles mix",
             "banks"),
    Mutation("seq-bank-dropped", "hwgen/gateware/sequencer.py",
             'job.bank.eq(_field(word, Op.MATMUL, "bank"))', "job.bank.eq(0)",
             "the sequencer does not pass MATMUL's bank on to the job", "banks"),
    Mutation("gemm-bank-immediate", "rtl_templates/microcode/gemm.j2",
             "{% if bank %}, bank={{ bank }}{% endif %}", "",
             "the GEMM's unrolled grid names no bank (every tile in bank 0)", "banks"),
    Mutation("requant-round-ties", EPI,
             "Mux(odd, _below_half(shift, 65), _half(shift, 65))",
             "Mux(odd | (shift != 0), _below_half(shift, 65), _half(shift, 65))",
             "requantize rounds exact halves toward -inf instead of +inf (only ties differ)"),
    Mutation("requant-round-even", EPI,
             "odd & parity, 65))",
             "odd & ~parity, 65))",
             "round-half-even requantize rounds exact halves away from even"),
    Mutation("requant-sat-low", EPI,
             "return [saturate(v + csr.req_zp, INT8_MIN, INT8_MAX) for v in scaled]",
             "return [saturate(v + csr.req_zp, INT8_MIN + 1, INT8_MAX) for v in scaled]",
             "requantize saturates at -127 instead of -128"),
    Mutation("requant-sat-high", EPI,
             "return [saturate(v + csr.req_zp, INT8_MIN, INT8_MAX) for v in scaled]",
             "return [saturate(v + csr.req_zp, INT8_MIN, INT8_MAX - 1) for v in scaled]",
             "requantize saturates at 126 instead of 127"),
    Mutation("relu-lets-minus-one", EPI,
             "return [Mux(v < 0, 0, v) for v in p.x]",
             "return [Mux(v < -1, 0, v) for v in p.x]",
             "ReLU lets -1 through"),
    Mutation("clamp-hi-off-by-one", EPI,
             "Mux(empty | (v > hi), hi,",
             "Mux(empty | (v > hi + 1), hi,",
             "clamp lets hi + 1 through"),
    Mutation("bias-lane", EPI,
             "saturate(v + bias[c], INT32_MIN, INT32_MAX)",
             "saturate(v + bias[c ^ 1], INT32_MIN, INT32_MAX)",
             "each lane adds its neighbour's bias"),
    Mutation("residual-mode", EPI,
             "Mux(csr.res_mode[0], Mux(v > r, v, r), v + r)",
             "Mux(csr.res_mode[0], Mux(v > r, r, v), v + r)",
             "residual max mode computes the minimum"),
    Mutation("residual-sat-high", EPI,
             "plain.append(saturate(either, INT8_MIN, INT8_MAX))",
             "plain.append(saturate(either, INT8_MIN, INT8_MAX - 1))",
             "residual add saturates at 126 instead of 127"),
    Mutation("residual-scaled-rounding", EPI,
             "_round_add(total, below, (shift != 0) & parity,",
             "_round_add(total, _half(shift, SCALED_BITS + 1), Const(0, 1),",
             "the scaled add rounds ties up instead of to even"),
    Mutation("per-channel-shift", EPI,
             "shifts.append(Mux(per_channel, pc_shift[c], csr.req_shift))",
             "shifts.append(csr.req_shift)",
             "per-channel requantize takes the per-tensor shift register"),
    Mutation("mac-sign", "hwgen/gateware/pe.py",
             "total.eq(acc + self.a_in * self.b_in)",
             "total.eq(acc + self.a_in.as_unsigned() * self.b_in)",
             "the MAC reads A as unsigned"),
    Mutation("skew", "hwgen/gateware/array.py",
             'pe.a_in.eq(self._delay(m, self.a[i], i + 1, f"a{i}"))',
             'pe.a_in.eq(self._delay(m, self.a[i], i + 1 - (i == 2), f"a{i}"))',
             "row 2 of A enters the array a cycle early"),
    Mutation("dma-stride", "hwgen/gateware/dma.py",
             "next_base = seg_base + cmd.stride",
             "next_base = seg_base + cmd.stride + (seg == 1)",
             "the third segment of a strided LOAD starts a word late"),
    Mutation("loop-count", "rtl_templates/microcode/common.j2",
             "li rd=r12, imm={{ g.n_inner }}",
             "li rd=r12, imm={{ g.n_inner - 1 }}",
             "the inner loop of a job grid runs one iteration short"),
    Mutation("wait-ignores-compute", "hwgen/gateware/sequencer.py",
             "& ((~units[2]) | compute_idle))",
             ")",
             "WAIT does not wait for the compute unit (epilogue and stores)"),
    Mutation("bytes-written-beats", "hwgen/gateware/counters.py",
             'step = self._config.port_bytes if name.startswith("bytes_") else 1',
             'step = self._config.port_bytes if name == "bytes_read" else 1',
             "bytes_written counts write beats, not bytes"),
    Mutation("instret-skips-halt", "hwgen/gateware/sequencer.py",
             "m.d.comb += [retire.eq(1), restart.eq(1)]",
             "m.d.comb += restart.eq(1)",
             "HALT does not retire (instret one short)"),
    Mutation("counted-load-unqueued", "hwgen/gateware/accelerator.py",
             "seq.loads_left.eq(load_q.level + dma.unfinished)",
             "seq.loads_left.eq(dma.unfinished)",
             "a counted WAIT LOAD counts the loads the engine took, not those still queued"),
    Mutation("transpose-column", "hwgen/gateware/transpose.py",
             TRANSPOSE_OLD, TRANSPOSE_NEW,
             "the transposing store writes the columns of a tile in a rotated order",
             variant="window"),
    Mutation("loadw-fill", "hwgen/gateware/dma.py",
             LOADW_OLD, LOADW_NEW,
             "a window load's lanes outside the mask read memory instead of the fill byte",
             variant="window"),
    Mutation("window-fill", "hwgen/gateware/window.py",
             "fill = Cat(*[g.fill] * lanes)",
             "fill = Cat(*[g.fill & 0] * lanes)",
             "the window unit pads with 0 instead of the fill byte (the zero point)",
             variant="window"),
    Mutation("window-bottom-edge", "hwgen/gateware/window.py",
             "& (iy >= 0) & (iy < g.hin)",
             "& (iy >= 0) & (iy <= g.hin)",
             "the row below the input is read from the scratchpad instead of padded",
             variant="window"),
    Mutation("read-buffer-no-gate", "hwgen/gateware/dma.py",
             "m.d.comb += [word_valid.eq(~cutting & (rbuf.r_rdy | self.rd_valid)),",
             "m.d.comb += [word_valid.eq(rbuf.r_rdy | self.rd_valid),",
             "the word stage takes a word while a gearbox still cuts the one before (a DRAM's "
             "burst of late words overruns it; the ideal memory never bursts)",
             variant="ddr3"),
    Mutation("sparse-load-wait", "rtl_templates/microcode/gemm_sparse.j2",
             "c.counted_wait(col.left, Unit.LOAD)", "c.counted_wait(col.left + 2, Unit.LOAD)",
             "a block-sparse column block's MATMULs may start while its weights (or A) still "
             "load"),
    Mutation("sparse-slot-overwrite", "rtl_templates/microcode/gemm_sparse.j2",
             "c.counted_wait(col.feed_left, Unit.FEED)", "c.counted_wait(0, 0)",
             "a block-sparse column block loads the weights three blocks ahead into the slot of "
             "the block before without waiting for its MATMULs to read it"),
    Mutation("sparse-skips-kept-block", "fusion/kernels/gemm/sparse.py",
             "    for j in col:\n        lo, hi = spans[j]",
             "    for j in (col[:-1] or col):\n        lo, hi = spans[j]",
             "the block-sparse program skips the last block of weights each column block keeps "
             "(a block that holds a non-zero weight)"),
    Mutation("skip-flags-off-by-one", "fusion/kernels/gemm/skip.py",
             '("r13", regions["a_flags"].addr)', '("r13", regions["a_flags"].addr + 1)',
             "the zero-skipping program reads each tile's flag one word late: it skips tiles "
             "that hold non-zero values (and runs zero ones)"),
    Mutation("zero-flag-any-byte", "hwgen/gateware/dma.py",
             "for i in range(lanes))).all())", "for i in range(lanes))).any())",
             "the store unit flags a tile whose beats each hold one zero-point byte: a reader "
             "would skip a tile that is not zero"),
    Mutation("zero-flag-stale", "hwgen/gateware/dma.py",
             "zall.eq(beat_zero)]", "zall.eq(zall & beat_zero)]",
             "the store unit's zero flag starts each tile from the tile before's (a stale "
             "bitmap: a zero tile after a non-zero one is not flagged)"),
    Mutation("write-data-early", "hwgen/gateware/native.py",
             "wfifo.r_en.eq(self.wdata_ready),",
             "wfifo.r_en.eq(self.cmd_valid & self.cmd_ready & self.cmd_we),",
             "the adapter drops a write's data when the command is accepted, not when the "
             "controller takes it",
             variant="ddr3"),
)
