"""Boards without a board: the PLL settings, the design digest, the system on chip's Verilog,
the top's constraints from amaranth-boards, the board folder's checks, and the host link's
errors (a port that is not there, a device that does not answer, one that is not hwgen's).

The simulated board itself (a model through the UART) is tests/sim/test_board_sim.py."""

from __future__ import annotations

import json
import re
import socket
import threading
from fractions import Fraction

import pytest

from hwgen.board import boards, pll, soc
from hwgen.board.design import BoardDesign
from hwgen.board.link import LinkError, UartBone
from hwgen.board.runtime import BoardMismatch, BoardRunner, open_board_folder
from hwgen.cli import main
from hwgen.specs import parse_spec

ULX3S = boards.board("ulx3s-85f")
SMALL = parse_spec("2x2:bias,requant,relu+port4").config


def _design(config=SMALL, clock_hz=50_000_000, baud=3_000_000) -> BoardDesign:
    return BoardDesign(config, ULX3S, clock_hz, baud)


# -- PLL ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mhz", [25, 40, 50, 60, 62.5, 75, 100])
def test_pll_makes_the_clock_exactly_within_the_data_sheets_ranges(mhz):
    out = round(mhz * 1e6)
    s = pll.solve(25_000_000, out)
    assert s.output_hz == out
    assert Fraction(25_000_000, s.clki_div) * s.clkfb_div == out  # feedback from CLKOP
    assert pll.VCO_RANGE[0] <= s.vco_hz <= pll.VCO_RANGE[1]
    assert pll.PFD_RANGE[0] <= Fraction(25_000_000, s.clki_div) <= pll.PFD_RANGE[1]
    p = s.parameters()
    assert p["p_CLKOP_DIV"] * out == s.vco_hz and p["p_FEEDBK_PATH"] == "CLKOP"


def test_pll_refuses_what_it_cannot_make():
    with pytest.raises(ValueError, match="nearest is 33.3333 MHz"):
        pll.solve(25_000_000, 33_333_000)
    with pytest.raises(ValueError, match="output must be"):
        pll.solve(25_000_000, 500_000_000)
    with pytest.raises(ValueError, match="input must be"):
        pll.solve(1_000_000, 50_000_000)


# -- boards and designs ------------------------------------------------------------------

def test_an_unknown_board_names_the_known_ones():
    with pytest.raises(ValueError, match="ulx3s-85f"):
        boards.board("arty-a7")


def test_the_digest_covers_variant_clock_and_baud():
    base = _design()
    assert base.digest() == _design().digest()
    others = {_design(parse_spec("4x4:bias,requant,relu+port4").config).digest(),
              _design(clock_hz=40_000_000).digest(), _design(baud=1_000_000).digest()}
    assert base.digest() not in others and len(others) == 3
    words = base.ident_words()
    assert len(words) == 8 and "".join(f"{w:08x}" for w in words) == base.digest()


def test_a_baud_rate_the_clock_cannot_sample_is_refused():
    with pytest.raises(ValueError, match="baud rate"):
        _design(baud=10_000_000)


# -- gateware ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def board_files():
    from hwgen.board.build import gateware_files

    return gateware_files(_design())


def test_the_soc_has_the_board_pins_and_the_sdram_data_both_ways(board_files):
    files, spec = board_files
    text = files[f"{soc.MODULE}.v"]
    header = re.search(rf"module {soc.MODULE}\s*\(([^;]*)\);", text)[1]
    for port in ("sys_clk", "sys_rst", "serial_rx", "serial_tx", "sdram_a", "sdram_ba"):
        assert re.search(rf"\b{port}\b", header), port
    assert re.search(r"inout\s+wire\s+\[15:0\]\s+sdram_dq", header)
    assert "module hwgen_accel" in files["hwgen_accel.v"]
    assert "module hwgen_mem_adapter" in files["hwgen_mem_adapter.v"]
    assert spec["regions"]["dram"] == [soc.DRAM_BASE, 32 << 20]
    assert {"sdram_dfii_control", "sdram_dfii_pi0_command"} <= set(spec["csr_registers"])
    names = [step["name"] for step in spec["dram"]["init"]]
    assert names[0] == "Bring CKE high" and any("Load Mode Register" in n for n in names)


def test_the_top_takes_its_pins_from_amaranth_boards(board_files):
    from hwgen.board.top import BoardTop

    files, _ = board_files
    platform = ULX3S.amaranth_platform()
    for name, text in files.items():
        platform.add_file(name, text)
    plan = platform.build(BoardTop(_design(), 25_000_000), name="top", do_build=False)
    lpf = plan.files["top.lpf"]
    for site in ("G2", "M1", "L4", "F19", "J16", "M20"):  # clk25, uart rx/tx, sdram clk/dq/a
        assert f'SITE "{site}"' in lpf, site
    assert 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ;' in lpf  # nextpnr derives the PLL's
    for name in files:
        assert f"read_verilog  {name}" in plan.files["top.ys"]


# -- the DDR3 board ------------------------------------------------------------------------

ECPIX5 = boards.board("ecpix5-85f")
WIDE = parse_spec("4x4:bias,requant,relu+port16").config


def test_a_ddr3_board_is_the_ecp5_phy_at_1_2_and_takes_a_16_byte_port():
    design = BoardDesign(WIDE, ECPIX5, 50_000_000, 6_000_000)
    platform = design.platform
    assert (platform.memory, platform.rate, platform.module) == ("ddr3", "1:2", "MT41K256M16")
    assert platform.port_figures(16).sequential > 2.0  # a BL8 burst is 2 cycles at 1:2
    with pytest.raises(ValueError, match=r"4-byte port would go through LiteDRAM's "
                                         r"up-converter.*\+port16"):
        BoardDesign(SMALL, ECPIX5, 50_000_000, 6_000_000)


def test_a_variant_the_ddr3_board_cannot_serve_is_refused_before_any_tool(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["build", "--board", "ecpix5-85f", "--spec", "4x4:bias,requant,relu+port4",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "+port16" in err[0]
    # A clock whose port figures were never measured: refused before yosys, too.
    assert main(["build", "--board", "ecpix5-85f", "--spec", "4x4:bias,requant,relu+port16",
                 "--clock-mhz", "60", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no characterized port figures" in err[0]
    assert not out.exists() and not (tmp_path / "b.work").exists()


@pytest.fixture(scope="module")
def ddr3_files():
    from hwgen.board.build import gateware_files

    return gateware_files(BoardDesign(WIDE, ECPIX5, 50_000_000, 6_000_000))


def test_the_ddr3_soc_makes_its_clocks_and_levels_its_reads(ddr3_files):
    files, spec = ddr3_files
    text = files[f"{soc.MODULE}.v"]
    header = re.search(rf"module {soc.MODULE}\s*\(([^;]*)\);", text)[1]
    # The PLL's double-rate clock and the oscillator in; the system clock is made inside.
    for port in ("sys2x_clk", "init_clk", "sys_rst", "sdram_clk_p", "sdram_odt"):
        assert re.search(rf"\b{port}\b", header), port
    assert not re.search(r"\bsys_clk\b", header)
    assert re.search(r"inout\s+wire\s+\[1:0\]\s+sdram_dqs_p", header)
    for primitive in ("ECLKSYNCB", "CLKDIVF", "DDRDLLA", "DQSBUFM"):
        assert primitive in text, primitive
    assert spec["ports"] == {"clk2x": "sys2x_clk", "init_clk": "init_clk", "rst": "sys_rst",
                             "tx": "serial_tx", "rx": "serial_rx"}
    assert spec["regions"]["dram"] == [soc.DRAM_BASE, 512 << 20]  # MT41K256M16: 4 Gbit
    assert spec["dram"]["nphases"] == 2 and spec["dram"]["rate"] == "1:2"
    assert spec["dram"]["read_leveling"] == {"modules": 2, "bitslips": 4, "delays": 8}
    assert {"ddrphy_rdly_dq_inc", "ddrphy_burstdet_seen"} <= set(spec["csr_registers"])


def test_the_ddr3_top_takes_its_pins_from_amaranth_boards(ddr3_files):
    from hwgen.board.top import BoardTop

    files, _ = ddr3_files
    platform = ECPIX5.amaranth_platform()
    for name, text in files.items():
        platform.add_file(name, text)
    design = BoardDesign(WIDE, ECPIX5, 50_000_000, 6_000_000)
    top = BoardTop(design, 100_000_000)
    assert top.pll.output_hz == 100_000_000  # twice the system clock
    lpf = platform.build(top, name="top", do_build=False).files["top.lpf"]
    # clk100, uart rx/tx, DDR3 clock P, a[0], dq[0], dqs[0] P, odt
    for site in ("K23", "R26", "R24", "H3", "T5", "T4", "V4", "P3"):
        assert f'SITE "{site}"' in lpf, site
    assert "SSTL15D_I" in lpf and "SSTL15_I" in lpf


def test_a_simulated_ddr3_board_has_no_leveling_to_do_and_the_boards_register_map(ddr3_files):
    from hwgen.board.build import gateware_files

    _, spec = gateware_files(BoardDesign(WIDE, ECPIX5, 50_000_000, 6_000_000), sim=True)
    assert spec["dram"]["read_leveling"] is None and spec["dram"]["nphases"] == 2
    assert spec["ports"]["clk"] == "sys_clk"
    # The host reads the board build's map (board.json): DFII must sit at the same
    # addresses in the simulation build, which has no PHY registers.
    board_map = ddr3_files[1]["csr_registers"]
    assert spec["csr_registers"] == {k: v for k, v in board_map.items()
                                     if not k.startswith("ddrphy_")}


# -- board folders and the host link -------------------------------------------------------

@pytest.fixture(scope="module")
def sim_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("board") / "b"
    assert main(["build", "--board", "ulx3s-85f", "--spec", "2x2:bias,requant,relu+port4",
                 "--sim-only", "-o", str(out)]) == 0
    return out


def test_a_sim_only_folder_is_a_variant_folder_too(sim_folder):
    from hwgen.gateware.folder import open_variant

    folder = open_board_folder(sim_folder)
    assert folder.descriptor["bitstream"] is None and folder.digest == _design().digest()
    variant = open_variant(sim_folder)
    assert variant.config == SMALL
    assert variant.descriptor["board"] == {"name": "ulx3s-85f", "digest": folder.digest,
                                           "bitstream": None}
    assert folder.platform.memory == "sdr" and folder.platform.clock_hz == 50_000_000


def _with_bitstream(sim_folder, tmp_path, data: bytes):
    import hashlib
    import shutil

    copy = tmp_path / "withbit"
    shutil.copytree(sim_folder, copy)
    desc = json.loads((copy / "board.json").read_text())
    desc["bitstream"] = {"file": "x.bit", "sha256": hashlib.sha256(data).hexdigest(),
                         "bytes": len(data)}
    (copy / "board.json").write_text(json.dumps(desc))
    (copy / "x.bit").write_bytes(data)
    return copy


def test_a_bitstream_that_is_not_the_descriptors_is_refused(sim_folder, tmp_path, capsys):
    copy = _with_bitstream(sim_folder, tmp_path, b"\xff" * 64)
    open_board_folder(copy)  # matches
    (copy / "x.bit").write_bytes(b"\xff" * 63 + b"\x00")
    with pytest.raises(BoardMismatch, match="is not the one board.json records"):
        open_board_folder(copy)
    assert main(["run", "examples/qdq_cnn.onnx", "--variant", str(copy),
                 "--board-port", "/dev/null"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not the one board.json records" in err[0]


def test_a_damaged_descriptor_is_refused(sim_folder, tmp_path):
    import shutil

    copy = tmp_path / "damaged"
    shutil.copytree(sim_folder, copy)
    (copy / "board.json").write_text("{")
    with pytest.raises(ValueError, match="damaged"):
        open_board_folder(copy)


def test_an_absent_board_is_one_clear_line(sim_folder, capsys):
    assert main(["run", "examples/qdq_cnn.onnx", "--variant", str(sim_folder),
                 "--board-port", "/dev/ttyUSB_no_such_board"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot open the board's serial port" in err[0]


class _Device:
    """A TCP peer standing for a serial device: silent, or answering every read with
    ``word`` (a device that is not an hwgen board)."""

    def __init__(self, word: int | None):
        self.word = word
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"socket://127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with self.server:
            conn, _ = self.server.accept()
        with conn:
            while True:
                head = conn.recv(6)
                if len(head) < 6:
                    return
                if self.word is not None and head[0] == 0x02:
                    conn.sendall(self.word.to_bytes(4, "big") * head[1])


def test_a_device_that_does_not_answer_times_out(sim_folder):
    device = _Device(None)
    with pytest.raises(LinkError, match=r"sent 0 of 36 bytes within 0.3 s"):
        with BoardRunner(open_board_folder(sim_folder), device.url, timeout=0.3):
            pass


def test_a_device_that_is_not_an_hwgen_board_is_refused(sim_folder):
    device = _Device(0x12345678)
    with pytest.raises(BoardMismatch, match="not an hwgen board .*0x12345678"):
        with BoardRunner(open_board_folder(sim_folder), device.url, timeout=2):
            pass


def test_link_bursts_are_at_most_255_words():
    class Recorder:
        def __init__(self):
            self.data = b""

        def write(self, data):
            self.data += data

    link = UartBone("unused", 3_000_000)
    link._serial = Recorder()
    link.write(0x4000_0000, list(range(300)))
    sent = link._serial.data
    assert sent[:6] == bytes([0x01, 255]) + (0x1000_0000).to_bytes(4, "big")
    assert sent[6:10] == (0).to_bytes(4, "big") and sent[10:14] == (1).to_bytes(4, "big")
    second = 6 + 4 * 255
    assert sent[second:second + 6] == bytes([0x01, 45]) + (0x1000_0000 + 255).to_bytes(4, "big")
    assert len(sent) == 2 * 6 + 4 * 300


def test_a_workload_on_a_library_is_not_for_a_board(sim_folder, capsys):
    assert main(["run", "--variants", str(sim_folder), "--workload", "w.json",
                 "--board-port", "sim"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--board-port runs one model" in err[0]


def test_a_variant_folder_that_is_not_a_board_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["generate", "--rows", "2", "--cols", "2", "--port-bytes", "4",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", "examples/qdq_cnn.onnx", "--variant", str(out),
                 "--board-port", "sim"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a board folder (no board.json)" in err[0]


def test_no_wide_luts_reaches_yosys(tmp_path):
    out = tmp_path / "b"
    assert main(["build", "--board", "ulx3s-85f", "--spec", "2x2:bias,requant,relu+port4",
                 "--sim-only", "--no-wide-luts", "-o", str(out)]) == 0
    assert "synth_ecp5 -nowidelut -top top" in (out / "gateware" / "top.ys").read_text()
