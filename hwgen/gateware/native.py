"""The accelerator's memory port on a LiteDRAM native port: the board's memory adapter.

A DRAM platform (:class:`hwgen.platform.PlatformConfig`) puts a LiteDRAM controller behind
the accelerator (:mod:`sim.dram.generate` makes its Verilog, module ``hwgen_dram``). Its
native port differs from the accelerator's memory port (:mod:`hwgen.gateware.ports`) in two
ways that this adapter bridges, in one clock domain:

- **One command stream.** Reads and writes share the port's ``cmd`` stream. When both want
  it in the same cycle the write goes first: a store's words then leave as the epilogue
  makes them, while the load engine, which runs ahead of the array (double buffering),
  loses a cycle it can spare. Reads first starved the stores during long load streams, and
  the drain held the array (measured on DDR3: GEMM 256^3 at 0.797 of the array's peak reads
  first, 0.989 writes first; ``docs/memory.md``). One LiteDRAM port completes its commands
  in issue order (``docs/memory.md``), so a read issued after a write to the same word
  returns the new data: a kernel's loads see the previous kernel's stores. (A read and a
  write of one word in the same cycle, which the ideal memory answers with the old word,
  get the new one here; a program never does that: it loads what a job stored only after
  the job is done, a duty ``tests/helpers/kernel_trace.py`` checks every template for.)
- **Write data comes later.** The controller takes a write's data some cycles after it
  accepted the command, and writes whatever is on ``wdata`` then. The data goes into a FIFO
  in the cycle the command is accepted; ``wdata`` is its head.

Read data needs no adapting: it comes back in order, valid-only, whenever the controller
delivers it; the load engine's credits (:attr:`hwgen.config.VariantConfig.read_credits`)
keep it from requesting more than it can hold.

``idle`` (to the accelerator's ``mem.idle``, which ``done`` waits for) is high when no write
data waits, no read is outstanding, and :data:`SETTLE_CYCLES` have passed since the
controller took the last write data: then every store is in the DRAM, and a testbench can
read the memory after ``done``.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from hwgen.config import VariantConfig
from hwgen.gateware.ports import ACTIVATE_BITS, mem_port_signature

#: The adapter's Verilog module name.
ADAPTER_MODULE = "hwgen_mem_adapter"

#: Write data the adapter can hold for commands the controller accepted. LiteDRAM holds at
#: most 10 (DDR3) or 9 (SDR) writes' data pending (measured, ``docs/memory.md``); a full FIFO
#: only delays the next write.
WRITE_FIFO_DEPTH = 16

#: Cycles ``idle`` waits after the controller took the last write data, so that the data is
#: in the DRAM model's memory when a testbench reads it there after ``done`` (the write path
#: and the PHY's write latency, 1 cycle on the DDR3 model). A margin: without it the data was
#: already there in every run (a mutation removing it survived the campaign, so it is not
#: one of the campaign's faults). Only the end of a program pays it, once.
SETTLE_CYCLES = 16


class NativePortAdapter(wiring.Component):
    """Join the accelerator's ``mem`` port to one LiteDRAM native port.

    Parameters
    ----------
    config : VariantConfig
        The variant; its ``port_bits`` is the native port's data width and its
        ``mem_addr_bits`` must fit the port's address width.
    addr_bits : int
        The native port's address width (``dram.json``'s ``address_width``).

    Ports: ``mem`` (the accelerator's memory port, seen from the memory side), the native
    port's ``cmd_*``, ``wdata_*`` and ``rdata_*`` signals, and ``refresh_in`` /
    ``activates_in`` from the memory, passed on to ``mem`` for the counters.
    """

    def __init__(self, config: VariantConfig, addr_bits: int):
        if config.mem_addr_bits > addr_bits:
            raise ValueError(
                f"the variant's {config.mem_addr_bits}-bit word address does not fit the "
                f"DRAM's {addr_bits}-bit port address; use --mem-addr-bits {addr_bits} or less")
        self._config = config
        bits = config.port_bits
        super().__init__({
            "mem": In(mem_port_signature(config)),
            "cmd_valid": Out(1), "cmd_ready": In(1), "cmd_we": Out(1), "cmd_last": Out(1),
            "cmd_addr": Out(addr_bits),
            "wdata_valid": Out(1), "wdata_ready": In(1), "wdata_data": Out(bits),
            "wdata_we": Out(bits // 8),
            "rdata_valid": In(1), "rdata_ready": Out(1), "rdata_data": In(bits),
            "refresh_in": In(1), "activates_in": In(ACTIVATE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._config
        rd, wr = self.mem.rd_addr, self.mem.wr
        m.submodules.write_data = wfifo = fifo.SyncFIFO(width=c.port_bits,
                                                       depth=WRITE_FIFO_DEPTH)
        m.d.comb += [
            # writes first (module docstring); a write needs room for its data
            self.cmd_valid.eq(rd.valid | (wr.valid & wfifo.w_rdy)),
            self.cmd_we.eq(wr.valid & wfifo.w_rdy),
            self.cmd_addr.eq(Mux(wr.valid & wfifo.w_rdy, wr.payload.addr, rd.payload)),
            self.cmd_last.eq(1),  # every command is whole: no width converter merges them
            rd.ready.eq(self.cmd_ready & ~(wr.valid & wfifo.w_rdy)),
            wr.ready.eq(self.cmd_ready & wfifo.w_rdy),
            wfifo.w_en.eq(wr.valid & wr.ready),
            wfifo.w_data.eq(wr.payload.data),
            self.wdata_valid.eq(wfifo.r_rdy),
            self.wdata_data.eq(wfifo.r_data),
            self.wdata_we.eq(~0),
            wfifo.r_en.eq(self.wdata_ready),
            self.rdata_ready.eq(1),  # LiteDRAM ignores it; the load engine never refuses
            self.mem.rd_data.valid.eq(self.rdata_valid),
            self.mem.rd_data.payload.eq(self.rdata_data),
            self.mem.refresh.eq(self.refresh_in),
            self.mem.activates.eq(self.activates_in),
        ]

        # Reads accepted and not yet answered; cycles since write data was last taken.
        outstanding = Signal(range(c.read_credits + 2))
        accepted = rd.valid & rd.ready
        with m.If(accepted & ~self.rdata_valid):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(~accepted & self.rdata_valid):
            m.d.sync += outstanding.eq(outstanding - 1)
        settle = Signal(range(SETTLE_CYCLES + 1), init=SETTLE_CYCLES)
        with m.If(self.wdata_valid & self.wdata_ready):
            m.d.sync += settle.eq(0)
        with m.Elif(settle != SETTLE_CYCLES):
            m.d.sync += settle.eq(settle + 1)
        m.d.comb += self.mem.idle.eq(~wfifo.r_rdy & (outstanding == 0)
                                     & (settle == SETTLE_CYCLES) & ~wr.valid)
        return m


def adapter_verilog(config: VariantConfig, addr_bits: int) -> str:
    """The Verilog of module ``hwgen_mem_adapter`` for ``config`` on a port of ``addr_bits``."""
    from amaranth.back import verilog

    return verilog.convert(NativePortAdapter(config, addr_bits), name=ADAPTER_MODULE,
                           emit_src=False)
