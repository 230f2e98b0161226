"""The simulator builds and runs a variant folder's own ``hwgen_accel.v`` (the file a user
ships), reusing the default build only when its recorded Verilog sha256 is the folder's.

The folders here hold the copy engine (tests/helpers/copy_engine.py) instead of the
accelerator, with a descriptor that records it: only a simulator built from the folder's
file behaves like a copy engine.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hwgen.cli import main
from hwgen.config import VariantConfig
from hwgen.gateware.folder import sha256_of
from hwgen.gateware.sources import gateware_digest
from hwgen.platform import PlatformConfig
from sim import build as sim_build
from sim.run import MemoryImage, run_program
from tests.helpers.copy_engine import HALT, build_copy_engine, copy, copy_engine_verilog

pytestmark = pytest.mark.slow

CFG = VariantConfig(port_latency=2, mem_addr_bits=12, imem_depth=64)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> sim_build.BuildInfo:
    return build_copy_engine(CFG, tmp_path_factory.mktemp("pristine"))


def variant_folder(path: Path, text: str) -> Path:
    """A variant folder whose descriptor records ``text`` as its Verilog."""
    path.mkdir()
    (path / "hwgen_accel.v").write_text(text)
    CFG.write_descriptor(path / "variant.json", top="hwgen_accel", verilog="hwgen_accel.v",
                         verilog_sha256=sha256_of(text.encode()),
                         gateware_digest=gateware_digest())
    return path


def as_default_build(pristine: sim_build.BuildInfo, root: Path) -> Path:
    """The copy engine's build placed where this hwgen's default build of CFG would be."""
    digest = sim_build.build_digest(sim_build.source_digest(), harness="cxx")
    target = root / sim_build.folder_name(CFG, PlatformConfig(), digest, "cxx")
    shutil.copytree(pristine.directory, target, symlinks=True)
    marker = json.loads((target / sim_build.MARKER).read_text())
    marker["digest"] = digest
    (target / sim_build.MARKER).write_text(json.dumps(marker))
    return target


def copies(build: sim_build.BuildInfo) -> bool:
    data = bytes(range(16))
    memory = MemoryImage(writes=((0, data),), reads={"out": (8, 16)})
    out = run_program(CFG, [copy(0, 8, 2), HALT], memory, build=build).outputs["out"]
    return out[0] == 1 and out[8] == 9 and np.array_equal(out[1:8], np.arange(1, 8))


def test_a_folder_with_the_default_builds_verilog_reuses_it(pristine, tmp_path):
    root = tmp_path / "cache"
    default = as_default_build(pristine, root)
    folder = variant_folder(tmp_path / "v", copy_engine_verilog(CFG))
    build = sim_build.build_folder(folder, root=root)
    assert build.cached and build.directory == default
    assert build.verilog_sha256 == sha256_of((folder / "hwgen_accel.v").read_bytes())
    assert copies(build)


def test_a_folder_with_other_verilog_gets_its_own_build_and_gemm_runs_it(
        pristine, tmp_path, monkeypatch, capsys):
    root = tmp_path / "cache"
    default = as_default_build(pristine, root)
    shipped = copy_engine_verilog(CFG) + "// as shipped\n"
    folder = variant_folder(tmp_path / "v", shipped)
    build = sim_build.build_folder(folder, root=root)
    assert not build.cached and build.directory != default
    sha = sha256_of(shipped.encode())
    digest = sim_build.build_digest(sim_build.folder_digest(sha), harness="cxx")
    assert build.directory.name == f"{CFG.key()}-cxx-{digest}"
    marker = json.loads((build.directory / sim_build.MARKER).read_text())
    assert marker["verilog_sha256"] == sha
    assert (build.directory / "hwgen_accel.v").read_text() == shipped
    assert copies(build)
    assert sim_build.build_folder(folder, root=root).cached
    # hwgen gemm simulates that file: a copy engine is no GEMM (it used to build hwgen's
    # own RTL and say ok: true whatever the folder's Verilog was).
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(root))
    capsys.readouterr()
    status = main(["gemm", "--variant", str(folder), "--m", "4", "--k", "4", "--n", "4",
                   "--json"])
    out = capsys.readouterr().out
    assert status == 1 and json.loads(out)["ok"] is False
