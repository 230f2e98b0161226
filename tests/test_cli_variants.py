"""``hwgen variants build`` and ``hwgen variants list`` at the command line: the table, its
JSON, and one error line (exit 2) for every bad spec or folder. Synthesis is faked
(tests/synth/test_flow.py runs the real tools)."""

import json

import pytest

from hwgen.cli import main
from tests.helpers.cli import one_error_line
from tests.helpers.fake_synthesis import FakeTools


@pytest.fixture
def tools(monkeypatch, tmp_path):
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(tmp_path / "build"))
    return FakeTools(monkeypatch)


def test_build_then_list_prints_a_table_and_json(tools, tmp_path, capsys):
    out = tmp_path / "lib"
    assert main(["variants", "build", "-o", str(out), "1x1:none", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "variant 1x1_none: 1440 LUT, 900 FF, 4 DSP, 6 BRAM -> LFE5U-25F, Fmax 87.5 MHz" \
        in printed
    assert main(["variants", "build", "-o", str(out), "2x2:none", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["variants", "list", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "array", "epilogue", "window", "LUT", "FF", "DSP", "BRAM",
                                "part", "Fmax", "MHz", "reconfig", "cycles", "ms", "verilog"]
    assert [line.split()[:4] for line in lines[1:]] == [["1x1_none", "1x1", "none", "no"],
                                                        ["2x2_none", "2x2", "none", "no"]]
    assert "LFE5U-25F" in lines[1] and "87.5" in lines[1] and "74.6" in lines[1]
    assert main(["variants", "list", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["variants"]
    assert rows[0]["reconfig_cycles"] == 7461173 and rows[0]["fmax_mhz"] == 87.5
    assert len(rows[0]["verilog_sha256"]) == 64
    assert main(["variants", "build", "-o", str(out), "1x1:none", "--quiet", "--json"]) == 0
    built = json.loads(capsys.readouterr().out)["built"]
    assert [r["name"] for r in built] == ["1x1_none"] and tools.calls["yosys"] == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["4x4:bogus"], "unknown epilogue stage 'bogus'"),
    (["4x8+window"], "the window unit needs port_bytes == rows == cols"),
    ([], "no variant spec given"),
    (["--spec", "nowhere.json"], "cannot read --spec nowhere.json"),
    (["1x1:none", "--pnr-timeout", "0"], "argument --pnr-timeout: expected a positive number"),
])
def test_a_bad_build_is_one_line_and_exit_2(tools, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) if "--pnr-timeout" in argv else _no_exit() as exc:
        status = main(["variants", "build", "-o", str(tmp_path / "lib"), *argv])
    code = exc.value.code if exc is not None else status
    assert code == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "lib").exists() and tools.calls["yosys"] == 0


class _no_exit:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_a_variant_yosys_fails_on_is_built_without_figures_and_exit_1(monkeypatch, tmp_path,
                                                                        capsys):
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(tmp_path / "build"))
    FakeTools(monkeypatch, yosys_error="yosys failed (exit 1): too large")
    out = tmp_path / "lib"
    assert main(["variants", "build", "-o", str(out), "1x1:none", "--quiet"]) == 1
    captured = capsys.readouterr()
    assert captured.err == ("hwgen: warning: variant 1x1_none has no synthesis figures: yosys "
                            "failed (exit 1): too large\n")
    assert "variant 1x1_none: no synthesis figures" in captured.out
    assert main(["variants", "list", str(out)]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:9] == ["1x1_none", "1x1", "none", "no", "-", "-", "-", "-", "-"]


def test_list_of_a_folder_that_is_no_library_is_one_line(tmp_path, capsys):
    assert main(["variants", "list", str(tmp_path)]) == 2
    assert "is not a variant library (no library.json)" in one_error_line(capsys)
