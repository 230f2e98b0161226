"""The replay of a walk's DRAM accesses against the banks' open rows (a learned model's
feature): counted by hand on small access lists, and from a real walk."""

import pytest

from fusion.cost.activations import row_activations
from fusion.cost.analytical import walk_totals
from fusion.kernels.gemm.features import GemmFeatures
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig

V = VariantConfig(rows=8, cols=8, port_bytes=16, mem_addr_bits=21,
                  epilogue=("bias", "requant", "relu", "residual"))
DDR3 = PlatformConfig(memory="ddr3")
FIG = DDR3.port_figures(V.port_bytes)
ROW = FIG.words_per_row  # words of a page; pages go to the banks in turn


def load(addr, count, length, stride, start, span):
    return ("load", (addr, count, length, stride, start, span))


def store(out, words, first, last):
    return ("store", (out, words, first, last))


def test_a_run_of_words_opens_each_page_it_crosses_once():
    assert row_activations([], FIG) == (0, 0)
    assert row_activations([load(0, 1, 3 * ROW, 3 * ROW, 0, 3 * ROW)], FIG) == (3, 0)
    # two segments of one page, a whole bank-cycle of pages apart: the same bank, two rows,
    # and back: three opens
    stride = FIG.banks * ROW
    assert row_activations([load(0, 3, 4, stride, 0, 12)], FIG) == (3, 0)
    # the same segments in the same row of the bank: one open
    assert row_activations([load(0, 3, 4, 8, 0, 12)], FIG) == (1, 0)


def test_stores_into_another_row_of_the_bank_being_read_reopen_it():
    far = FIG.banks * ROW  # bank 0 again, the next row
    reads = load(0, 1, 64, 64, 0, 64)  # bank 0, row 0: a word a cycle
    assert row_activations([reads], FIG) == (1, 0)
    # a store to the next row of bank 0 in the middle of the reads opens its row, and the
    # reads after it open theirs again
    assert row_activations([reads, store(far, 1, 30, 30)], FIG) == (2, 1)
    # four, one a cycle beside the reads': every word turns the bank's row
    assert row_activations([reads, store(far, 4, 30, 33)], FIG) == (5, 4)
    # stores to another bank leave the reads' row open
    assert row_activations([reads, store(ROW, 4, 30, 33)], FIG) == (1, 1)
    # after the reads, they open only their own row
    assert row_activations([reads, store(far, 4, 100, 103)], FIG) == (1, 1)


def test_a_refresh_closes_every_row():
    every = FIG.refresh_interval
    reads = load(0, 1, 2, 2, 0, 2 * every)  # one word before a refresh, one after
    assert row_activations([reads], FIG) == (2, 0)
    # twice as often when hot: both words still on either side of one refresh
    assert row_activations([reads], FIG, refresh_divisor=2) == (2, 0)
    assert row_activations([load(0, 1, 4, 4, 0, 2 * every)], FIG, refresh_divisor=2) == (4, 0)
    assert row_activations([load(0, 1, 4, 4, 0, 2 * every)], FIG) == (2, 0)


@pytest.mark.parametrize("platform", [DDR3, PlatformConfig(memory="sdr")])
def test_a_walk_on_dram_counts_the_rows_its_program_opens(platform):
    f = GemmFeatures.for_gemm(V, 64, 64, 64, stages=("bias", "requant"))
    _, totals = walk_totals(f, platform)
    assert totals["acts_load"] > 0 and totals["acts_store"] > 0
    # every read opens at most one row a word, and the 64x64 int8 output is 256 words
    assert totals["acts_load"] <= totals["bytes_loaded"] // V.port_bytes
    assert totals["acts_store"] <= 256
    # the ideal memory has no rows
    _, ideal = walk_totals(f, PlatformConfig())
    assert "acts_load" not in ideal and "acts_store" not in ideal


def test_regions_in_one_bank_open_more_rows_than_spread_ones():
    f = GemmFeatures.for_gemm(V, 64, 64, 64, stages=("bias", "requant"))
    spread = {"a": 0, "b": 2 * ROW, "bias": 4 * ROW, "out": 5 * ROW}  # banks 0-1, 2-3, 4, 5
    bank0 = FIG.banks * ROW  # each region within banks 0 and 1 (none is over two pages)
    one_bank = {"a": 0, "b": bank0, "bias": 2 * bank0, "out": 3 * bank0}
    _, apart = walk_totals(f.at(spread), DDR3)
    _, crowded = walk_totals(f.at(one_bank), DDR3)
    assert crowded["acts_load"] > 2 * apart["acts_load"]
    assert crowded["acts_store"] > apart["acts_store"]
