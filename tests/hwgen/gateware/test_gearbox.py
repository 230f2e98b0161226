"""The DMA's width converters in amaranth.sim: bytes come out in order, at the promised rate."""

import pytest
from amaranth.sim import Simulator

from hwgen.gateware.dma import Gearbox


@pytest.mark.parametrize(("word", "row"), [(8, 2), (8, 8), (4, 16), (2, 8), (16, 4)])
def test_gearbox_preserves_the_byte_stream(word, row):
    dut = Gearbox(word, row)
    stream = bytes(range(1, 1 + word * 8))
    rows = []

    async def bench(ctx):
        words = [stream[i:i + word] for i in range(0, len(stream), word)]
        interval = dut.words_per_issue
        cycle = 0
        while len(rows) * row < len(stream) and cycle < 400:
            feed = cycle % interval == 0 and cycle // interval < len(words)
            ctx.set(dut.i_valid, feed)
            if feed:
                ctx.set(dut.i_data, int.from_bytes(words[cycle // interval], "little"))
            await ctx.tick()
            if ctx.get(dut.o_valid):
                rows.append(ctx.get(dut.o_data).to_bytes(row, "little"))
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert b"".join(rows) == stream
