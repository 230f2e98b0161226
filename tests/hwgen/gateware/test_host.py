"""The host interface in amaranth.sim: a whole accelerator driven only through its bus."""

from pathlib import Path

from amaranth.sim import Simulator

from hwgen.config import VariantConfig
from hwgen.gateware.accelerator import Accelerator
from hwgen.gateware.host import build_id
from hwgen.isa import Instr, Op, encode
from hwgen.regmap import MAGIC, counter_word, csr, imem_base_word, regmap_markdown

DOC = Path(__file__).parents[3] / "docs" / "regmap.md"
CFG = VariantConfig(rows=2, cols=2, port_bytes=4, imem_depth=64)
NOP, HALT = encode(Instr(Op.NOP)), encode(Instr(Op.HALT))


def test_checked_in_register_map_is_generated_from_the_description():
    assert DOC.read_text() == regmap_markdown(), (
        "regenerate docs/regmap.md from hwgen.regmap.regmap_markdown()")


def test_a_host_loads_starts_waits_and_reads_counters_through_the_bus_alone():
    dut = Accelerator(CFG)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    bus = dut.bus
    seen = {}

    async def access(ctx, word, data=None):
        ctx.set(bus.adr, word)
        ctx.set(bus.we, data is not None)
        ctx.set(bus.dat_w, data or 0)
        ctx.set(bus.cyc, 1)
        ctx.set(bus.stb, 1)
        for _ in range(4):
            await ctx.tick()
            if ctx.get(bus.ack):
                value = ctx.get(bus.dat_r)
                ctx.set(bus.cyc, 0)
                ctx.set(bus.stb, 0)
                await ctx.tick()
                return value
        raise AssertionError(f"no ack for word {word}")

    async def load(ctx, program):
        base = imem_base_word(CFG.imem_depth)
        for i, w in enumerate(program):
            await access(ctx, base + 2 * i, w & 0xFFFF_FFFF)
            await access(ctx, base + 2 * i + 1, w >> 32)

    async def counter(ctx, name):
        low = await access(ctx, counter_word(name))
        return low | await access(ctx, counter_word(name) + 1) << 32

    async def run(ctx):
        await access(ctx, csr("CTRL").word, 1)
        for _ in range(200):
            if ctx.get(dut.irq):
                break
            await ctx.tick()
        assert ctx.get(dut.irq), "no interrupt after 200 cycles"
        return await counter(ctx, "instret"), await counter(ctx, "cycles")

    async def bench(ctx):
        ctx.set(dut.mem.idle, 1)  # the program touches no memory
        seen["id"] = await access(ctx, csr("ID").word)
        seen["build"] = await access(ctx, csr("BUILD").word)
        seen["depth"] = await access(ctx, csr("IMEM_DEPTH").word)
        seen["status0"] = await access(ctx, csr("STATUS").word)
        await load(ctx, [NOP, NOP, NOP, HALT])
        await access(ctx, csr("IRQ_ENABLE").word, 1)
        seen["first"] = await run(ctx)
        seen["status1"] = await access(ctx, csr("STATUS").word)
        await access(ctx, csr("IRQ_PENDING").word, 1)  # write 1 to clear
        seen["irq_cleared"] = ctx.get(dut.irq)
        # no reset in between: the counters start again from zero
        seen["again"] = await run(ctx)
        await access(ctx, csr("IRQ_PENDING").word, 1)
        await load(ctx, [HALT])  # the write port really writes
        seen["short"] = await run(ctx)

    sim.add_testbench(bench)
    sim.run()
    assert seen["id"] == MAGIC and seen["build"] == build_id(CFG)
    assert seen["depth"] == CFG.imem_depth
    assert seen["status0"] == 0
    assert seen["first"][0] == 4 and seen["first"][1] >= 4  # one instruction a cycle
    assert seen["status1"] == 1 << csr("STATUS").field("DONE").lo
    assert seen["irq_cleared"] == 0
    assert seen["again"] == seen["first"]
    assert seen["short"][0] == 1 and seen["short"][1] < seen["first"][1]
