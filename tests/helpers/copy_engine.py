"""A tiny memory-copy engine with the accelerator's ports: a test fixture for the harness.

It is not the accelerator. It has exactly the Verilog interface of ``hwgen_accel`` (``clk``,
``rst``, the host's ``bus__*`` and ``irq`` through the accelerator's own
:class:`~hwgen.gateware.host.HostInterface`, and the ``mem__*`` port), so the simulation
build, the testbench and the run API can be proved without the real gateware.

Program words (64 bits)::

    63  60 59      48 47           24 23            0
    | op  |  count   |      dst      |      src      |

``op`` 0 halts, 1 copies ``count`` words from ``src`` to ``dst`` adding 1 to each word (as a
little-endian integer, wrapping), 2 jumps to instruction ``src`` (a program that never halts).
"""

from __future__ import annotations

from pathlib import Path

from amaranth import Module, Signal
from amaranth.back import verilog
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

import hwgen
from hwgen.config import VariantConfig
from hwgen.gateware.host import HostInterface
from hwgen.gateware.ports import (
    counters_signature,
    imem_write_signature,
    mem_port_signature,
    wishbone_signature,
)
from hwgen.regmap import bus_addr_bits

OP_HALT, OP_COPY, OP_JUMP = 0, 1, 2


def copy(src: int, dst: int, count: int) -> int:
    """Encode a COPY instruction."""
    return OP_COPY << 60 | count << 48 | dst << 24 | src


def jump(target: int) -> int:
    """Encode a JUMP instruction."""
    return OP_JUMP << 60 | target


HALT = OP_HALT << 60


class _CopySequencer(wiring.Component):
    def __init__(self, config: VariantConfig):
        self._config = config
        super().__init__({
            "start": In(1),
            "done": Out(1),
            "running": Out(1),
            "imem": In(imem_write_signature(config)),
            "mem": Out(mem_port_signature(config)),
            "perf": Out(counters_signature()),
        })

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        m.submodules.imem = imem = memory.Memory(shape=64, depth=cfg.imem_depth, init=[])
        wp = imem.write_port(granularity=32)
        m.d.comb += [wp.addr.eq(self.imem.addr), wp.data.eq(self.imem.data),
                     wp.en.eq(self.imem.en)]
        rd = imem.read_port()

        pc = Signal(range(cfg.imem_depth))
        src = Signal(cfg.mem_addr_bits)
        dst = Signal(cfg.mem_addr_bits)
        left = Signal(12)
        data = Signal(cfg.port_bits)
        running = Signal()
        m.d.comb += [rd.addr.eq(pc), self.running.eq(running)]

        with m.If(running):
            m.d.sync += self.perf.cycles.eq(self.perf.cycles + 1)
        with m.If(self.mem.rd_data.valid):
            m.d.sync += self.perf.bytes_read.eq(self.perf.bytes_read + cfg.port_bytes)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [pc.eq(0), running.eq(1)]
                    m.next = "FETCH"
            with m.State("FETCH"):  # the read port is synchronous: data in DECODE
                m.next = "DECODE"
            with m.State("DECODE"):
                word = rd.data
                m.d.sync += [
                    self.perf.instret.eq(self.perf.instret + 1),
                    pc.eq(pc + 1),
                    src.eq(word[0:24]),
                    dst.eq(word[24:48]),
                    left.eq(word[48:60]),
                ]
                with m.Switch(word[60:64]):
                    with m.Case(OP_COPY):
                        m.next = "COPY"
                    with m.Case(OP_JUMP):
                        m.d.sync += pc.eq(word[0:16])
                        m.next = "FETCH"
                    with m.Default():
                        m.d.sync += running.eq(0)
                        m.next = "DONE"
            with m.State("COPY"):
                with m.If(left == 0):
                    m.next = "FETCH"
                with m.Else():
                    m.d.comb += [self.mem.rd_addr.valid.eq(1), self.mem.rd_addr.payload.eq(src)]
                    with m.If(self.mem.rd_addr.ready):
                        m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(self.mem.rd_data.valid):
                    m.d.sync += data.eq(self.mem.rd_data.payload + 1)
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [
                    self.mem.wr.valid.eq(1),
                    self.mem.wr.payload.addr.eq(dst),
                    self.mem.wr.payload.data.eq(data),
                ]
                with m.If(self.mem.wr.ready):
                    m.d.sync += [
                        src.eq(src + 1),
                        dst.eq(dst + 1),
                        left.eq(left - 1),
                        self.perf.bytes_written.eq(self.perf.bytes_written + cfg.port_bytes),
                    ]
                    m.next = "COPY"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
        return m


class CopyEngine(wiring.Component):
    """The stand-in top: the same ports as ``hwgen_accel``, the engine in submodule ``seq``."""

    def __init__(self, config: VariantConfig):
        self._config = config
        super().__init__({
            "bus": In(wishbone_signature(bus_addr_bits(config.imem_depth))),
            "irq": Out(1),
            "mem": Out(mem_port_signature(config)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.host = host = HostInterface(self._config)
        m.submodules.seq = seq = _CopySequencer(self._config)
        wiring.connect(m, wiring.flipped(self.bus), host.bus)
        wiring.connect(m, wiring.flipped(self.mem), seq.mem)
        wiring.connect(m, host.imem, seq.imem)
        wiring.connect(m, seq.perf, host.counters)
        m.d.comb += [seq.start.eq(host.start), host.done.eq(seq.done),
                     host.running.eq(seq.running), self.irq.eq(host.irq)]
        return m


def copy_engine_verilog(config: VariantConfig) -> str:
    """Verilog of the copy engine as module ``hwgen_accel`` (the build's injectable source)."""
    return verilog.convert(CopyEngine(config), name="hwgen_accel", emit_src=False)


#: The files the copy engine's Verilog depends on: the gateware's own edits do not rebuild it.
SOURCES = (
    Path(__file__),
    Path(hwgen.__file__).parent / "config.py",
    Path(hwgen.__file__).parent / "gateware" / "ports.py",
    Path(hwgen.__file__).parent / "gateware" / "host.py",
    Path(hwgen.__file__).parent / "regmap.py",
    Path(hwgen.__file__).parent / "perf.py",
)


def build_copy_engine(config: VariantConfig, root: Path | None = None,
                      harness: str | None = None):
    """Build (or find) the simulation of the copy engine for ``config``, for ``harness``
    (the C++ driver by default)."""
    from sim.build import build_variant

    return build_variant(config, verilog=copy_engine_verilog, sources=SOURCES, root=root,
                         harness=harness)


def copies_correctly(build, config: VariantConfig) -> bool:
    """Does ``build`` (of the copy engine for ``config``) copy 4 words adding 1 to each?"""
    import numpy as np

    from sim.run import MemoryImage, run_program

    data = bytes(range(32))
    memory = MemoryImage(writes=((0, data),), reads={"out": (16, 32)})
    out = run_program(config, [copy(0, 16, 4), HALT], memory, build=build).outputs["out"]
    want = [(int.from_bytes(data[i:i + 8], "little") + 1).to_bytes(8, "little")
            for i in range(0, 32, 8)]
    return np.array_equal(out, np.frombuffer(b"".join(want), np.uint8))
