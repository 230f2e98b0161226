"""The build cache: one build per variant and source digest, reused without Amaranth or
Verilator, rebuilt when the sources change, and never built twice at once."""

import concurrent.futures
import json
import multiprocessing
import os
import re
from pathlib import Path

import pytest

import hwgen
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from sim import build as sim_build
from sim.toolchain import ToolchainError
from tests.helpers.copy_engine import SOURCES, copy_engine_verilog

CONFIG = VariantConfig(port_latency=2, mem_addr_bits=10, imem_depth=16)
COUNTER_ENV = "HWGEN_TEST_VERILOG_CALLS"


def counting_verilog(config: VariantConfig) -> str:
    """The copy engine, recording each call (the observable of "Amaranth was invoked")."""
    with open(os.environ[COUNTER_ENV], "a") as f:
        f.write(f"{os.getpid()}\n")
    return copy_engine_verilog(config)


def calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def build(root: Path) -> sim_build.BuildInfo:
    return sim_build.build_variant(CONFIG, verilog=counting_verilog, sources=SOURCES, root=root)


def folder(root: Path) -> Path:
    digest = sim_build.build_digest(sim_build.source_digest(counting_verilog, SOURCES),
                                    harness="cxx")
    return root / sim_build.folder_name(CONFIG, PlatformConfig(), digest, "cxx")


def fake_old_verilator(root: Path) -> Path:
    exe = root / "bin" / "verilator"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho 'Verilator 5.006 2022-12-01'\n")
    exe.chmod(0o755)
    return root


def test_the_digest_follows_the_sources_and_the_function(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    first = sim_build.source_digest(counting_verilog, [a])
    assert sim_build.source_digest(counting_verilog, [a]) == first
    a.write_text("x = 2\n")
    assert sim_build.source_digest(counting_verilog, [a]) != first
    assert sim_build.source_digest(copy_engine_verilog, [a]) != sim_build.source_digest(
        counting_verilog, [a])


def test_the_default_digest_covers_the_gateware_and_not_the_cli():
    names = {p.relative_to(Path(hwgen.__file__).parent).as_posix()
             for p in sim_build.gateware_files()}
    assert {"config.py", "gateware/ports.py", "isa.py", "gateware/epilogue.py"} <= names
    assert not any(name.startswith("cli") for name in names)


def test_the_templates_render_with_every_variable_defined():
    top = sim_build.render_top(CONFIG)
    assert "module hwgen_tb_top" in top and "hwgen_accel accel" in top
    assert "reg [PortBits-1:0] ext_mem [0:MemWords-1];" in top
    # no initial block touches the memory (it can be millions of bits); the testbench loads
    # a job's words through the bulk paths
    initials = re.findall(r"initial begin(.*?)\n  end", top, re.DOTALL)
    assert initials and not any("ext_mem" in block for block in initials)
    assert "$readmemh(load_file, ext_mem)" in top and "$writememh(dump_file, ext_mem" in top
    # the C++ driver's top: the testbench's signals are its ports, the clock one of them
    cxx = sim_build.render_top(CONFIG, harness="cxx")
    header = re.search(r"module hwgen_tb_top \((.*?)\);", cxx, re.DOTALL)[1]
    ports = set(re.findall(r"(\w+),?\n", header))
    assert ports == set(sim_build.public_handles()) - {"ext_mem", "rst"} | {"rst_in"}
    assert "always #" not in cxx and "$readmemh(load_file, ext_mem)" in cxx
    with pytest.raises(ValueError, match="ideal memory only"):
        sim_build.render_top(CONFIG, harness="cxx", dram={"module": "x"})


@pytest.mark.parametrize("dram", [False, True])
def test_nothing_inside_the_accelerator_is_visible_to_the_testbench(dram):
    """The testbench reaches the design only through the bus: the control file makes public
    only signals of hwgen_tb_top (the host's script, the memory's bulk paths), and the
    harness looks up no other handle."""
    vlt = sim_build.render_vlt(CONFIG, dram=dram)
    rules = re.findall(r'^public\w*\s+-module\s+"([^"]+)"\s+-var\s+"([^"]+)"', vlt, re.M)
    assert rules and {module for module, _ in rules} == {"hwgen_tb_top"}
    assert {var for _, var in rules} == set(sim_build.public_handles(dram=dram))
    assert not re.search(r"^public", vlt.replace("public_flat_rw -module \"hwgen_tb_top\"", "")
                         .replace("public_flat_rd -module \"hwgen_tb_top\"", ""), re.M)
    harness = (Path(sim_build.__file__).parent / "tb" / "harness.py").read_text()
    assert "dut.accel" not in harness and ".imem[" not in harness
    # the C++ driver's build makes nothing public: it drives the top's ports
    assert not re.search(r"^public", sim_build.render_vlt(CONFIG, harness="cxx"), re.M)
    driver = (sim_build.TEMPLATES / "sim_driver.cpp").read_text()
    assert "rootp" not in driver and "__DOT__" not in driver


def test_an_old_verilator_stops_the_build_before_amaranth_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(COUNTER_ENV, str(tmp_path / "calls"))
    monkeypatch.setenv("VERILATOR_ROOT", str(fake_old_verilator(tmp_path / "old")))
    with pytest.raises(ToolchainError, match=r"5\.006 .* too old.*make setup"):
        build(tmp_path / "cache")
    assert calls(tmp_path / "calls") == 0


def _build_in_child(root: str) -> bool:
    return build(Path(root)).cached


@pytest.mark.slow
def test_one_build_serves_concurrent_and_later_callers(tmp_path, monkeypatch):
    counter = tmp_path / "calls"
    monkeypatch.setenv(COUNTER_ENV, str(counter))
    root = tmp_path / "cache"
    # The remains of an interrupted build (no build.json): they must be replaced.
    folder(root).mkdir(parents=True)
    (folder(root) / "stale.txt").write_text("half a build\n")

    # Two processes race for the same variant: the lock lets one build, the other waits.
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        cached = sorted(pool.map(_build_in_child, [str(root)] * 2))
    assert cached == [False, True]
    assert calls(counter) == 1
    assert not (folder(root) / "stale.txt").exists()
    marker = json.loads((folder(root) / sim_build.MARKER).read_text())
    assert marker["key"] == CONFIG.key() and marker["build_seconds"] > 0

    # A later call finds it without Amaranth or Verilator: even a broken toolchain is fine.
    monkeypatch.setenv("VERILATOR_ROOT", str(fake_old_verilator(tmp_path / "old")))
    info = build(root)
    assert info.cached and calls(counter) == 1
    assert info.executable.is_file() and info.directory == folder(root)
    assert info.build_seconds == marker["build_seconds"]


def test_verilog_without_the_contracted_interface_is_refused_before_verilator():
    text = copy_engine_verilog(CONFIG)
    sim_build.check_interface(text, CONFIG)
    with pytest.raises(sim_build.BuildError, match=r"no module hwgen_accel: convert"):
        sim_build.check_interface(text.replace("module hwgen_accel(", "module other("), CONFIG)
    with pytest.raises(sim_build.BuildError, match=r"lacks the port\(s\) bus__ack"):
        sim_build.check_interface(text.replace("bus__ack\n,", "").replace(
            "bus__ack,", ""), CONFIG)


def test_a_build_folder_with_a_space_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(COUNTER_ENV, str(tmp_path / "calls"))
    with pytest.raises(sim_build.BuildError, match=r"has a space.*set HWGEN_BUILD_DIR"):
        build(tmp_path / "my builds")
    assert calls(tmp_path / "calls") == 0
