"""The FuseSoC core of a variant folder (hwgen/gateware/fusesoc.py), checked by fusesoc itself:
it lists the core, shows its targets and sets up both targets' builds."""

import subprocess
import sys
from pathlib import Path

import pytest

from hwgen.config import VariantConfig
from hwgen.gateware.fusesoc import core_name, core_text

FUSESOC = Path(sys.executable).parent / "fusesoc"
NAME = "4x4_bias_requant_relu_window"
CONFIG = VariantConfig(rows=4, cols=4, port_bytes=4, window_unit=True)


@pytest.fixture
def cores_root(tmp_path):
    if not FUSESOC.is_file():
        pytest.fail(f"no fusesoc beside {sys.executable}; run 'make setup'")
    folder = tmp_path / "lib" / NAME
    folder.mkdir(parents=True)
    (folder / "hwgen_accel.v").write_text("module hwgen_accel(input clk); endmodule\n")
    (folder / f"{NAME}.core").write_text(
        core_text(NAME, CONFIG, "hwgen_accel.v", "ab" * 32, "hwgen_accel"))
    return tmp_path / "lib"


def fusesoc(cores_root: Path, *args: str) -> str:
    done = subprocess.run([str(FUSESOC), "--cores-root", str(cores_root), *args],
                          capture_output=True, text=True, cwd=cores_root.parent, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_fusesoc_lists_and_shows_the_core(cores_root):
    vlnv = core_name(NAME)
    assert vlnv == f"hwgen:variants:{NAME}:0.1.0"
    assert vlnv in fusesoc(cores_root, "core", "list")
    shown = fusesoc(cores_root, "core", "show", vlnv)
    assert "default" in shown and "synth" in shown
    assert "4x4, epilogue bias,requant,relu, window unit, 4-byte port" in shown


@pytest.mark.parametrize(("target", "tool", "expect"), [
    ("default", "verilator", "-DHWGEN_ROWS=4"),
    ("synth", "yosys", "synth_ecp5"),
])
def test_fusesoc_sets_up_each_target(cores_root, tmp_path, target, tool, expect):
    build = tmp_path / "build"
    fusesoc(cores_root, "run", "--setup", "--build-root", str(build), "--target", target,
            "--tool", tool, core_name(NAME))
    work = build / f"hwgen_variants_{NAME}_0.1.0" / f"{target}-{tool}"
    assert (work / "src" / f"hwgen_variants_{NAME}_0.1.0" / "hwgen_accel.v").is_file()
    text = "".join(p.read_text() for p in work.iterdir() if p.is_file())
    assert "hwgen_accel" in text and expect in text
