"""Verilator's runtime objects are compiled once and reused by later builds; a damaged cached
object is compiled again, never linked."""

from pathlib import Path

import pytest

from hwgen.config import VariantConfig
from sim import build as sim_build
from sim.runtime_cache import CACHE_ENV, cache_root
from tests.helpers.copy_engine import build_copy_engine, copies_correctly

CFG = VariantConfig(port_latency=2, mem_addr_bits=10, imem_depth=16)


def compiled_runtime(build: sim_build.BuildInfo) -> list[str]:
    """The runtime sources (``verilated*.cpp``) the build's make compiled."""
    log = (build.directory / "build.log").read_text()
    return sorted(Path(word).name for line in log.splitlines() if " -c " in line
                  for word in line.split() if word.endswith(".cpp")
                  and Path(word).name.startswith("verilated"))


def test_the_cache_is_where_the_environment_says():
    assert cache_root({CACHE_ENV: ""}) is None
    assert cache_root({CACHE_ENV: "/x/y"}) == Path("/x/y")
    assert cache_root({"XDG_CACHE_HOME": "/c"}) == Path("/c/hwgen/verilator-runtime")


@pytest.mark.slow
def test_a_second_build_links_the_cached_runtime_and_a_damaged_one_is_rebuilt(
        tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    # cocotb's build: it links the most runtime (the VPI objects too)
    first = build_copy_engine(CFG, tmp_path / "a", harness="cocotb")
    assert "verilated_vpi.cpp" in compiled_runtime(first)
    stored = sorted(cache.glob("*.o"))
    assert len(stored) == len(compiled_runtime(first))

    second = build_copy_engine(CFG, tmp_path / "b", harness="cocotb")
    assert not second.cached and compiled_runtime(second) == []
    assert copies_correctly(second, CFG)

    victim = max(stored, key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    third = build_copy_engine(CFG, tmp_path / "c", harness="cocotb")
    assert len(compiled_runtime(third)) == 1  # only the damaged one
    assert copies_correctly(third, CFG)
    assert sorted(cache.glob("*.o")) == stored  # the same name again, with its right bytes
    assert victim.read_bytes() != bytes(data)
