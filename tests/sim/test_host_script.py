"""The simulated host's scripts (:mod:`sim.tb.host_script`): a program goes in over the bus,
only the halves that differ from what the host wrote before."""

from hwgen.perf import COUNTERS
from hwgen.regmap import counter_word, csr, imem_base_word
from sim.tb.host_script import Cmd, counters_from_reads, job_script

DEPTH = 64
BASE = imem_base_word(DEPTH)


def _writes(script: str) -> list[tuple[int, int]]:
    out = []
    for line in script.split():
        cmd, word, data = int(line[0], 16), int(line[1:9], 16), int(line[9:], 16)
        if cmd == Cmd.WRITE and word >= BASE:
            out.append((word - BASE, data))
    return out


def test_a_program_is_written_whole_then_only_where_it_changes():
    first = [0x1111_2222_3333_4444, 0x5555_6666_7777_8888, 7]
    script, imem = job_script(first, [], DEPTH, 1000)
    assert _writes(script) == [(0, 0x3333_4444), (1, 0x1111_2222), (2, 0x7777_8888),
                               (3, 0x5555_6666), (4, 7), (5, 0)]
    assert imem == first
    # the same program again (a kernel's directed input sets): nothing to write
    script, imem = job_script(first, imem, DEPTH, 1000)
    assert _writes(script) == [] and imem == first
    # a shorter one: the changed half, and the old program's tail zeroed
    script, imem = job_script([0x1111_2222_0000_0000], imem, DEPTH, 1000)
    assert _writes(script) == [(0, 0), (2, 0), (3, 0), (4, 0)]
    assert imem == [0x1111_2222_0000_0000, 0, 0]


def test_the_script_starts_waits_and_reads_every_counter():
    script, _ = job_script([5], [], DEPTH, 1 << 40)
    lines = script.split()
    commands = [(int(x[0], 16), int(x[1:9], 16), int(x[9:], 16)) for x in lines]
    start = commands.index((Cmd.WRITE, csr("CTRL").word, 1))
    assert commands[start + 1] == (Cmd.WAIT_IRQ, 1 << 8, 0)  # the limit, 64 bits
    reads = [w for c, w, _ in commands[start + 2:] if c == Cmd.READ]
    assert reads == [w for n in COUNTERS for w in (counter_word(n), counter_word(n) + 1)]
    assert commands[-1][0] == Cmd.END
    words = [i for n in range(len(COUNTERS)) for i in (n, 1)]
    assert counters_from_reads(words)[COUNTERS[2]] == 2 | 1 << 32
