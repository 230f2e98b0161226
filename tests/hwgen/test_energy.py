"""The energy estimate against hand arithmetic, and its refusals.

Every expected figure here is recomputed from the datasheet and paper numbers with
fractions.Fraction, not read back from hwgen.energy: a changed figure or formula there fails.
"""

from fractions import Fraction as F

import pytest

from hwgen.config import VariantConfig
from hwgen.energy import (
    REQUIRED_COUNTERS,
    EnergyEstimate,
    energy_table,
    estimate,
    sram_pj_per_byte,
    total,
)
from hwgen.perf import COUNTERS
from hwgen.platform import PlatformConfig

V8 = VariantConfig(rows=8, cols=8, port_bytes=8)  # A and B scratchpads 2048 x 8 = 16 KB
IDEAL, SDR, DDR3 = (PlatformConfig(memory=m) for m in ("ideal", "sdr", "ddr3"))
RUN = {"cycles": 123_456, "array_busy": 65_536, "bytes_read": 196_608, "bytes_written": 8_192,
       "row_activates": 777, "stall_memory": 5, "instret": 99}

# Hand arithmetic, pJ. On-chip: Horowitz 45 nm x 14 (Kuon and Rose).
MAC = (F("0.2") + F("0.1")) * 14                         # 4.2
SRAM_32K = F(20) / 8 * 14                                # 16 KB spad -> the 32 KB row: 35
# DDR3 stand-in, MT41J512M8 (x8, two chips on 16 bits), VDD 1.5 V, tCK 1.25 ns.
DDR3_ACT = (55 * F("48.75") - 38 * 35 - 32 * F("13.75")) * F("1.5") * 2   # 2733.75
DDR3_RD = (157 - 38) * F("1.5") * F("1.25") / 2         # 2 bytes a clock a chip: 111.5625
DDR3_WR = (125 - 38) * F("1.5") * F("1.25") / 2         # 81.5625
DDR3_REF = (235 - 38) * F("1.5") * 260 * 2              # 153660
DDR3_BG_MW = 38 * F("1.5") * 2                          # 114
DDR3_TREFI = 7800
# SDR stand-in, W9864G6JH-6 (x16, one chip), VDD 3.3 V, tCK 6 ns.
SDR_ACT = (50 * 60 - 35 * 42 - 25 * (60 - 42)) * F("3.3")  # 3564
SDR_RW = (75 - 35) * F("3.3") * 6 / 2                   # 396
SDR_REF = (60 - 35) * F("3.3") * 60                     # 4950
SDR_BG_MW = 35 * F("3.3")                               # 115.5
SDR_TREFI = F(64_000_000, 4096)                         # 15625


def pj_table(config, platform, **kw):
    return {e.name: e.pj for e in energy_table(config, platform, **kw)}


def test_the_tables_are_the_hand_computed_figures():
    common = {"mac_int8": MAC, "spad_read": SRAM_32K, "spad_write": SRAM_32K,
              "fpga_static": 0}
    assert pj_table(V8, DDR3) == common | {
        "dram_read": DDR3_RD, "dram_write": DDR3_WR, "dram_activate": DDR3_ACT,
        "dram_refresh": DDR3_REF, "dram_background": DDR3_BG_MW}
    assert pj_table(V8, SDR) == common | {
        "dram_read": SDR_RW, "dram_write": SDR_RW, "dram_activate": SDR_ACT,
        "dram_refresh": SDR_REF, "dram_background": SDR_BG_MW}
    # Spelled out once, so that a slip in the hand arithmetic above shows too.
    assert (DDR3_ACT, DDR3_RD, SDR_ACT, SDR_RW) == (F("2733.75"), F("111.5625"), 3564, 396)


@pytest.mark.parametrize(("platform", "act", "rd", "wr", "ref", "bg", "trefi"), [
    (DDR3, DDR3_ACT, DDR3_RD, DDR3_WR, DDR3_REF, DDR3_BG_MW, DDR3_TREFI),
    (SDR, SDR_ACT, SDR_RW, SDR_RW, SDR_REF, SDR_BG_MW, SDR_TREFI)])
def test_an_estimate_is_the_counters_times_the_table(platform, act, rd, wr, ref, bg, trefi):
    ns = F(RUN["cycles"] * 10**9, 100_000_000)
    expected_pj = {
        "mac_int8": MAC * RUN["array_busy"] * 64,
        "spad_read": SRAM_32K * RUN["array_busy"] * (8 + 8),
        "spad_write": SRAM_32K * RUN["bytes_read"],
        "dram_read": rd * RUN["bytes_read"],
        "dram_write": wr * RUN["bytes_written"],
        "dram_activate": act * RUN["row_activates"],
        "dram_refresh": ref * ns / trefi,
        "dram_background": bg * ns,
        "fpga_static": 0,
    }
    got = estimate(RUN, V8, platform)
    assert list(got.breakdown_nj) == list(expected_pj)
    for name, pj in expected_pj.items():
        assert got.breakdown_nj[name] == pytest.approx(float(pj / 1000), rel=1e-12), name
    assert got.total_nj == pytest.approx(float(sum(expected_pj.values()) / 1000), rel=1e-12)


# Which events each counter drives; every other event must not move with it.
DRIVES = {"array_busy": {"mac_int8", "spad_read"},
          "bytes_read": {"spad_write", "dram_read"},
          "bytes_written": {"dram_write"},
          "row_activates": {"dram_activate"},
          "cycles": {"dram_refresh", "dram_background", "fpga_static"}}


@pytest.mark.parametrize("platform", [IDEAL, SDR, DDR3], ids=lambda p: p.memory)
@pytest.mark.parametrize("counter", sorted(DRIVES))
def test_each_event_scales_linearly_with_its_counter(platform, counter):
    def at(n):
        return estimate(RUN | {counter: n}, V8, platform, fpga_static_mw=F(250)).breakdown_nj

    e0, e1, e3 = at(0), at(1000), at(3000)
    for name in e0:
        if name in DRIVES[counter]:
            assert e0[name] == 0 and e1[name] > 0, name
            assert e3[name] == pytest.approx(3 * e1[name], rel=1e-12), name
        else:
            assert e0[name] == e1[name] == e3[name], name


def test_ddr3_and_sdr_price_the_same_run_from_their_own_parts():
    ddr3, sdr = estimate(RUN, V8, DDR3).breakdown_nj, estimate(RUN, V8, SDR).breakdown_nj
    for name in ("mac_int8", "spad_read", "spad_write", "fpga_static"):
        assert ddr3[name] == sdr[name]
    assert sdr["dram_read"] / ddr3["dram_read"] == pytest.approx(float(SDR_RW / DDR3_RD))
    assert sdr["dram_activate"] / ddr3["dram_activate"] == pytest.approx(float(SDR_ACT / DDR3_ACT))


def test_the_module_choice_within_a_memory_does_not_change_the_figures():
    # One stand-in part per memory; named modules share it (docs/energy.md says so).
    assert pj_table(V8, PlatformConfig(memory="ddr3", module="MT41K256M16")) == pj_table(V8, DDR3)
    assert pj_table(V8, PlatformConfig(memory="sdr", module="MT48LC16M16")) == pj_table(V8, SDR)


def test_the_ideal_memory_prices_bytes_as_ddr3_and_nothing_else_of_a_dram():
    got = estimate(RUN, V8, IDEAL).breakdown_nj
    assert set(got) == {"mac_int8", "spad_read", "spad_write", "dram_read", "dram_write",
                        "fpga_static"}
    assert got["dram_read"] == pytest.approx(float(DDR3_RD * RUN["bytes_read"] / 1000))
    assert got["dram_write"] == pytest.approx(float(DDR3_WR * RUN["bytes_written"] / 1000))
    # It has no rows, refresh or background: a lower bound for the same run on DDR3.
    assert got == estimate(RUN | {"row_activates": 0}, V8, IDEAL).breakdown_nj
    assert estimate(RUN, V8, IDEAL).total_nj < estimate(RUN, V8, DDR3).total_nj


def test_zero_counters_cost_nothing_and_idle_time_costs_only_time():
    zero = {name: 0 for name in REQUIRED_COUNTERS}
    for platform in (IDEAL, SDR, DDR3):
        assert estimate(zero, V8, platform, fpga_static_mw=F(300)).total_nj == 0
        idle = estimate(zero | {"cycles": 1_000_000}, V8, platform, fpga_static_mw=F(300))
        nonzero = {k for k, v in idle.breakdown_nj.items() if v}
        assert nonzero == ({"fpga_static"} if platform is IDEAL
                           else {"dram_refresh", "dram_background", "fpga_static"})
        assert idle.breakdown_nj["fpga_static"] == pytest.approx(300 * 10_000_000 / 1000)


def test_hot_refresh_doubles_refresh_energy_and_nothing_else():
    normal = estimate(RUN, V8, DDR3).breakdown_nj
    hot = estimate(RUN, V8, PlatformConfig(memory="ddr3", refresh="hot")).breakdown_nj
    assert hot["dram_refresh"] == pytest.approx(2 * normal["dram_refresh"], rel=1e-12)
    assert {k: v for k, v in hot.items() if k != "dram_refresh"} == \
        {k: v for k, v in normal.items() if k != "dram_refresh"}


def test_time_comes_from_the_platform_clock():
    fast = estimate(RUN, V8, PlatformConfig(memory="ddr3", clock_hz=100_000_000)).breakdown_nj
    slow = estimate(RUN, V8, PlatformConfig(memory="ddr3", clock_hz=50_000_000)).breakdown_nj
    assert slow["dram_background"] == pytest.approx(2 * fast["dram_background"], rel=1e-12)
    assert slow["dram_read"] == fast["dram_read"]


def test_the_asic_view_drops_the_fpga_factor():
    asic = pj_table(V8, DDR3, fpga_factor=1)
    assert asic["mac_int8"] == F("0.3") and asic["spad_read"] == F(20) / 8
    assert asic["dram_read"] == DDR3_RD  # the factor is for on-chip events only


@pytest.mark.parametrize(("size", "pj"), [(1, F(10, 8)), (8 << 10, F(10, 8)),
                                          ((8 << 10) + 1, F(20, 8)), (32 << 10, F(20, 8)),
                                          (1 << 20, F(100, 8))])
def test_the_sram_figure_is_the_smallest_listed_array_that_holds_the_scratchpad(size, pj):
    assert sram_pj_per_byte(size) == pj


def test_a_scratchpad_beyond_the_table_is_refused():
    with pytest.raises(ValueError, match=r"no SRAM energy figure for a 1048577-byte scratchpad"):
        sram_pj_per_byte((1 << 20) + 1)


def test_the_small_default_variant_uses_the_8k_sram_row():
    assert pj_table(VariantConfig(), IDEAL)["spad_read"] == F(10, 8) * 14  # 2048 x 4 = 8 KB


@pytest.mark.parametrize(("counters", "message"), [
    ({"array_busy": 1, "bytes_read": 1},
     r"needs counter\(s\) cycles, bytes_written; pass the run's counters"),
    (RUN | {"bytes_read": -8}, r"integers of 0 or more, not bytes_read=-8$"),
    (RUN | {"cycles": 1.5, "row_activates": -1},
     r"not cycles=1\.5, row_activates=-1$"),
    (RUN | {"array_busy": True}, r"not array_busy=True$"),
])
def test_bad_counters_are_refused_by_name(counters, message):
    with pytest.raises(ValueError, match=message):
        estimate(counters, V8, DDR3)


@pytest.mark.parametrize(("kw", "message"), [
    ({"fpga_factor": 0}, "fpga_factor must be positive, not 0"),
    ({"fpga_static_mw": -1}, "fpga_static_mw must be 0 or more, not -1")])
def test_bad_table_parameters_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        estimate(RUN, V8, DDR3, **kw)


def test_the_required_counters_are_hardware_counters():
    assert set(REQUIRED_COUNTERS) <= set(COUNTERS)


def test_estimates_sum_event_by_event():
    a, b = estimate(RUN, V8, DDR3), estimate(RUN | {"cycles": 1}, V8, IDEAL)
    summed = total([a, b, a])
    assert summed.breakdown_nj["dram_read"] == pytest.approx(
        2 * a.breakdown_nj["dram_read"] + b.breakdown_nj["dram_read"])
    # An event only one side has counts 0 on the other.
    assert summed.breakdown_nj["dram_refresh"] == pytest.approx(2 * a.breakdown_nj["dram_refresh"])
    assert summed.total_nj == pytest.approx(2 * a.total_nj + b.total_nj, rel=1e-12)
    assert total([]) == EnergyEstimate(()) and total([]).total_nj == 0
    assert a + b == total([a, b])


def test_to_dict_gives_the_total_and_the_breakdown_to_three_digits():
    d = EnergyEstimate((("mac_int8", 1234.5678), ("dram_read", 0.000123456))).to_dict()
    assert d == {"energy_nj": 1230.0,
                 "energy_breakdown_nj": {"mac_int8": 1230.0, "dram_read": 0.000123}}


def test_the_documented_table_is_the_code_table():
    from pathlib import Path
    doc = (Path(__file__).parents[2] / "docs" / "energy.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2:5]
    tables = [pj_table(V8, p) for p in (DDR3, SDR, IDEAL)]
    assert set(rows) == set(tables[0])
    for name, documented in rows.items():
        for cell, table in zip(documented, tables, strict=True):
            assert (cell == "-" and name not in table) or F(cell) == table[name], (name, cell)
