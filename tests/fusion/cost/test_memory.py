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


def test_the_engine_rate_bounds_each_word_and_refresh_stretches_the_span():
    # with a request every 2 cycles a sequential DDR3 read (1.1 cycles) waits for the engine;
    # a refresh holds the port all the same, and the engine never makes up the requests it
    # lost (sim.dram_interplay's read_paced: measured 4,235 cycles, 4,244 predicted; 4,124
    # with the refresh charged only where the port is slower than the engine)
    m = model()
    _, rest = m.load_cycles(1, 100, 100, gap=2)
    assert rest == round(99 * 2 / (1 - m.refresh_share)) > 99 * 2
    # behind SDR's down-converter (9 cycles a 16-byte word) the memory is the bound
    _, rest = model(SDR).load_cycles(1, 100, 100, gap=2)
    assert rest > 99 * 8


def test_refresh_is_a_rate_that_doubles_when_hot():
    normal, hot = model(DDR3), model(HOT)
    f = PORT_FIGURES[("ddr3", "1:4", "MT41K128M16", "800", 128, 100_000_000)]
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


# -- loads and stores sharing the port (sim.dram_interplay's figures) ------------------------


def test_a_loads_first_word_costs_what_its_relation_to_the_read_before_does():
    m = model()
    f = m.figures
    assert m.first_extra("continues") == 0
    assert m.first_extra("switch") == f.load_switch
    assert m.first_extra("activate") == f.load_activate
    # not knowing the regions: a switch, one chance in `banks` an activation
    assert m.first_extra("unknown") == pytest.approx(
        ((f.banks - 1) * f.load_switch + f.load_activate) / f.banks)
    first_c, rest_c = m.load_cycles(1, 64, 64, 1, m.first_extra("continues"))
    first_a, rest_a = m.load_cycles(1, 64, 64, 1, m.first_extra("activate"))
    assert rest_c == rest_a and first_c < first_a


def test_stores_cutting_a_load_cost_their_writes_a_turn_and_per_word_turns():
    m = model()
    f = m.figures
    stretch = 1 / (1 - m.refresh_share)
    write = f.write * (1 - f.refresh_hold / f.refresh_interval)
    streaming = m.write_cut_cycles(16, spacing=1, turn=True, same_bank=0)
    assert streaming == pytest.approx((16 * write + f.write_turn) * stretch)
    # a run that goes on from the stores before pays no new turn
    assert m.write_cut_cycles(16, spacing=1, turn=False, same_bank=0) == pytest.approx(
        16 * write * stretch)
    # words one at a time: a turn each, at the measured spacings and between them
    two = m.write_cut_cycles(4, spacing=2, turn=False, same_bank=0)
    four = m.write_cut_cycles(4, spacing=4, turn=False, same_bank=0)
    three = m.write_cut_cycles(4, spacing=3, turn=False, same_bank=0)
    assert two == pytest.approx(4 * (write + f.write_word) * stretch)
    assert four == pytest.approx(4 * (write + f.write_word_spaced) * stretch)
    assert three == pytest.approx((two + four) / 2)
    # another row of the bank being read: the rows close and open every time
    same = m.write_cut_cycles(4, spacing=2, turn=False, same_bank=1)
    assert same == pytest.approx(4 * (write + f.write_word_same) * stretch)
    assert same > 4 * two
    # far apart, a word costs at most a whole turn beyond its write
    far = m.write_cut_cycles(1, spacing=64, turn=False, same_bank=0)
    assert far == pytest.approx((write + max(f.write_turn, f.write_word)) * stretch)


def _load_and_drain(m: Machine, out: int | None = None, k: int = 10) -> None:
    """A LOAD of 45 A words, then a tile of ``k`` slices drained as int8 (4 words)."""
    m.load(45 * V.port_bytes, V.rows, pattern=(1, 45, 45), addr=0 if out is not None else None)
    m.matmul(k, True, 1, out=out)
    m.wait(load=True, feed=True, epi=True)


def test_a_drain_while_a_load_requests_delays_the_load_by_what_it_costs():
    alone = Machine(V, model())
    alone.load(45 * V.port_bytes, V.rows, pattern=(1, 45, 45))
    alone.wait(load=True)
    cut = Machine(V, model())
    _load_and_drain(cut)
    cost = cut.memory.write_cut_cycles(4, spacing=2, turn=True, same_bank=1 / 8)
    assert cut.dma == alone.dma + round(cost)
    # the ideal memory: the port has room for both
    ideal = Machine(V)
    _load_and_drain(ideal)
    plain = Machine(V)
    plain.load(45 * V.port_bytes, V.rows, pattern=(1, 45, 45))
    assert ideal.dma == plain.dma


def test_with_addresses_the_bank_of_the_stores_against_the_reads_decides():
    f = model().figures
    other = Machine(V, model())
    _load_and_drain(other, out=3 * f.words_per_row)  # another bank
    same = Machine(V, model())
    _load_and_drain(same, out=40 * f.banks * f.words_per_row)  # bank 0, another row
    assert same.dma - other.dma == round(
        model().write_cut_cycles(4, spacing=2, turn=True, same_bank=1)) - round(
        model().write_cut_cycles(4, spacing=2, turn=True, same_bank=0))


def test_a_load_continuing_the_one_before_pays_no_switch():
    def two_loads(second: int | None, source: object) -> int:
        m = Machine(V, model())
        m.load(16 * V.port_bytes, V.cols * 4, addr=0 if second is not None else None,
               source="a")
        m.load(16 * V.port_bytes, V.cols * 4, addr=second, source=source)
        m.wait(load=True)
        return m.seq

    assert two_loads(16, "b") == two_loads(None, "a")  # by address, or by register
    assert two_loads(3 * 128, "b") > two_loads(16, "b")  # another region: a switch


def test_stores_between_loads_are_paid_by_the_next_load_for_their_part_after_it_starts():
    m = Machine(V, model())
    m.epipass(64, 4)  # 128 words streaming out, no load requesting
    assert len(m.pending) == 1
    first, last, cost = m.pending[0]
    m.load(16 * V.port_bytes, V.cols * 4)
    assert m.pending == []
    late = Machine(V, model())
    late.epipass(64, 4)
    late.seq = last + 1  # the load starts after the stores are done: nothing to pay
    late.load(16 * V.port_bytes, V.cols * 4)
    assert m.dma_take - m.read[4] > late.dma_take - late.read[4]


def test_stores_that_start_after_a_loads_last_request_are_paid_by_the_next_load():
    m = Machine(V, model())
    m.epipass(64, 4)  # its stores begin a few cycles from now
    (first, _, cost), = m.pending
    m.load(V.port_bytes, V.cols * 4)  # one word, requested before they begin
    assert m.read[4] + m.read[5] < first and m.read[5] == 1  # not delayed by them
    assert m.pending == [(first, _, cost)]  # still owed
    m.seq = first + 5  # a load requesting while they write pays their share from then on
    m.load(16 * V.port_bytes, V.cols * 4)
    assert m.pending == [] and m.read[5] > 16


def test_done_waits_for_the_adapter_to_settle_after_the_last_store():
    m = Machine(V, model())
    m.epipass(8, 1)
    m.wait(load=True, feed=True, epi=True)
    assert m.done() == max(m.seq + 1, m.last_write + m.memory.figures.write_settle)
    assert m.done() > m.seq + 1  # the settling outlasts the final wait here
    ideal = Machine(V)
    ideal.epipass(8, 1)
    ideal.wait(load=True, feed=True, epi=True)
    assert ideal.done() == ideal.seq + 1


def test_a_kernel_is_priced_where_the_memory_plan_puts_it():
    f = GemmFeatures.for_gemm(V, 64, 64, 64, stages=("bias", "requant"))
    row = DDR3.port_figures(V.port_bytes).words_per_row
    spread = {"a": 0, "b": 2 * row, "bias": 4 * row, "out": 5 * row}  # banks 0-1, 2-3, 4, 5
    one_bank = {"a": 0, "b": 8 * row, "bias": 16 * row, "out": 24 * row}  # rows of bank 0
    # built alone, its regions are packed from word 0: the spread placement's banks
    assert f.at(spread).analytical_cycles(DDR3) == f.analytical_cycles(DDR3)
    # in one bank, every change between operands opens another row
    assert f.at(one_bank).analytical_cycles(DDR3) > f.analytical_cycles(DDR3) * 1.05
    # the ideal memory knows no banks
    ideal = PlatformConfig()
    assert f.at(one_bank).analytical_cycles(ideal) == f.analytical_cycles(ideal)
    with pytest.raises(ValueError, match="missing out"):
        f.at({"a": 0, "b": 2 * row, "bias": 4 * row}).analytical_cycles(DDR3)


def test_a_max_is_priced_by_the_program_its_kind_builds_where_it_is_placed():
    from fusion.cost.analytical import estimate_program
    from fusion.kernels.eltmax.features import MaxFeatures
    from fusion.kernels.eltmax.kind import MAX, MaxParams
    from fusion.kernels.layout import place

    v = VariantConfig(rows=8, cols=8, port_bytes=16, mem_addr_bits=21,
                      epilogue=("bias", "requant", "relu", "residual"))
    p = MaxParams(M=64, N=64, n_inputs=3)
    f = MaxFeatures(config=v, M=64, N=64, n_inputs=3)
    row = DDR3.port_figures(v.port_bytes).words_per_row
    at = {"in0": 0, "in1": 8 * row, "in2": 16 * row, "tmp0": 24 * row, "out": 32 * row}
    built = MAX.build(v, p, place(v, MAX.regions(v, p), at))
    assert f.at(at).analytical_cycles(DDR3) == estimate_program(v, built.program.instrs, DDR3)
    assert f.at(at).analytical_cycles(DDR3) != f.analytical_cycles(DDR3)
    with pytest.raises(ValueError, match="missing out"):
        f.at({k: a for k, a in at.items() if k != "out"}).analytical_cycles(DDR3)
