"""The microcode sequencer: fetches 64-bit words from instruction memory and issues them.

One instruction retires per cycle unless it waits: a LOAD on a full DMA queue, a MATMUL or
EPIPASS on a full compute queue, a WAIT on busy units. Fields are sliced with the same
:data:`hwgen.isa.SLOTS` table the assembler encodes with.
"""

from __future__ import annotations

from amaranth import Array, Module, Mux, ResetInserter, Signal
from amaranth.lib import fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.gateware.compute import job_layout
from hwgen.gateware.dma import load_cmd_layout
from hwgen.gateware.epilogue import csr_signature
from hwgen.gateware.ports import imem_write_signature
from hwgen.gateware.window import geometry_layout
from hwgen.isa import NUM_REGS, OPCODES, REG_BITS, SLOTS, WORD_BITS, Dst, Op, window_words
from hwgen.stages import SPECS
from hwgen.timing import LOAD_CONTEXTS, QUEUE_DEPTH, ZQ_DEPTH


def _leaves(interface) -> list[Signal]:
    """The signals of a nested interface (``csr``: stage -> register)."""
    return [value for _path, _flow, value in interface.signature.flatten(interface)]


def _field(word, op: Op, name: str):
    """The bits of field ``name`` of opcode ``op`` in ``word``."""
    for f in OPCODES[op][0]:
        if f.name == name:
            lo = SLOTS[f.slot][0] + f.lo
            return word[lo:lo + f.width]
    raise KeyError(f"{op.name} has no field {name}")


class Sequencer(wiring.Component):
    """Ports: ``start``; the LOAD and job streams into the two queues; ``csr``, the epilogue
    control registers (:func:`hwgen.gateware.epilogue.csr_signature`); the idle flags of the
    units (``dma_idle``, ``feed_idle``, ``compute_idle``) and the commands a counted WAIT
    counts (``loads_left``: LOADs queued or unfinished; ``jobs_left``: jobs queued or still
    reading their operands); ``z_valid``/``z_flag``, the tile flags a ``load dst=z`` reads,
    into the tile-flag queue BZT takes from; ``halted``, ``running``, ``retire`` (one pulse
    per instruction retired) and ``skip`` (one per BZT taken)."""

    def __init__(self, config: VariantConfig):
        self._config = config
        super().__init__({
            "start": In(1),
            "imem": In(imem_write_signature(config)),
            "load": Out(stream.Signature(load_cmd_layout(config))),
            "job": Out(stream.Signature(job_layout(config))),
            "csr": Out(csr_signature(config)),
            "dma_idle": In(1), "feed_idle": In(1), "compute_idle": In(1),
            "loads_left": In(range(QUEUE_DEPTH + LOAD_CONTEXTS + 2)),
            "jobs_left": In(range(QUEUE_DEPTH + 2)),
            "z_valid": In(1), "z_flag": In(1),
            "halted": Out(1), "running": Out(1), "retire": Out(1), "skip": Out(1),
            **({"geom": Out(geometry_layout())} if config.window_unit else {}),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        # The host's write port (a 32-bit half at a time) and two synchronous read ports:
        # two block RAMs, each written by the host. The word that executes is a register
        # (``ir``), never the block RAM's slow output, and no address depends on what the
        # executing word computes through the registers: port A reads the word after the
        # one that executes next, port B the branch target of the one that executes next.
        # So the next word is always at hand, the branch's taken or not, and a branch costs
        # no cycle (fusion.cost.machine counts none).
        m.submodules.imem = imem = memory.Memory(shape=WORD_BITS, depth=c.imem_depth, init=[])
        wp = imem.write_port(granularity=WORD_BITS // 2)
        m.d.comb += [wp.addr.eq(self.imem.addr), wp.data.eq(self.imem.data),
                     wp.en.eq(self.imem.en)]
        rd_a, rd_b = imem.read_port(), imem.read_port()
        regs = Array(Signal(REG_BITS, name=f"r{n}") for n in range(NUM_REGS))
        # Whether each register holds 1, kept beside it as it is written: a BNZD decides
        # whether it branches from one bit, not from a 32-bit compare after the register
        # file's read multiplexer (the branch decides the next fetch address).
        ones = Array(Signal(name=f"r{n}_is_1") for n in range(NUM_REGS))
        pc = Signal(range(c.imem_depth))  # the address of ``ir``; 0 while not running
        ir = Signal(WORD_BITS)  # the word that executes
        ir_next = Signal(WORD_BITS)
        advance = Signal()  # the word retires and the next follows it
        jump = Signal()  # the word retires and the next is its branch target
        restart = Signal()  # not running, or halting: the next program starts at word 0
        fetch1 = Signal()  # ... and starts now: word 0 executes next, port A reads word 1
        word = ir
        op = word[SLOTS["op"][0]:SLOTS["op"][0] + SLOTS["op"][1]]
        target = _field(word, Op.BNZD, "target")  # BZT's target is the same bits
        # The next word's address and the one after it: the candidates are sums of
        # registers, so only the choice between them waits for what the word decides.
        m.d.comb += [
            ir_next.eq(Mux(jump, rd_b.data, Mux(advance | restart, rd_a.data, ir))),
            rd_a.addr.eq(Mux(restart, fetch1, Mux(jump, target + 1,
                                                  Mux(advance, pc + 2, pc + 1)))),
            rd_b.addr.eq(_field(ir_next, Op.BNZD, "target")),
        ]
        m.d.sync += [ir.eq(ir_next),
                     pc.eq(Mux(restart, 0, Mux(jump, target, Mux(advance, pc + 1, pc))))]

        def reg(o: Op, name: str):
            return regs[_field(word, o, name)]

        retire = Signal()
        m.d.comb += self.retire.eq(retire)

        # The tile-flag queue: flags arrive from the load engine in order (no back-pressure:
        # a program loads no more than ZQ_DEPTH ahead of its BZTs), a BZT takes the oldest.
        # The oldest waits in a flip-flop (``head``) beside the queue's block RAM, so a BZT
        # decides its branch from one register, not from the RAM's slow output. A start
        # empties both: no program sees flags another left.
        m.submodules.zflags = zq = ResetInserter(self.start)(
            fifo.SyncFIFOBuffered(width=1, depth=ZQ_DEPTH))
        m.d.comb += [zq.w_en.eq(self.z_valid), zq.w_data.eq(self.z_flag)]
        head, head_valid, take_head = Signal(), Signal(), Signal()
        m.d.comb += zq.r_en.eq(~head_valid | take_head)
        with m.If(zq.r_en & zq.r_rdy):
            m.d.sync += [head.eq(zq.r_data), head_valid.eq(1)]
        with m.Elif(take_head):
            m.d.sync += head_valid.eq(0)

        # LOAD command and compute job, assembled from the current word.
        ld = self.load.payload
        # LOAD and LOADW share the slots of ext, spad and stride.
        m.d.comb += [ld.ext.eq(reg(Op.LOAD, "ext")), ld.spad.eq(reg(Op.LOAD, "spad")),
                     ld.stride.eq(reg(Op.LOAD, "stride"))]
        with m.If(op == Op.LOADW):
            shift, step = _field(word, Op.LOADW, "shift"), _field(word, Op.LOADW, "step")
            m.d.comb += [
                ld.dst.eq(Dst.A), ld.win.eq(1), ld.count.eq(_field(word, Op.LOADW, "count")),
                ld.len.eq(window_words(c.rows, shift, step)),
                ld.wstep.eq(reg(Op.LOADW, "next")), ld.shift.eq(shift), ld.step.eq(step),
                ld.mask.eq(_field(word, Op.LOADW, "mask")), ld.fill.eq(reg(Op.LOADW, "fill")),
                ld.keep.eq(_field(word, Op.LOADW, "keep")),
            ]
        with m.Else():
            m.d.comb += [
                ld.dst.eq(_field(word, Op.LOAD, "dst")), ld.wstep.eq(1),
                ld.count.eq(_field(word, Op.LOAD, "count")),
                ld.len.eq(_field(word, Op.LOAD, "len")),
            ]
        m.d.comb += ld.words.eq(ld.count * ld.len)
        job = self.job.payload
        is_pass = op == Op.EPIPASS
        m.d.comb += [
            job.is_pass.eq(is_pass),
            # MATMUL and EPIPASS share slot positions for every field they both have.
            job.a.eq(reg(Op.MATMUL, "a")), job.b.eq(reg(Op.MATMUL, "b")),
            job.k.eq(_field(word, Op.MATMUL, "k")), job.last.eq(_field(word, Op.MATMUL, "last")),
            job.out.eq(reg(Op.MATMUL, "out")), job.bias.eq(reg(Op.MATMUL, "bias")),
            job.res.eq(reg(Op.MATMUL, "res")), job.mask.eq(_field(word, Op.MATMUL, "mask")),
            job.dt.eq(_field(word, Op.MATMUL, "dt")), job.tr.eq(_field(word, Op.MATMUL, "tr")),
            job.zf.eq(Mux(op == Op.MATMUL, _field(word, Op.MATMUL, "zf"), 0)),
        ]
        if c.acc_banks > 1:
            m.d.comb += job.bank.eq(_field(word, Op.MATMUL, "bank"))
        if c.window_unit:  # WINDOW's pos is MATMUL's res slot, whole
            m.d.comb += [job.win.eq(op == Op.WINDOW), job.pos.eq(reg(Op.WINDOW, "pos"))]

        # What a WAIT looks at, registered: the units' idle flags and counts are wide ORs and
        # sums across the design, and a WAIT's decision chooses the next fetch address. So
        # a WAIT sees each unit as it was the cycle before, with what this sequencer issued
        # that cycle counted in (a command it issued is in a queue now, whatever the flag
        # said then): a WAIT retires the cycle after its units are done
        # (fusion.cost.machine counts it so).
        issued_load = self.load.valid & self.load.ready
        issued_job = self.job.valid & self.job.ready
        dma_idle, feed_idle, compute_idle = Signal(), Signal(), Signal()
        loads_left = Signal(len(self.loads_left) + 1)
        jobs_left = Signal(len(self.jobs_left) + 1)
        m.d.sync += [dma_idle.eq(self.dma_idle & ~issued_load),
                     feed_idle.eq(self.feed_idle & ~issued_job),
                     compute_idle.eq(self.compute_idle & ~issued_job),
                     loads_left.eq(self.loads_left + issued_load),
                     jobs_left.eq(self.jobs_left + issued_job)]

        # Every start begins from the reset state: registers, the epilogue's control
        # registers and the window geometry, whatever the program before left in them.
        fresh = [r.eq(0) for r in regs] + [r.eq(0) for r in ones] + [
            s.eq(s.init) for s in _leaves(self.csr)]
        fresh += [head_valid.eq(0)]
        if c.window_unit:
            fresh += [self.geom.eq(0)]
        with m.FSM():
            with m.State("IDLE"):
                # port A holds word 0, which executes the cycle after the start
                m.d.comb += [restart.eq(1), fetch1.eq(self.start)]
                with m.If(self.start):
                    m.d.sync += fresh
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [self.running.eq(1), advance.eq(retire)]
                with m.Switch(op):
                    with m.Case(Op.NOP):
                        m.d.comb += retire.eq(1)
                    with m.Case(Op.HALT):
                        m.d.comb += [retire.eq(1), restart.eq(1)]
                        m.next = "HALTED"
                    with m.Case(Op.WAIT):
                        units = _field(word, Op.WAIT, "units")  # bits: hwgen.isa.Unit
                        left = _field(word, Op.WAIT, "left")
                        # left = 0: idle (the busy flags); else the newest `left` may pend
                        load_ok = Mux(left == 0, dma_idle, loads_left <= left)
                        feed_ok = Mux(left == 0, feed_idle, jobs_left <= left)
                        ok = (((~units[0]) | load_ok) & ((~units[1]) | feed_ok)
                              & ((~units[2]) | compute_idle))
                        m.d.comb += retire.eq(ok)
                    with m.Case(Op.LI):
                        imm = _field(word, Op.LI, "imm")
                        m.d.sync += [reg(Op.LI, "rd").eq(imm),
                                     ones[_field(word, Op.LI, "rd")].eq(imm == 1)]
                        m.d.comb += retire.eq(1)
                    with m.Case(Op.ADDI):
                        rs, imm = reg(Op.ADDI, "rs"), _field(word, Op.ADDI, "imm")
                        # rs + imm == 1 (wrapping) is rs == 1 - imm: a compare beside the
                        # add, not after it
                        one_at = Signal(REG_BITS)
                        m.d.comb += one_at.eq(1 - imm)
                        m.d.sync += [reg(Op.ADDI, "rd").eq(rs + imm),
                                     ones[_field(word, Op.ADDI, "rd")].eq(rs == one_at)]
                        m.d.comb += retire.eq(1)
                    with m.Case(Op.BNZD):
                        counter = reg(Op.BNZD, "rc")
                        m.d.sync += [counter.eq(counter - 1),
                                     ones[_field(word, Op.BNZD, "rc")].eq(counter == 2)]
                        m.d.comb += retire.eq(1)
                        # the count left is not 0: taken
                        with m.If(~ones[_field(word, Op.BNZD, "rc")]):
                            m.d.comb += jump.eq(1)
                    with m.Case(Op.BZT):
                        # the oldest flag: set, the tile is all zero point and is jumped over
                        m.d.comb += [retire.eq(head_valid), take_head.eq(head_valid)]
                        with m.If(head_valid & head):
                            m.d.comb += [jump.eq(1), self.skip.eq(1)]
                    with m.Case(*((Op.LOAD, Op.LOADW) if c.window_loads else (Op.LOAD,))):
                        m.d.comb += [self.load.valid.eq(1), retire.eq(self.load.ready)]
                    with m.Case(*((Op.MATMUL, Op.EPIPASS, Op.WINDOW) if c.window_unit
                                  else (Op.MATMUL, Op.EPIPASS))):
                        m.d.comb += [self.job.valid.eq(1), retire.eq(self.job.ready)]
                    if c.window_unit:
                        with m.Case(Op.WCFG):
                            m.d.sync += [getattr(self.geom, f).eq(_field(word, Op.WCFG, f))
                                         for f in geometry_layout().members]
                            m.d.comb += retire.eq(1)
                    with m.Case(Op.CSRWI):
                        value = _field(word, Op.CSRWI, "imm")
                        with m.Switch(_field(word, Op.CSRWI, "csr")):
                            # The registers of the variant's stages (a write to another
                            # stage's register has nothing to change).
                            for stage in self.csr.signature.members:
                                for reg in SPECS[stage].regs:
                                    with m.Case(reg.csr):
                                        target = getattr(getattr(self.csr, stage), reg.name)
                                        m.d.sync += target.eq(value)
                        m.d.comb += retire.eq(1)
                    with m.Default():
                        # An unknown opcode stops the program; the decoder refuses such
                        # words before they get here, so this is only a safe landing.
                        m.d.comb += restart.eq(1)
                        m.next = "HALTED"
            with m.State("HALTED"):
                m.d.comb += [self.halted.eq(1), restart.eq(1), fetch1.eq(self.start)]
                with m.If(self.start):  # the host runs the next program without a reset
                    m.d.sync += fresh
                    m.next = "RUN"
        return m
