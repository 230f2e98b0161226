"""Reading a variant library: the Verilog's hash, the capabilities, one board; and refusing a
kernel a descriptor does not cover."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fusion.runtime.reconfig.library import check_covers, open_library
from hwgen.cli import main
from tests.helpers.fake_synthesis import FakeTools

SPEC = "2x2:bias,requant,relu,clamp,residual"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A library of one 2x2 variant, as ``hwgen variants build`` writes it (yosys and
    nextpnr faked: tests/synth/test_flow.py runs them)."""
    root = tmp_path_factory.mktemp("lib")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HWGEN_BUILD_DIR", str(root / "build"))
        FakeTools(mp)
        assert main(["variants", "build", "-o", str(root / "lib"), SPEC, "--quiet"]) == 0
    return root / "lib"


@pytest.fixture
def lib(made, tmp_path) -> Path:
    shutil.copytree(made, tmp_path / "lib")
    return tmp_path / "lib"


NAME = "2x2_bias_requant_relu_clamp_residual"


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_library_opens(lib):
    (v,) = open_library(lib)
    assert v.name == NAME and v.reconfig_cycles == 7461173  # the 25F's bitstream at 100 MHz
    assert "window" not in v.capabilities["kinds"]
    summary = v.summary()
    assert summary["resources"] == {"lut": 1440, "ff": 900, "dsp": 4, "bram": 6}
    assert summary["part"] == "LFE5U-25F" and summary["fmax_mhz"] == 87.5


def test_a_verilog_that_does_not_match_its_hash_is_refused(lib):
    verilog = lib / NAME / "hwgen_accel.v"
    verilog.write_text(verilog.read_text() + "\n// edited\n")
    with pytest.raises(ValueError, match="sha256"):
        open_library(lib)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("capabilities"), "no capabilities"),
    (lambda d: d["capabilities"].update(kinds=["gemm", "fft"]), "unknown kernel kinds fft"),
    (lambda d: d.pop("reconfiguration"), "no reconfiguration cost"),
    (lambda d: d["reconfiguration"].update(cycles=-1), "not a count"),
    (lambda d: d["capabilities"].update(stages=["bias"]), "capabilities list stages"),
])
def test_descriptors_without_what_the_manager_needs_are_refused(lib, change, message):
    edit(lib / NAME / "variant.json", change)
    with pytest.raises(ValueError, match=message):
        open_library(lib)


@pytest.mark.parametrize("index, message", [
    (None, "not a variant library"),
    ("{", "is not JSON"),
    ({"format": "other", "variants": []}, "not a variant library of this hwgen"),
    ({"format": "hwgen-variant-library", "variants": [{"name": "x", "folder": f"../{NAME}"}]},
     "malformed variant entry"),
    ({"format": "hwgen-variant-library",
      "variants": [{"name": "a", "folder": NAME}, {"name": "a", "folder": NAME}]},
     "names a variant twice"),
])
def test_bad_library_index_refused(lib, index, message):
    path = lib / "library.json"
    if index is None:
        path.unlink()
    else:
        path.write_text(index if isinstance(index, str) else json.dumps(index))
    with pytest.raises(ValueError, match=message):
        open_library(lib)


def test_capabilities_must_cover_each_kernel(lib):
    (v,) = open_library(lib)
    check_covers(v, "gemm", ("bias", "requant"), "k0")  # covered: no error
    with pytest.raises(ValueError, match="cannot run window kernels"):
        check_covers(v, "window", (), "k1")
    with pytest.raises(ValueError, match="out of order"):
        check_covers(v, "gemm", ("relu", "bias"), "k2")
