"""Both harnesses (the C++ driver and the cocotb testbench) and the run API end to end, on the
copy engine (tests/sim/copy_engine.py): a stand-in with the accelerator's ports, so these tests
do not depend on the real gateware. Every test runs on each harness.

Copy engine timing, per the fixture: FETCH and DECODE take a cycle each per instruction, and
each copied word takes ``port_latency + 2`` cycles, so ``[copy n, halt]`` runs in exactly
``n * (latency + 2) + 5`` cycles: a check that the memory model's latency is exact.
"""

import numpy as np
import pytest

from hwgen.config import VariantConfig
from hwgen.perf import COUNTERS
from sim.run import POISON, Job, MemoryImage, SimTimeout, run_program, run_programs
from tests.helpers.copy_engine import HALT, build_copy_engine, copy, jump

pytestmark = pytest.mark.slow

CFG = VariantConfig(port_bytes=8, port_latency=4, mem_addr_bits=14, imem_depth=64)
#: 128-bit words (wider than a VPI integer) and the shortest latency.
WIDE = VariantConfig(port_bytes=16, port_latency=1, mem_addr_bits=12, imem_depth=16)


@pytest.fixture(scope="module", params=["cxx", "cocotb"])
def harness(request):
    return request.param


@pytest.fixture(scope="module")
def engine(harness):
    build = build_copy_engine(CFG, harness=harness)
    assert build.harness == harness
    return build


def plus_one(data: bytes, port_bytes: int) -> np.ndarray:
    """What the copy engine writes: each little-endian word + 1, wrapping."""
    out = b"".join(
        ((int.from_bytes(data[i:i + port_bytes], "little") + 1) % (1 << 8 * port_bytes))
        .to_bytes(port_bytes, "little")
        for i in range(0, len(data), port_bytes)
    )
    return np.frombuffer(out, np.uint8)


def copy_cycles(words: int, config: VariantConfig) -> int:
    return words * (config.port_latency + 2) + 5


def test_a_copy_reads_writes_and_counts(engine):
    data = np.random.default_rng(1).integers(0, 256, 64, np.uint8).tobytes()
    memory = MemoryImage(writes=((100, data),), reads={"out": (200, 64)})
    result = run_program(CFG, [copy(100, 200, 8), HALT], memory, build=engine)
    np.testing.assert_array_equal(result.outputs["out"], plus_one(data, 8))
    assert result.outputs["out"].dtype == np.uint8
    assert set(result.counters) == set(COUNTERS)
    assert result.counters["bytes_read"] == result.counters["bytes_written"] == 64
    assert result.counters["instret"] == 2
    assert result.cycles == copy_cycles(8, CFG)
    assert 0 < result.wall_seconds < 5


def test_wide_words_and_a_one_cycle_latency(harness):
    engine = build_copy_engine(WIDE, harness=harness)
    # Word 0 carries out of its low 64 bits, word 1 wraps around 128 bits.
    data = bytes([0xFF] * 8 + [0] * 8) + bytes([0xFF] * 16) + bytes(range(16))
    memory = MemoryImage(writes=((10, data),), reads={"out": (20, 48)})
    result = run_program(WIDE, [copy(10, 20, 3), HALT], memory, build=engine)
    np.testing.assert_array_equal(result.outputs["out"], plus_one(data, 16))
    assert result.outputs["out"][8] == 1 and not result.outputs["out"][16:32].any()
    assert result.cycles == copy_cycles(3, WIDE)


def test_memory_the_hardware_never_writes_reads_back_as_poison(engine):
    data = bytes(range(16))
    memory = MemoryImage(
        writes=((100, data), (300, bytes(range(50, 66)))),
        reads={"half": (200, 32), "never": (250, 16), "in_place": (300, 16)},
    )
    result = run_program(CFG, [copy(100, 200, 2), HALT], memory, build=engine)
    half = result.outputs["half"]
    np.testing.assert_array_equal(half[:16], plus_one(data, 8))
    assert (half[16:] == POISON).all()
    assert (result.outputs["never"] == POISON).all()
    # A region both written and read: the write lands after the poison.
    assert bytes(result.outputs["in_place"]) == bytes(range(50, 66))


def test_a_hung_program_times_out_naming_program_and_cycles(engine):
    with pytest.raises(SimTimeout, match=r"program 'spin' did not finish: done was still low "
                                         r"after \d+ cycles \(limit 1000\)") as info:
        run_program(CFG, [jump(0)], MemoryImage(), name="spin", timeout_cycles=1000,
                    build=engine)
    # the host gives up after 1000 cycles and then reads the counter over the bus: the
    # three cycles of that read, and no more, come on top
    assert 1000 <= info.value.cycles <= 1004 and info.value.limit == 1000


def test_jobs_of_one_launch_are_reset_and_cleaned_between_them(engine):
    data = bytes(range(1, 65))
    first = Job([copy(100, 200, 8), copy(200, 300, 8), HALT],
                MemoryImage(writes=((100, data),), reads={"out": (300, 64)}), name="first")
    # No HALT: the word after the copy must be zero (HALT), not the first job's second copy.
    # Words 100.. were written by the first job only: they must read as zero now.
    second = Job([copy(100, 400, 4)], MemoryImage(reads={"out": (400, 32)}), name="second")
    results = run_programs(CFG, [first, second, first], build=engine)
    a, b, again = results
    np.testing.assert_array_equal(a.outputs["out"], plus_one(bytes(plus_one(data, 8)), 8))
    np.testing.assert_array_equal(b.outputs["out"], plus_one(bytes(32), 8))
    assert b.counters["instret"] == 2 and b.counters["bytes_read"] == 32
    assert b.cycles == copy_cycles(4, CFG)
    np.testing.assert_array_equal(again.outputs["out"], a.outputs["out"])
    assert again.counters == a.counters


def test_a_hung_job_does_not_spoil_the_next(engine):
    hung = Job([jump(0)], MemoryImage(), name="hung", timeout_cycles=500)
    good = Job([copy(0, 8, 1), HALT], MemoryImage(writes=((0, bytes(8)),), reads={"o": (8, 8)}))
    with pytest.raises(SimTimeout, match="'hung'") as info:
        run_programs(CFG, [hung, good], build=engine)
    results = info.value.results
    assert len(results) == 2
    assert results[1].outputs["o"].tolist() == [1, 0, 0, 0, 0, 0, 0, 0]
    assert results[1].cycles == copy_cycles(1, CFG)


def test_the_driver_refuses_a_job_list_it_cannot_read(tmp_path, monkeypatch):
    from sim import cxx_driver
    from sim.launch import SimError

    build = build_copy_engine(CFG, harness="cxx")
    (tmp_path / cxx_driver.JOBS_TXT).write_text("hwgen-jobs 1\njob 0 1\n")
    assert cxx_driver.run(build.executable, tmp_path, tmp_path / "log") == 2
    assert "malformed job line" in (tmp_path / "log").read_text()

    # through run_programs: one SimError naming the log, and no rebuild (the build is sound)
    def damaged(folder, header, specs):
        (folder / cxx_driver.JOBS_TXT).write_text("hwgen-jobs 2\n")

    monkeypatch.setattr(cxx_driver, "write_inputs", damaged)
    with pytest.raises(SimError, match="refused its inputs(.|\n)*not a job list of format 1"):
        run_program(CFG, [HALT], MemoryImage(), build=build)
