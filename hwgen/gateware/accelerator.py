"""The accelerator of one variant: sequencer, DMA, scratchpads, compute unit, counters."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.gateware.compute import ComputeUnit, job_layout
from hwgen.gateware.counters import PerfCounters
from hwgen.gateware.dma import LoadEngine, load_cmd_layout
from hwgen.gateware.epilogue import e_reads_signature, lanes_layout
from hwgen.gateware.host import HostInterface
from hwgen.gateware.ports import mem_port_signature, wishbone_signature
from hwgen.gateware.sequencer import Sequencer
from hwgen.gateware.window import taps_layout
from hwgen.regmap import bus_addr_bits
from hwgen.timing import QUEUE_DEPTH


def _queue(m: Module, name: str, layout, producer, consumer) -> fifo.SyncFIFOBuffered:
    """A FIFO of ``layout`` between two streams (``hwgen.timing.QUEUE_LATENCY`` cycles from
    a write to its entry showing on the read side)."""
    q = fifo.SyncFIFOBuffered(width=layout.size, depth=QUEUE_DEPTH)
    m.submodules[name] = q
    m.d.comb += [
        q.w_data.eq(producer.payload.as_value()), q.w_en.eq(producer.valid),
        producer.ready.eq(q.w_rdy),
        consumer.payload.eq(data.View(layout, q.r_data)), consumer.valid.eq(q.r_rdy),
        q.r_en.eq(consumer.ready),
    ]
    return q


class Accelerator(wiring.Component):
    """A microcoded, output-stationary GEMM accelerator with a fused epilogue.

    Ports: ``bus``, the host's Wishbone bus, and ``irq`` (:class:`HostInterface`,
    :mod:`hwgen.regmap`): the only way to write the program, start it, see it done (it
    halted and every unit is idle) and read the counters; ``mem``, the external memory
    (:func:`hwgen.gateware.ports.mem_port_signature`).
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        self.host = HostInterface(config)
        super().__init__({
            "bus": In(wishbone_signature(bus_addr_bits(config.imem_depth))),
            "irq": Out(1),
            "mem": Out(mem_port_signature(config)),
        })

    @property
    def config(self) -> VariantConfig:
        return self._config

    def elaborate(self, platform):
        m = Module()
        c = self._config
        m.submodules.host = host = self.host
        m.submodules.seq = seq = Sequencer(c)
        m.submodules.dma = dma = LoadEngine(c)
        m.submodules.compute = cu = ComputeUnit(c)
        m.submodules.counters = counters = PerfCounters(c)

        load_q = _queue(m, "load_queue", load_cmd_layout(c), seq.load, dma.cmd)
        job_q = _queue(m, "job_queue", job_layout(c), seq.job, cu.job)

        # Scratchpads with synchronous reads, as block RAM has: A and B read by the feeder,
        # E by the passes and the epilogue stages (a read port each: the RAM is duplicated
        # per read, as an FPGA does).
        m.submodules.spad_a = spad_a = memory.Memory(
            shape=c.a_row_bytes * 8, depth=c.spad_a_depth, init=[])
        m.submodules.spad_b = spad_b = memory.Memory(
            shape=c.b_row_bytes * 8, depth=c.spad_b_depth, init=[])
        m.submodules.spad_e = spad_e = memory.Memory(
            shape=lanes_layout(c), depth=c.spad_e_depth, init=[])
        # A is written a byte lane at a time: a LOADW with keep leaves the lanes outside its mask.
        for spad, name in ((spad_a, "a"), (spad_b, "b")):
            wp = spad.write_port(granularity=8) if name == "a" else spad.write_port()
            rp = spad.read_port(transparent_for=())
            en = getattr(dma, f"{name}_en")
            m.d.comb += [
                wp.addr.eq(getattr(dma, f"{name}_addr")), wp.data.eq(getattr(dma, f"{name}_data")),
                wp.en.eq(Mux(en, dma.a_lanes, 0) if name == "a" else en),
                rp.addr.eq(getattr(cu, f"{name}_addr")), getattr(cu, f"{name}_data").eq(rp.data),
            ]
        wp = spad_e.write_port()
        m.d.comb += [wp.addr.eq(dma.e_addr), wp.data.eq(dma.e_data), wp.en.eq(dma.e_en)]
        # One read port for a pass's source row and one per stage read. Not transparent to the
        # DMA's write: a read of a row in the cycle it is written gives the old row. No
        # program does it (a row is read after the WAIT on its LOAD, and a LOAD into rows
        # still being read waits for them), and a transparent port is a block RAM plus an
        # address comparator and a bypass multiplexer a row wide, which yosys builds in
        # distributed RAM instead: 14.4k LUT for a 2x2 variant that needs 8.4k without.
        reads = [(cu.src_addr, 1, cu.src_data)] + [
            (getattr(cu.e, name).addr, getattr(cu.e, name).en, getattr(cu.e, name).data)
            for name in e_reads_signature(c).members]
        for addr, en, value in reads:
            rp = spad_e.read_port(transparent_for=())
            m.d.comb += [rp.addr.eq(addr), rp.en.eq(en), value.eq(rp.data)]

        wiring.connect(m, wiring.flipped(self.bus), host.bus)
        wiring.connect(m, host.imem, seq.imem)
        m.d.comb += self.irq.eq(host.irq)
        wiring.connect(m, seq.csr, cu.csr)  # the epilogue's control registers
        if c.window_unit:
            # The window unit reads three A rows a cycle (an FPGA replicates the block RAM
            # for them) and its nine taps' weights: only their low bytes, from a block RAM of
            # their own that every write of the epilogue scratchpad writes too (replicated
            # for the nine reads: a 64-bit row is two DP16KD, where a copy of the 256-bit
            # epilogue scratchpad would be eight).
            m.d.comb += cu.geom.eq(seq.geom)
            for n in range(len(cu.wa_addr)):
                rp = spad_a.read_port(transparent_for=())
                m.d.comb += [rp.addr.eq(cu.wa_addr[n]), cu.wa_data[n].eq(rp.data),
                             rp.en.eq(cu.wa_en)]
            m.submodules.spad_taps = spad_taps = memory.Memory(
                shape=taps_layout(c), depth=c.spad_e_depth, init=[])
            tp = spad_taps.write_port()
            m.d.comb += [tp.addr.eq(dma.e_addr), tp.en.eq(dma.e_en),
                         tp.data.eq(Cat(dma.e_data[c.acc_bits * n:c.acc_bits * n + 8]
                                          for n in range(c.cols)))]
            for n in range(len(cu.ww_addr)):
                rp = spad_taps.read_port(transparent_for=())
                m.d.comb += [rp.addr.eq(cu.ww_addr[n]), rp.en.eq(cu.ww_en),
                             cu.ww_data[n].eq(rp.data)]

        # Memory port: reads belong to the DMA, writes to the store unit.
        wiring.connect(m, dma.rd_addr, wiring.flipped(self.mem.rd_addr))
        m.d.comb += [dma.rd_valid.eq(self.mem.rd_data.valid),
                     dma.rd_data.eq(self.mem.rd_data.payload)]
        wiring.connect(m, cu.wr, wiring.flipped(self.mem.wr))

        # `level`, not `r_rdy`: a buffered FIFO shows a new entry on its read side a cycle
        # after the write, and a WAIT right behind a LOAD must not see an empty queue then.
        dma_idle = ~dma.busy & (load_q.level == 0)
        feed_idle = cu.feed_idle & (job_q.level == 0)
        compute_idle = cu.idle & (job_q.level == 0)
        done = Signal()
        running = Signal()  # from the start until done: what the counters count
        m.d.comb += [
            seq.start.eq(host.start),
            seq.dma_idle.eq(dma_idle), seq.feed_idle.eq(feed_idle),
            seq.compute_idle.eq(compute_idle),
            seq.z_valid.eq(dma.z_valid), seq.z_flag.eq(dma.z_flag),
            # what a counted WAIT compares with its `left`: commands queued or unfinished
            seq.loads_left.eq(load_q.level + dma.unfinished),
            seq.jobs_left.eq(job_q.level + cu.feeding),
            # and the memory system: a halted program's stores are in memory
            done.eq(seq.halted & dma_idle & compute_idle & self.mem.idle),
            host.done.eq(done),
            running.eq((seq.running | seq.halted) & ~done),
            host.running.eq(running),
        ]

        # Read latency: each accepted request's time stamp waits in a FIFO (reads return in
        # order) until its data arrives. 16 bits of time: a read takes far fewer cycles.
        stamp_bits = len(counters.events.read_latency_sum)
        now = Signal(stamp_bits)
        m.d.sync += now.eq(now + 1)
        m.submodules.read_stamps = stamps = fifo.SyncFIFO(width=stamp_bits,
                                                          depth=c.read_credits)
        rd = self.mem.rd_addr
        latency = Signal(stamp_bits)
        m.d.comb += [stamps.w_en.eq(rd.valid & rd.ready), stamps.w_data.eq(now),
                     stamps.r_en.eq(self.mem.rd_data.valid),
                     latency.eq(Mux(self.mem.rd_data.valid, now - stamps.r_data, 0))]
        outstanding = stamps.level != 0

        ev = counters.events
        m.d.comb += [
            counters.running.eq(running),
            counters.clear.eq(host.start),
            ev.cycles.eq(1),
            ev.array_busy.eq(cu.issue),
            ev.stall_memory.eq(~cu.issue & dma.busy),
            ev.stall_epilogue.eq(cu.stall_epilogue),
            ev.bytes_read.eq(dma.read_beat),
            ev.bytes_written.eq(self.mem.wr.valid & self.mem.wr.ready),
            ev.instret.eq(seq.retire),
            ev.tiles_skipped.eq(seq.skip),
            ev.read_wait.eq(outstanding & ~self.mem.rd_data.valid),
            ev.mem_refused.eq((rd.valid & ~rd.ready) | (self.mem.wr.valid & ~self.mem.wr.ready)),
            ev.read_latency_sum.eq(latency),
            ev.read_latency_max.eq(latency),
            counters.max_valid.read_latency_max.eq(self.mem.rd_data.valid),
            ev.refresh_stall.eq(self.mem.refresh),
            ev.row_activates.eq(self.mem.activates),
        ]
        wiring.connect(m, counters.perf, host.counters)
        return m
