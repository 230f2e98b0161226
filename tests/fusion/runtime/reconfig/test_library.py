"""Reading a variant library: the Verilog's hash, the capabilities, one board; and refusing a
kernel a descriptor does not cover."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fusion.runtime.reconfig.library import check_covers, open_library
from hwgen.gateware.emit import generate
from hwgen.presets import SIM_VARIANTS


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """One generated 2x2 folder, with what a library adds to its descriptor."""
    root = tmp_path_factory.mktemp("lib")
    config = SIM_VARIANTS["2x2"]
    generate(config, root / "v2")
    path = root / "v2" / "variant.json"
    data = json.loads(path.read_text())
    data["capabilities"] = {"kinds": ["conv", "gemm", "max", "pass"],
                            "stages": list(config.epilogue)}
    data["reconfiguration"] = {"cycles": 1234}
    path.write_text(json.dumps(data))
    (root / "library.json").write_text(json.dumps(
        {"format": "hwgen-variant-library", "version": 1,
         "variants": [{"name": "v2", "folder": "v2"}]}))
    return root


@pytest.fixture
def lib(made, tmp_path) -> Path:
    shutil.copytree(made, tmp_path / "lib")
    return tmp_path / "lib"


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_library_opens(lib):
    (v,) = open_library(lib)
    assert v.name == "v2" and v.reconfig_cycles == 1234
    assert "window" not in v.kinds and v.stages == tuple(SIM_VARIANTS["2x2"].epilogue)
    assert v.summary()["reconfig_cycles"] == 1234


def test_a_verilog_that_does_not_match_its_hash_is_refused(lib):
    verilog = lib / "v2" / "hwgen_accel.v"
    verilog.write_text(verilog.read_text() + "\n// edited\n")
    with pytest.raises(ValueError, match="sha256"):
        open_library(lib)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("capabilities"), "no capabilities"),
    (lambda d: d.pop("reconfiguration"), "no reconfiguration cycles"),
    (lambda d: d["reconfiguration"].update(cycles=-1), "no reconfiguration cycles"),
    (lambda d: d["capabilities"].update(stages=["bias"]), "capabilities list stages"),
])
def test_descriptors_without_what_the_manager_needs_are_refused(lib, change, message):
    edit(lib / "v2" / "variant.json", change)
    with pytest.raises(ValueError, match=message):
        open_library(lib)


@pytest.mark.parametrize("index, message", [
    (None, "not a variant library"),
    ("{", "is not JSON"),
    ({"format": "other", "variants": []}, "not a variant library of this hwgen"),
    ({"format": "hwgen-variant-library", "variants": [{"name": "x", "folder": "../v2"}]},
     "malformed variant entry"),
    ({"format": "hwgen-variant-library",
      "variants": [{"name": "a", "folder": "v2"}, {"name": "a", "folder": "v2"}]},
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
    with pytest.raises(ValueError, match="kernel kind 'window' is not among"):
        check_covers(v, "window", (), "k1")
    with pytest.raises(ValueError, match="out of order"):
        check_covers(v, "gemm", ("relu", "bias"), "k2")
