"""The ``hwgen`` command line: generate, gemm (on Verilator), doctor, and its errors."""

import json

import pytest

from hwgen.cli import main
from hwgen.config import VariantConfig


def test_generate_writes_verilog_descriptor_and_isa(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["generate", "--rows", "2", "--cols", "4", "--port-bytes", "8",
                 "--epilogue", "bias,relu", "-o", str(out)]) == 0
    config, descriptor = VariantConfig.read_descriptor(out / "variant.json")
    assert (config.rows, config.cols, config.epilogue) == (2, 4, ("bias", "relu"))
    assert "module hwgen_accel" in (out / "hwgen_accel.v").read_text()
    assert (out / "isa.md").read_text().startswith("# hwgen microcode ISA")
    assert descriptor["gateware_digest"]


def test_generate_from_a_config_file(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"rows": 4, "cols": 4, "epilogue": ["requant"]}))
    assert main(["generate", "--config", str(cfg), "-o", str(tmp_path / "v")]) == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["generate", "--rows", "0", "-o", "x"], "rows must be a power of two"),
    (["gemm", "--variant", "/nonexistent", "--m", "1", "--k", "1", "--n", "1"],
     "no variant descriptor"),
])
def test_user_errors_are_one_line_with_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwgen: error:") and message in err
    assert "Traceback" not in err


def test_unknown_stage_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--epilogue", "bias,gelu", "-o", "x"])
    assert exc.value.code == 2
    assert "unknown epilogue stage 'gelu'" in capsys.readouterr().err


def test_doctor_reports_every_tool(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for tool in ("Python", "Amaranth", "cocotb", "Verilator"):
        assert tool in out


@pytest.mark.slow
def test_gemm_json_has_the_promised_keys(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["generate", "--rows", "4", "--cols", "4", "--epilogue",
                 "bias,requant,relu,clamp,residual", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["gemm", "--variant", str(out), "--m", "7", "--k", "13", "--n", "5",
                 "--epilogue", "bias,requant,relu", "--unfused", "--seed", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("ok", "cycles", "ideal_cycles", "utilization", "bytes_read", "bytes_written",
                "stall_cycles", "wall_seconds", "sim_cycles_per_s"):
        assert key in report
    assert report["ok"] is True and report["ideal_cycles"] == -(-7 * 13 * 5 // 16)
    assert report["utilization"] == pytest.approx(report["ideal_cycles"] / report["cycles"],
                                                  abs=1e-4)


@pytest.mark.slow
def test_gemm_refuses_a_stage_the_variant_lacks(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["generate", "--rows", "4", "--cols", "4", "--epilogue", "relu",
                 "-o", str(out)]) == 0
    assert main(["gemm", "--variant", str(out), "--m", "4", "--k", "4", "--n", "4",
                 "--epilogue", "requant"]) == 2
    assert "requant" in capsys.readouterr().err
