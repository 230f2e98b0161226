"""``hwgen generate --memory``: a variant folder for a board's memory, its descriptor's
platform, and the refusals (one line, exit 2)."""

import json
from pathlib import Path

import pytest

from hwgen.cli import main
from hwgen.gateware.folder import open_variant
from hwgen.platform import PlatformConfig

DDR3 = ["--rows", "4", "--cols", "4", "--port-bytes", "16", "--mem-addr-bits", "21"]


def test_a_ddr3_folder_holds_the_memory_system_and_records_its_platform(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["generate", *DDR3, "--memory", "ddr3", "--refresh", "hot", "-o",
                 str(out)]) == 0
    assert "on ddr3 MT41K128M16-800, hot refresh (platform " in capsys.readouterr().out
    variant = open_variant(out)
    assert variant.platform == PlatformConfig(memory="ddr3", refresh="hot")
    assert variant.descriptor["platform_key"] == variant.platform.key()
    assert "module hwgen_dram(" in (out / "hwgen_dram.v").read_text()
    assert "module hwgen_mem_adapter(" in (out / "hwgen_mem_adapter.v").read_text()
    spec = json.loads((out / "dram.json").read_text())
    assert spec["key"] == variant.platform.key() and spec["data_width"] == 128
    # regenerating from the descriptor keeps the platform
    again = tmp_path / "w"
    assert main(["generate", "--config", str(out / "variant.json"), "-o", str(again)]) == 0
    assert open_variant(again).platform == variant.platform


def test_a_ddr3_speedgrade_is_chosen_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["generate", *DDR3, "--memory", "ddr3", "--speedgrade", "1600", "-o",
                 str(out)]) == 0
    assert "ddr3 MT41K128M16-1600" in capsys.readouterr().out
    assert open_variant(out).platform == PlatformConfig(memory="ddr3", speedgrade="1600")


def test_the_ideal_memory_is_the_default_and_recorded(tmp_path):
    out = tmp_path / "v"
    assert main(["generate", "--rows", "4", "--cols", "4", "-o", str(out)]) == 0
    variant = open_variant(out)
    assert variant.platform == PlatformConfig()
    assert not (out / "hwgen_dram.v").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--rows", "4", "--cols", "4", "--port-bytes", "8", "--memory", "ddr3"],
     "with --port-bytes 16 or more"),
    ([*DDR3[:6], "--mem-addr-bits", "22", "--memory", "sdr"], "use --mem-addr-bits 21 or less"),
    ([*DDR3, "--refresh", "hot"], "add --memory sdr or --memory ddr3"),
    ([*DDR3, "--memory", "ddr3", "--dram-module", "MT48LC16M16"], "module must be one of"),
    ([*DDR3, "--memory", "sdr", "--speedgrade", "1600"], "speedgrade must be None for memory"),
    ([*DDR3, "--speedgrade", "1600"], "add --memory sdr or --memory ddr3"),
])
def test_a_variant_that_does_not_fit_the_memory_is_refused(argv, message, tmp_path, capsys):
    assert main(["generate", *argv, "-o", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "v").exists()


def test_an_edited_platform_is_refused(tmp_path):
    out = tmp_path / "v"
    assert main(["generate", *DDR3, "--memory", "ddr3", "-o", str(out)]) == 0
    descriptor = json.loads((out / "variant.json").read_text())
    descriptor["platform"]["refresh"] = "hot"
    (out / "variant.json").write_text(json.dumps(descriptor))
    with pytest.raises(ValueError, match="records platform key"):
        open_variant(out)


def test_compile_prices_on_the_folders_memory(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["generate", *DDR3, "--memory", "ddr3", "-o", str(out)]) == 0
    capsys.readouterr()
    model = Path(__file__).resolve().parents[1] / "examples" / "qdq_mlp_residual.onnx"
    assert main(["compile", str(model), "--variant", str(out), "-o",
                 str(tmp_path / "plan"), "--explain", "--cache", str(tmp_path / "cache")]) == 0
    assert ("candidates priced by the analytical model on ddr3 MT41K128M16-800, normal "
            "refresh") in capsys.readouterr().out
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["platform"]["memory"] == "ddr3"
