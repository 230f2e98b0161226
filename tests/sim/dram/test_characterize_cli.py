"""``python -m sim.dram.characterize``: bad input is one line and exit status 2 (no build)."""

import pytest

from sim.dram.characterize import main


@pytest.mark.parametrize(("argv", "message"), [
    (["--memory", "ideal"], "the ideal memory has nothing to characterize"),
    (["--memory", "ddr4"], "memory must be one of ideal, sdr, ddr3, not 'ddr4'"),
    (["--memory", "ddr3", "--refresh", "warm"], "refresh must be one of normal, hot"),
    (["--memory", "ddr3", "--data-width", "48"], "data_width must be a power of two"),
    (["--memory", "sdr", "--reads", "0"], "--reads and --conflict-reads must be at least 1"),
])
def test_bad_input_is_one_line_and_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
