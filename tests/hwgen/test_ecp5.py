"""ECP5 parts (hwgen/ecp5.py): what a netlist needs, the smallest part that holds it, and the
cost of loading a bitstream."""

import pytest

from hwgen import ecp5


def test_the_parts_grow_in_every_resource():
    for small, large in zip(ecp5.PARTS, ecp5.PARTS[1:], strict=False):
        for field in ("luts", "ffs", "dsps", "brams", "ram_slices", "bitstream_bits"):
            assert getattr(small, field) < getattr(large, field)
    assert ecp5.part("45k") is ecp5.part("LFE5U-45F")
    with pytest.raises(ValueError, match="unknown ECP5 part 'LFE5U-12F'"):
        ecp5.part("LFE5U-12F")


def test_demand_counts_carry_and_ram_cells_as_luts():
    need = ecp5.demand({"LUT4": 100, "CCU2C": 10, "TRELLIS_DPR16X4": 5, "PFUMX": 50,
                        "TRELLIS_FF": 7, "MULT18X18D": 3, "DP16KD": 2})
    assert need == {"luts": 100 + 20 + 20, "ffs": 7, "dsps": 3, "brams": 2, "ram_slices": 5}


@pytest.mark.parametrize(("cells", "name"), [
    ({"LUT4": 1000, "MULT18X18D": 28}, "LFE5U-25F"),
    ({"LUT4": 1000, "MULT18X18D": 29}, "LFE5U-45F"),  # one DSP too many for the 25k
    ({"LUT4": 30000}, "LFE5U-45F"),
    ({"DP16KD": 150}, "LFE5U-85F"),
])
def test_the_smallest_part_holds_every_resource(cells, name):
    part, reason = ecp5.smallest_part(cells)
    assert part.name == name
    assert "smallest ECP5 part" in reason


def test_a_netlist_too_big_for_every_part_names_what_overflows():
    part, reason = ecp5.smallest_part({"LUT4": 90000, "MULT18X18D": 10})
    assert part is None
    assert reason == "fits no ECP5 part: 90000 luts > 83640 on the LFE5U-85F"


def test_reconfiguration_is_the_bitstream_over_the_port_at_the_platform_clock():
    p = ecp5.part("25k")
    cost = ecp5.reconfiguration(p, 100_000_000)
    assert cost["bitstream_bits"] == 7562 * 592
    assert cost["config_bandwidth_bits_per_s"] == 60_000_000
    assert cost["seconds"] == pytest.approx(7562 * 592 / 60e6, rel=1e-5)
    assert cost["cycles"] == round(7562 * 592 / 60e6 * 1e8)
    assert "FPGA-DS-02012" in cost["source"] and "Trellis" in cost["source"]
