"""The first-order DRAM port model (fusion/cost/memory.py) and the machine on it."""

import pytest

from fusion.cost.analytical import AnalyticalModel
from fusion.cost.machine import Machine
from fusion.cost.memory import MemoryModel, classify
from fusion.kernels.gemm.features import GemmFeatures
from hwgen.config import VariantConfig
from hwgen.platform import PORT_FIGURES, PlatformConfig

V = VariantConfig(rows=8, cols=8, port_bytes=16, mem_addr_bits=21,
                  epilogue=("bias", "requant", "relu"))
DDR3 = PlatformConfig(memory="ddr3")
HOT = PlatformConfig(memory="ddr3", refresh="hot")
SDR = PlatformConfig(memory="sdr")


def model(platform=DDR3) -> MemoryModel:
    return MemoryModel.for_platform(platform, V.port_bytes)


def test_classify_counts_each_word_after_the_first():
    # 4 segments of 16 words, back to back: all sequential
    assert classify(4, 16, 16, 128, 8) == (63, 0, 0)
    # 4 segments 128 words apart (one DRAM page each): each jump changes bank
    assert classify(4, 1, 128, 128, 8) == (0, 3, 0)
    # 1024 words apart: eight pages, the same bank, another row: row conflicts
    assert classify(4, 2, 1024, 128, 8) == (4, 0, 3)
    # a jump inside one page is as cheap as the next word
    assert classify(3, 4, 32, 128, 8) == (11, 0, 0)


def test_a_row_conflicting_load_is_slower_than_a_sequential_one_of_the_same_bytes():
    m = model()
    first_s, seq = m.load_cycles(64, 8, 8, gap=1)
    first_c, conflict = m.load_cycles(64, 8, 1024, gap=1)  # every segment: same bank, new row
    first_b, bank = m.load_cycles(64, 8, 128, gap=1)  # every segment: the next bank
    assert first_s == first_c == first_b
    assert seq < bank and seq < conflict
    t_seq, t_bank, t_row = m.word_costs()
    stretch = 1 / (1 - m.refresh_share)
    assert conflict == round((64 * 7 * t_seq + 63 * t_row) * stretch)
    assert seq == round(511 * t_seq * stretch)


def test_the_engine_rate_bounds_each_word():
    # with a request every 2 cycles a sequential DDR3 read (1.1 cycles) waits for the engine
    m = model()
    _, rest = m.load_cycles(1, 100, 100, gap=2)
    assert rest == 99 * 2
    # behind SDR's down-converter (9 cycles a 16-byte word) the memory is the bound
    _, rest = model(SDR).load_cycles(1, 100, 100, gap=2)
    assert rest > 99 * 8


def test_refresh_is_a_rate_that_doubles_when_hot():
    normal, hot = model(DDR3), model(HOT)
    f = PORT_FIGURES[("ddr3", "MT41K128M16", "800", 128)]
    assert normal.refresh_share == pytest.approx(f.refresh_hold / f.refresh_interval)
    assert hot.refresh_share == pytest.approx(2 * normal.refresh_share)
    _, n = normal.load_cycles(1, 4000, 4000, gap=1)
    _, h = hot.load_cycles(1, 4000, 4000, gap=1)
    assert h / n == pytest.approx((1 - normal.refresh_share) / (1 - hot.refresh_share),
                                  rel=1e-3)


def test_the_model_gives_back_the_characterized_sequential_figure():
    # the figures were measured with refresh on: taken out and put back, a long sequential
    # stream costs what the characterization measured
    m = model()
    _, rest = m.load_cycles(1, 100_001, 100_001, gap=1)
    assert rest / 100_000 == pytest.approx(m.figures.sequential, rel=1e-3)


def test_the_ideal_memory_has_no_model_and_the_ideal_estimate_is_unchanged():
    assert MemoryModel.for_platform(None, 16) is None
    assert MemoryModel.for_platform(PlatformConfig(), 16) is None
    f = GemmFeatures.for_gemm(V, 64, 64, 64, stages=V.epilogue)
    assert AnalyticalModel(PlatformConfig()).predict(f) == AnalyticalModel().predict(f) \
        == f.analytical_cycles()


def test_dram_costs_more_than_ideal_and_hot_more_than_normal():
    f = GemmFeatures.for_gemm(V, 200, 300, 100, stages=V.epilogue, fused=False)
    ideal, ddr3, hot, sdr = (AnalyticalModel(p).predict(f)
                             for p in (None, DDR3, HOT, SDR))
    assert ideal < ddr3 < hot
    assert ddr3 < sdr  # SDR moves a 16-byte word in about nine cycles


def test_machine_latency_is_the_platforms():
    assert Machine(V).latency == V.port_latency
    assert Machine(V, model()).latency == 18  # 17.3 cycles, rounded up


def test_an_uncharacterized_port_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="sim.dram.characterize"):
        MemoryModel.for_platform(DDR3, 8)
    with pytest.raises(ValueError, match="no characterized port figures"):
        PlatformConfig(memory="ddr3", module="MT41K64M16").port_figures(16)
