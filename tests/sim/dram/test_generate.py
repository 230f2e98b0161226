"""The LiteDRAM memory's Verilog (sim/dram/generate.py): ports, layout, determinism."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hwgen.platform import PlatformConfig
from sim.dram.generate import MODULE, PORT_SIGNALS, SPEC_FILE, VERILOG_FILE, generate, write

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ddr3():
    return generate(PlatformConfig(memory="ddr3"))


def test_the_top_has_the_named_ports_and_nothing_else(ddr3):
    header = ddr3.verilog[ddr3.verilog.index(f"module {MODULE}("):ddr3.verilog.index(");")]
    ports = {line.split()[-1].rstrip(",") for line in header.splitlines()[1:]}
    assert ports == set(PORT_SIGNALS.values())
    assert "input [23:0] port_cmd_addr" in header
    assert "input [127:0] port_wdata_data" in header and "input [15:0] port_wdata_we" in header
    assert "output [127:0] port_rdata_data" in header


def test_the_ddr3_spec_records_the_address_layout_and_timings(ddr3):
    spec = ddr3.spec
    assert (spec["address_width"], spec["data_width"]) == (24, 128)
    # MT41K128M16: 1024 columns (8 a 128-bit word at 1:4, burst 2), 8 banks, 16384 rows.
    assert spec["address_layout"] == {"column": [0, 7], "bank": [7, 3], "row": [10, 14]}
    assert spec["geometry"]["words_per_row"] == 128
    # 64 ms / 8192 refreshes = 7.8125 us = 782 cycles at 100 MHz; tRFC 160 ns = 16 cycles at
    # the clock's own grade (DDR3-800).
    assert spec["timing_cycles"]["tREFI"] == 782 and spec["timing_cycles"]["tRFC"] == 16
    assert spec["platform"] == PlatformConfig(memory="ddr3").to_dict()
    assert spec["signals"] == PORT_SIGNALS


def test_the_1600_grade_at_100_mhz_doubles_trfc():
    spec = generate(PlatformConfig(memory="ddr3", speedgrade="1600")).spec
    assert spec["timing_cycles"]["tRFC"] == 32


def test_hot_refresh_halves_trefi_in_the_verilog(ddr3):
    hot = generate(PlatformConfig(memory="ddr3", refresh="hot"))
    assert hot.spec["timing_cycles"]["tREFI"] == 391
    assert hot.verilog != ddr3.verilog


def test_sdr_has_a_16_bit_port_on_a_1_to_1_phy():
    spec = generate(PlatformConfig(memory="sdr")).spec
    assert (spec["data_width"], spec["phy"]["nphases"], spec["phy"]["memtype"]) == (16, 1, "SDR")
    assert spec["address_layout"] == {"column": [0, 9], "bank": [9, 2], "row": [11, 13]}


def test_the_timing_checker_is_an_option(ddr3):
    checked = generate(PlatformConfig(memory="ddr3"), checker=True)
    assert checked.spec["checker"] and len(checked.verilog) > len(ddr3.verilog)
    assert "$display" in checked.verilog and "$display" not in ddr3.verilog


def test_the_ideal_memory_is_refused():
    with pytest.raises(ValueError, match="the ideal memory has no LiteDRAM controller"):
        generate(PlatformConfig())


def test_the_same_platform_gives_the_same_bytes_in_another_process(ddr3):
    # Another interpreter with another hash seed: set and dict order must not leak in.
    code = ("from hwgen.platform import PlatformConfig; from sim.dram.generate import generate;"
            "print(generate(PlatformConfig(memory='ddr3')).sha256)")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout.strip()
    assert out == ddr3.sha256


def test_write_puts_the_verilog_and_its_spec_in_a_folder(tmp_path, ddr3):
    folder = write(ddr3, tmp_path / "dram")
    text = (folder / VERILOG_FILE).read_text()
    spec = json.loads((folder / SPEC_FILE).read_text())
    assert spec["verilog_sha256"] == hashlib.sha256(text.encode()).hexdigest() == ddr3.sha256
    assert spec["key"] == PlatformConfig(memory="ddr3").key()
    assert sorted(p.name for p in folder.iterdir()) == sorted([SPEC_FILE, VERILOG_FILE])


@pytest.mark.parametrize(("memory", "layout"), [
    # 64-bit words on DDR3's 128-bit controller words: one more column bit.
    ("ddr3", {"column": [0, 8], "bank": [8, 3], "row": [11, 14]}),
    # 64-bit words on SDR's 16-bit ones: two column bits fewer.
    ("sdr", {"column": [0, 7], "bank": [7, 2], "row": [9, 13]}),
])
def test_a_port_of_another_width_gets_a_converter_and_its_address_layout(memory, layout):
    dram = generate(PlatformConfig(memory=memory), data_width=64)
    spec = dram.spec
    assert spec["data_width"] == 64 and spec["address_layout"] == layout
    assert spec["address_width"] == sum(layout["row"])
    header = dram.verilog[:dram.verilog.index(");")]
    assert "input [63:0] port_wdata_data" in header and "input [7:0] port_wdata_we" in header


@pytest.mark.parametrize("width", [48, 4, 1024, 64.0])
def test_a_bad_port_width_is_refused(width):
    with pytest.raises(ValueError, match="data_width must be a power of two from 8 to 512"):
        generate(PlatformConfig(memory="sdr"), data_width=width)


def test_litex_deprecation_shim_is_gone_after_a_generate(capsys):
    """LiteX's stand-in for stream_sim prints on any getattr (as skops does when it loads,
    walking sys.modules); after hwgen generates a memory it is not in sys.modules."""
    generate(PlatformConfig(memory="sdr"))
    capsys.readouterr()
    for module in list(sys.modules.values()):
        getattr(module, "no_such_attribute_anywhere", None)
    assert "Compat" not in capsys.readouterr().out
    assert not any(type(m).__name__ == "compat_stream_sim" for m in sys.modules.values())
