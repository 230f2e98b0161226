"""``sim.dram_interplay``: loads and stores sharing a DRAM port, measured on the accelerator.

The derivation of the figures is checked on cycles made from known figures; the measurement
runs on a 4x4 DDR3 variant (the build :mod:`tests.sim.test_sweep` shares): the analytical
model predicts every micro-benchmark within a few percent, and the figures it derives are
the ones :data:`hwgen.platform.PORT_FIGURES` records for that spacing.
"""

import pytest

from hwgen.cli import main as hwgen
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from sim import dram_interplay as interplay

FOLDER = ["--rows", "4", "--cols", "4", "--port-bytes", "16", "--mem-addr-bits", "21",
          "--epilogue", "bias,requant,relu,clamp,residual"]
V8 = VariantConfig(rows=8, cols=8, port_bytes=16, mem_addr_bits=21)
DDR3 = PlatformConfig(memory="ddr3")


def test_derive_gives_back_the_figures_the_cycles_were_made_from():
    f = DDR3.port_figures(16)
    n_turns = interplay.READ_WORDS // interplay.CHUNK
    wide = interplay.STORE_ROWS // 4 * V8.cols * 4 / 16
    narrow = interplay.STORE_ROWS * V8.cols / 16
    turn, word, same = 9.5, 1.25, 10.5
    cycles = {
        "read": 1000, "read_chain": 1000,
        "read_switch": round(1000 + 2.5 * n_turns), "read_activate": round(1000 + 5 * n_turns),
        "read_wide": round(1000 + wide * f.write + turn),
        "read_narrow": round(1000 + turn + narrow * (f.write + word)),
        "read_narrow_same": round(1000 + turn + narrow * (f.write + same)),
        "wide": 180,
    }
    got = interplay.derive(V8, f, cycles, settle_from=160)
    assert got["load_switch"] == pytest.approx(2.5)
    assert got["load_activate"] == pytest.approx(5)
    assert got["write_turn"] == pytest.approx(turn, abs=0.5)
    assert got["write_word"] == pytest.approx(word, abs=0.02)
    assert got["write_word_same"] == pytest.approx(same, abs=0.02)
    assert got["write_settle"] == 20
    # a 4x4 array packs four int8 rows a word: the spaced figures
    assert interplay.narrow_spacing(VariantConfig(rows=4, cols=4, port_bytes=16)) == 4
    assert "write_word_spaced" in interplay.derive(
        VariantConfig(rows=4, cols=4, port_bytes=16), f, cycles, settle_from=160)


def test_a_spacing_that_was_never_measured_is_refused():
    with pytest.raises(ValueError, match="measured at 2 and 4"):
        interplay.derive(VariantConfig(rows=16, cols=16, port_bytes=16), DDR3.port_figures(16),
                         {}, settle_from=0)


def test_an_ideal_folder_is_refused_with_one_line(tmp_path, capsys):
    folder = tmp_path / "ideal"
    assert hwgen(["generate", *FOLDER, "-o", str(folder)]) == 0
    capsys.readouterr()
    assert interplay.main([str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "ideal memory" in err and "--memory" in err


@pytest.mark.slow
def test_the_model_predicts_each_micro_benchmark_and_the_figures_still_hold(tmp_path):
    folder = tmp_path / "ddr3"
    assert hwgen(["generate", *FOLDER, "--memory", "ddr3", "-o", str(folder)]) == 0
    out = interplay.measure(folder)
    for name, cycles in out["cycles"].items():
        assert out["predicted"][name] == pytest.approx(cycles, rel=0.08), name
    f = DDR3.port_figures(16)
    got = out["figures"]
    assert got["load_switch"] == pytest.approx(f.load_switch, abs=0.5)
    assert got["load_activate"] == pytest.approx(f.load_activate, abs=0.5)
    assert got["write_word_spaced"] == pytest.approx(f.write_word_spaced, abs=0.5)
    assert got["write_word_same_spaced"] == pytest.approx(f.write_word_same_spaced, abs=1)
