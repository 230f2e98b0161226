"""The DRAM platforms on Verilator (sim/dram): the native port's measured figures against the
datasheet timings, and refresh as a rate. Builds are cached by platform key."""

import math

import pytest

from hwgen.platform import PlatformConfig
from sim.dram import build as dram_build
from sim.dram.build import build
from sim.dram.characterize import characterize, run_pattern

pytestmark = pytest.mark.slow

READS = 20_000
NS = 10.0  # one cycle at 100 MHz


# Both with LiteDRAM's DFI timing checker: every pattern must run without a violation.
@pytest.fixture(scope="module")
def ddr3():
    return characterize(PlatformConfig(memory="ddr3"), reads=READS, conflict_reads=3_000,
                        checker=True)


@pytest.fixture(scope="module")
def ddr3_hot():
    return characterize(PlatformConfig(memory="ddr3", refresh="hot"), reads=READS,
                        conflict_reads=3_000, checker=True)


def test_the_controller_keeps_the_ddr3_timings(ddr3, ddr3_hot):
    for figures in (ddr3, ddr3_hot):
        assert figures.checker and figures.violations == ()


def test_ddr3_row_conflicts_cost_measurably_more_than_sequential_reads(ddr3):
    seq, conflict = ddr3.sequential, ddr3.row_conflict
    # Sequential: at most one 128-bit word a cycle (BL8 on a x16 part at 1:4), and close to it.
    assert 1.0 <= seq.cycles_per_access < 1.2
    # A read to another row of the same bank waits at least tRC = tRAS + tRP (MT41K128M16
    # datasheet, DDR3-800: 37.5 + 13.1 ns) after the previous activate.
    assert conflict.cycles_per_access >= math.ceil((37.5 + 13.1) / NS)
    assert conflict.cycles_per_access > 4 * seq.cycles_per_access
    assert conflict.latency_mean > 2 * seq.latency_mean
    # What the adapter must buffer: LiteDRAM's command buffers bound the reads in flight (a
    # read-data buffer this deep keeps the sequential pace) and the write data waiting.
    assert 8 <= seq.reads_max <= 32 and 4 <= ddr3.write_check.wdata_max <= 16


def test_ddr3_refreshes_at_the_datasheet_interval_and_hot_doubles_the_rate(ddr3, ddr3_hot):
    # 8192 refreshes every 64 ms: tREFI = 7.8125 us = 781.25 cycles; hot halves it.
    assert ddr3.refresh_interval == pytest.approx(64e6 / 8192 / NS, rel=0.02)
    assert ddr3_hot.refresh_interval == pytest.approx(64e6 / 8192 / 2 / NS, rel=0.02)
    # Each refresh holds the controller at least tRFC (160 ns for a 2 Gb part).
    assert ddr3.refresh_hold_cycles >= 160 / NS
    assert ddr3_hot.refresh_fraction == pytest.approx(2 * ddr3.refresh_fraction, rel=0.15)


def test_hot_refresh_lowers_sequential_throughput(ddr3, ddr3_hot):
    normal, hot = ddr3.sequential, ddr3_hot.sequential
    assert hot.accesses == normal.accesses
    # The extra refreshes cost cycles: at least half the extra refresh-held cycles.
    extra_hold = hot.refresh_cycles - normal.refresh_cycles
    assert hot.cycles - normal.cycles >= extra_hold / 2 > 0


def test_ddr3_and_sdr_store_what_was_written(ddr3):
    sdr = characterize(PlatformConfig(memory="sdr"), reads=5_000, conflict_reads=1_000)
    for figures in (ddr3, sdr):
        assert figures.write_check.accesses == figures.read_back.accesses
        assert figures.read_back.errors == 0
        # On one native port a read issued right after a write to the same word sees it.
        raw = figures.read_after_write
        assert raw.errors == 0 and raw.accesses > 0 and raw.latency_mean > 0
    # SDR: a 16-bit word a cycle at best; a row conflict costs at least tRP + tRCD (20 + 20
    # ns, IS42S16160).
    assert 1.0 <= sdr.sequential.cycles_per_access < 1.2
    assert sdr.row_conflict.cycles_per_access >= (20 + 20) / NS


def test_the_read_back_check_can_fail():
    # Write words 0..N-1, read words 1..N: only word N was never written.
    b = build(PlatformConfig(memory="sdr"))
    counts, _ = run_pattern(b, "write", 500, 1, base=0, read_base=1)
    assert counts["read"]["errors"] == 1


def test_the_build_is_found_on_disk_and_a_damaged_one_is_rebuilt(tmp_path):
    platform = PlatformConfig(memory="sdr")
    first = build(platform, root=tmp_path)
    assert not first.cached and first.spec["key"] == platform.key()
    assert build(platform, root=tmp_path) is first  # once per process per platform
    dram_build._build_cached.cache_clear()  # as another process would
    again = build(platform, root=tmp_path)
    assert again.cached and again.directory == first.directory
    with open(again.executable, "r+b") as binary:  # a bit flipped in the simulator
        binary.seek(100)
        byte = binary.read(1)
        binary.seek(100)
        binary.write(bytes([byte[0] ^ 1]))
    dram_build._build_cached.cache_clear()
    healed = build(platform, root=tmp_path)
    assert not healed.cached and healed.directory == first.directory
    counts, _ = run_pattern(healed, "write", 100, 1)
    assert counts["read"]["errors"] == 0
