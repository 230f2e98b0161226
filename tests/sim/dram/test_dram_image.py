"""Scattering a job's words into the DRAM model's bank memories and gathering them back,
checked against the address layout LiteDRAM reports (``dram.json``'s bit fields), not
against the module's own arithmetic."""

import numpy as np
import pytest

from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from sim.memory import board_memory
from sim.tb import dram_image

CONFIG = VariantConfig(rows=4, cols=4, port_bytes=16, mem_addr_bits=21)


def _parse(text: str, width: int) -> dict[int, str]:
    """A $readmemh file as index -> hex word."""
    out, at = {}, 0
    for line in text.splitlines():
        if not line or line.startswith("//"):
            continue
        if line.startswith("@"):
            at = int(line[1:], 16)
            continue
        assert len(line) == width
        out[at] = line
        at += 1
    return out


#: DRAM columns a controller word spans (a DDR3 burst is eight beats), and the beats a phase
#: of LiteDRAM's simulation PHY carries (its ``burst_length``): the model's bank memory holds
#: ``beats * phases`` columns a word, so a controller word steps ``columns / (beats *
#: phases)`` words (2 at the ECP5's 1:2, 1 elsewhere).
BURST_COLUMNS = {"DDR3": 8, "SDR": 1}
MODEL_BEATS = {"DDR3": 2, "SDR": 1}
PLATFORMS = {"ddr3": PlatformConfig(memory="ddr3"), "sdr": PlatformConfig(memory="sdr"),
             "ddr3-1:2": PlatformConfig(memory="ddr3", rate="1:2", module="MT41K256M16",
                                        clock_hz=50_000_000)}


@pytest.mark.parametrize("memory", sorted(PLATFORMS))
def test_words_land_where_the_controller_address_layout_puts_them(memory):
    board = board_memory(CONFIG, PLATFORMS[memory])
    layout, spec = board.testbench_header(), board.spec
    ratio, cb = layout["ratio"], layout["controller_bytes"]
    # the controller's own layout: a port word splits into `ratio` controller words
    field = {k: (lsb, width) for k, (lsb, width) in spec["address_layout"].items()}
    col_lsb, col_w = field["column"]
    col_w += ratio.bit_length() - 1
    bank_lsb, bank_w = field["bank"][0] + ratio.bit_length() - 1, field["bank"][1]
    row_lsb = field["row"][0] + ratio.bit_length() - 1
    phy = spec["phy"]
    stride = BURST_COLUMNS[phy["memtype"]] // (MODEL_BEATS[phy["memtype"]] * phy["nphases"])
    assert layout["stride"] == stride
    rng = np.random.default_rng(3)
    segments = [(a, rng.integers(0, 256, n * 16, np.uint8)) for a, n in
                ((0, 5), (120, 20), (1000, 300), (CONFIG.mem_words - 7, 7))]
    files = dram_image.bank_files(segments, 16, layout)
    banks = [_parse(t, 2 * cb) for t in files]
    for addr, data in segments:
        for w in range(len(data) // 16):
            for k in range(ratio):
                c = (addr + w) * ratio + k
                col = (c >> col_lsb) & ((1 << col_w) - 1)
                bank = (c >> bank_lsb) & ((1 << bank_w) - 1)
                row = c >> row_lsb
                index = (row * layout["words_per_row"] + col) * stride
                word = data[w * 16 + k * cb:w * 16 + (k + 1) * cb]
                assert banks[bank][index] == word[::-1].tobytes().hex()
    # and back: what the files hold, dumped by bank range, gathers to the segments
    for addr, data in segments:
        words = len(data) // 16
        dumps = {}
        for b, (lo, hi) in dram_image.bank_ranges(addr, words, layout).items():
            rows = [bytes.fromhex(banks[b].get(i, "00" * cb))[::-1] for i in range(lo, hi + 1)]
            dumps[b] = (lo, np.frombuffer(b"".join(rows), np.uint8).reshape(-1, cb))
        np.testing.assert_array_equal(dram_image.gather(addr, words, layout, dumps), data)


def test_a_bank_without_words_still_gets_a_file():
    layout = board_memory(CONFIG, PlatformConfig(memory="ddr3")).testbench_header()
    files = dram_image.bank_files([(0, np.ones(16, np.uint8))], 16, layout)
    assert len(files) == 8 and files[0].startswith("@0\n")
    assert all(t.startswith("//") for t in files[1:])


def test_a_word_narrower_than_the_controller_is_refused():
    with pytest.raises(ValueError, match="--port-bytes 16"):
        board_memory(VariantConfig(rows=4, cols=4, port_bytes=8), PlatformConfig(memory="ddr3"))
    with pytest.raises(ValueError, match="--mem-addr-bits 21"):
        board_memory(VariantConfig(rows=4, cols=4, port_bytes=16, mem_addr_bits=24),
                     PlatformConfig(memory="sdr"))
