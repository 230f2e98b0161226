"""The choice DDR3 read leveling makes from its scan (the scan itself runs on boards only:
the simulated board's PHY has no delays)."""

import pytest

from hwgen.board.leveling import LaneLevel, LevelingFailed, choose

T, F = True, False


def test_the_bitslip_with_the_most_working_delays_wins_and_its_run_is_centred():
    scan = [[F, F, F, F, F, F, F, F],
            [F, T, T, T, T, T, F, F],
            [T, T, F, F, F, F, F, F],
            [F, F, F, F, F, F, F, F]]
    assert choose(scan) == (1, 3)


def test_an_even_run_takes_its_lower_middle_and_a_longer_run_beats_a_scattered_one():
    assert choose([[F, F, T, T, T, T, F, F]]) == (0, 3)
    # Equal counts of working delays: the one with the longer unbroken run.
    assert choose([[T, F, T, F, T, F, T, F], [F, F, F, T, T, T, T, F]]) == (1, 4)
    # Within a bitslip, the longest of its runs.
    assert choose([[T, F, F, T, T, T, F, T]]) == (0, 4)


def test_a_run_at_the_last_delay_counts():
    assert choose([[F, F, F, F, F, F, T, T]]) == (0, 6)


def test_the_first_of_equal_bitslips_is_kept():
    assert choose([[F, T, T, F], [F, T, T, F]]) == (0, 1)


def test_no_working_setting_is_refused():
    with pytest.raises(LevelingFailed, match="no delay and bitslip"):
        choose([[F] * 8] * 4)


def test_a_lane_reports_its_scan():
    lane = LaneLevel(0, 1, 3, ((F, T), (T, T)))
    assert lane.to_dict() == {"lane": 0, "bitslip": 1, "delay": 3, "scan": [".#", "##"]}
