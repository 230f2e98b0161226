"""``hwgen generate --fit PART``: the variant's synthesis figures in its descriptor when it fits
the part, one error line (exit 2) and nothing written when it does not. Synthesis is faked
(tests/synth/test_flow.py runs the real tools)."""

import json

import pytest

from hwgen.cli import main
from tests.helpers.cli import one_error_line
from tests.helpers.fake_synthesis import CELLS, FakeTools

SMALL = ["--rows", "2", "--cols", "2", "--port-bytes", "2", "--epilogue", "bias,requant"]


@pytest.fixture
def build_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(tmp_path / "build"))


def test_a_variant_that_fits_gets_its_figures_and_its_routed_fmax(build_dir, monkeypatch,
                                                                   tmp_path, capsys):
    tools = FakeTools(monkeypatch, fmax=52.5)
    out = tmp_path / "v"
    assert main(["generate", *SMALL, "--fit", "LFE5U-25F", "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()[-1]
    assert printed.startswith("fits the LFE5U-25F: 1440 LUT, 900 FF, 4 DSP, 6 EBR")
    assert "Fmax 52.5 MHz on the LFE5U-85F" in printed and "seq.imem.0.6.DOB4" in printed
    synthesis = json.loads((out / "variant.json").read_text())["synthesis"]
    assert synthesis["fit"] == "LFE5U-25F" and synthesis["part"] == "LFE5U-25F"
    assert synthesis["fmax_mhz"] == 52.5 and synthesis["pnr"]["device"] == "85k"
    assert tools.calls == {"yosys": 1, "nextpnr": 1}
    # a second generate of the same Verilog takes the figures from the cache
    assert main(["generate", *SMALL, "--fit", "LFE5U-25F", "-o", str(out)]) == 0
    assert tools.calls == {"yosys": 1, "nextpnr": 1}


def test_a_variant_that_does_not_fit_is_refused_and_nothing_is_written(build_dir, monkeypatch,
                                                                       tmp_path, capsys):
    FakeTools(monkeypatch, cells={**CELLS, "MULT18X18D": 51})
    out = tmp_path / "v"
    assert main(["generate", *SMALL, "--fit", "LFE5U-25F", "-o", str(out)]) == 2
    line = one_error_line(capsys)
    assert "does not fit the LFE5U-25F (51 dsps > 28)" in line and "nothing was written" in line
    assert not out.exists()
    # the larger part holds it (and the synthesis is the cached one)
    assert main(["generate", *SMALL, "--fit", "LFE5U-45F", "-o", str(out)]) == 0
    synthesis = json.loads((out / "variant.json").read_text())["synthesis"]
    assert synthesis["fit"] == "LFE5U-45F" and synthesis["part"] == "LFE5U-45F"


def test_an_unknown_part_is_one_line_before_any_work(build_dir, monkeypatch, tmp_path, capsys):
    tools = FakeTools(monkeypatch)
    assert main(["generate", *SMALL, "--fit", "XC7A35T", "-o", str(tmp_path / "v")]) == 2
    assert "unknown ECP5 part 'XC7A35T'" in one_error_line(capsys)
    assert not tools.calls and not (tmp_path / "v").exists()


def test_a_yosys_failure_is_refused_with_its_error(build_dir, monkeypatch, tmp_path, capsys):
    FakeTools(monkeypatch, yosys_error="yosys failed (exit 1): ERROR: out of memory")
    assert main(["generate", *SMALL, "--fit", "LFE5U-85F", "-o", str(tmp_path / "v")]) == 2
    assert "cannot be synthesized (yosys failed (exit 1): ERROR: out of memory)" in \
        one_error_line(capsys)
    assert not (tmp_path / "v").exists()
