"""run_program refuses what cannot fit the variant, before any build or simulation."""

from pathlib import Path

import numpy as np
import pytest

from hwgen.config import VariantConfig
from sim.build import BuildInfo
from sim.run import (
    Job,
    MemoryImage,
    SimError,
    _uncovered,
    default_timeout_cycles,
    run_program,
    run_programs,
)

CONFIG = VariantConfig(port_bytes=8, mem_addr_bits=10, imem_depth=16)
#: A build that does not exist: if validation let a job through, the launch would fail with
#: SimError rather than ValueError, and quickly.
NOWHERE = BuildInfo(CONFIG, Path("/nonexistent/hwgen-build"), "0" * 16, True, 0.0, 0.0, "5.048")
HALT = 1 << 58


def run(program=(HALT,), memory=None, **kwargs):
    return run_program(CONFIG, list(program), memory or MemoryImage(), build=NOWHERE, **kwargs)


def test_a_program_longer_than_the_instruction_memory():
    with pytest.raises(ValueError, match=r"'long' has 17 words but the instruction memory "
                                         r"holds 16.*imem_depth"):
        run([0] * 17, name="long")


@pytest.mark.parametrize("word", [-1, 1 << 64, 1.5, True])
def test_a_word_that_is_not_64_bit_unsigned(word):
    with pytest.raises(ValueError, match=r"word 1 is .*not a 64-bit unsigned integer"):
        run([HALT, word])


def test_an_empty_program():
    with pytest.raises(ValueError, match="is empty; end it with HALT"):
        run([])


def test_a_write_that_is_not_whole_words():
    with pytest.raises(ValueError, match=r"write at word 3: 12 bytes is not a positive "
                                         r"multiple of the 8-byte memory word; pad it to 16"):
        run(memory=MemoryImage(writes=((3, bytes(12)),)))


def test_a_write_past_the_end_of_memory():
    with pytest.raises(ValueError, match=r"words 1020\.\.1027 fall outside the memory's 1024"):
        run(memory=MemoryImage(writes=((1020, bytes(64)),)))


def test_a_negative_address():
    with pytest.raises(ValueError, match=r"word -1: words -1\.\.-1 fall outside"):
        run(memory=MemoryImage(writes=((-1, bytes(8)),)))


def test_overlapping_writes():
    with pytest.raises(ValueError, match=r"overlap: the segment at word 0 runs to word 3, past "
                                         r"the start of the segment at word 2"):
        run(memory=MemoryImage(writes=((0, bytes(32)), (2, bytes(8)))))


def test_a_read_region_that_is_not_whole_words_or_outside_memory():
    with pytest.raises(ValueError, match=r"read region 'out': 4 bytes is not a positive"):
        run(memory=MemoryImage(reads={"out": (0, 4)}))
    with pytest.raises(ValueError, match=r"read region 'out': 0 bytes"):
        run(memory=MemoryImage(reads={"out": (0, 0)}))
    with pytest.raises(ValueError, match=r"read region 'big': words 0\.\.1024 fall outside"):
        run(memory=MemoryImage(reads={"big": (0, 8 * 1025)}))


def test_a_read_region_name_that_cannot_be_a_file_key():
    with pytest.raises(ValueError, match=r"read region name 'a/b' must be letters"):
        run(memory=MemoryImage(reads={"a/b": (0, 8)}))


def test_writes_must_be_bytes_or_uint8():
    with pytest.raises(ValueError, match=r"is a int32 array; pass bytes or a uint8 array"):
        MemoryImage(writes=((0, np.zeros(4, np.int32)),))
    with pytest.raises(ValueError, match=r"holds str, not bytes"):
        MemoryImage(writes=((0, "abcdefgh"),))
    image = MemoryImage(writes=[(0, bytearray(8)), (1, np.zeros(8, np.uint8))])
    assert image.writes == ((0, bytes(8)), (1, bytes(8)))


def test_a_timeout_that_is_not_a_positive_count():
    with pytest.raises(ValueError, match=r"timeout_cycles must be a positive integer, not 0"):
        run(timeout_cycles=0)


def test_a_build_of_another_variant():
    with pytest.raises(ValueError, match=r"the build is of variant .*, not of"):
        run_programs(VariantConfig(imem_depth=32), [Job([HALT], MemoryImage())], build=NOWHERE)


def test_no_jobs():
    with pytest.raises(ValueError, match="at least one job"):
        run_programs(CONFIG, [], build=NOWHERE)


def test_the_default_timeout_grows_with_program_and_data():
    small = default_timeout_cycles([HALT], MemoryImage(), CONFIG)
    large = default_timeout_cycles([HALT] * 10, MemoryImage(writes=((0, bytes(8000)),)), CONFIG)
    assert small >= 1_000_000 and large > small


def test_a_missing_build_is_reported_not_launched():
    with pytest.raises(SimError, match=r"no simulator at /nonexistent/hwgen-build/obj/"
                                       r"hwgen_tb_top: the build folder was removed.*cannot "
                                       r"be remade"):
        run()
    assert not Path("/nonexistent").exists()


@pytest.mark.parametrize(("ranges", "cover", "left"), [
    ([(0, 10)], [(2, 3)], [(0, 2), (5, 5)]),
    ([(0, 10)], [(0, 10)], []),
    ([(0, 10)], [(8, 5), (-3, 4)], [(1, 7)]),
    ([(5, 3), (20, 4)], [(6, 1), (30, 2)], [(5, 1), (7, 1), (20, 4)]),
    ([(5, 3)], [], [(5, 3)]),
])
def test_a_job_clears_only_what_it_does_not_write_or_poison_itself(ranges, cover, left):
    """The words of the job before that the next job does not overwrite anyway."""
    assert _uncovered(ranges, cover) == left
