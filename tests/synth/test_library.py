"""Variant libraries (synth/library.py): each folder is what 'hwgen generate' writes plus
the library's fields, library.json lists them, and building again adds or replaces variants
safely. Synthesis is faked here (tests/synth/test_flow.py runs the real tools)."""

import json

import pytest

from fusion.kernels.capabilities import capabilities
from hwgen.gateware.folder import open_variant
from hwgen.platform import PlatformConfig
from synth.cache import SynthesisCache
from synth.library import build_library, read_library, read_specs
from tests.helpers.fake_synthesis import FakeTools

SPECS = ["1x1:none", "2x2:bias,requant,relu,residual+window"]


def build(out, specs, cache_dir, platform=None, **kw):
    return build_library(out, read_specs(specs), platform or PlatformConfig(),
                         memory_files=lambda c: {},
                         cache=SynthesisCache(cache_dir), **kw)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("library")
    with pytest.MonkeyPatch.context() as mp:
        FakeTools(mp)
        result = build(root / "lib", SPECS, root / "cache")
    return root / "lib", result


def test_library_json_lists_every_variant_on_one_platform(library):
    out, result = library
    data = json.loads((out / "library.json").read_text())
    assert data == read_library(out)
    assert data == {"format": "hwgen-variant-library", "version": 1,
                    "platform": PlatformConfig().to_dict(),
                    "variants": [{"name": "1x1_none", "folder": "1x1_none", "spec": "1x1:none"},
                                 {"name": "2x2_bias_requant_relu_residual_window",
                                  "folder": "2x2_bias_requant_relu_residual_window",
                                  "spec": "2x2:bias,requant,relu,residual+window"}]}
    assert sorted(p.name for p in out.iterdir()) == [
        "1x1_none", "2x2_bias_requant_relu_residual_window", "library.json"]  # no temp folders


def test_each_folder_is_a_checked_variant_folder_with_the_librarys_fields(library):
    out, _ = library
    variant = open_variant(out / "2x2_bias_requant_relu_residual_window")
    d = variant.descriptor
    assert d["name"] == "2x2_bias_requant_relu_residual_window"
    assert d["spec"] == "2x2:bias,requant,relu,residual+window"
    assert d["capabilities"] == capabilities(variant.config)
    assert "window" in d["capabilities"]["kinds"]
    synth = d["synthesis"]
    assert synth["verilog_sha256"] == d["verilog_sha256"] and "cached" not in synth
    assert set(synth["resources"]) == {"LUT", "FF", "DSP", "BRAM", "DISTRIBUTED_RAM"}
    assert synth["part"] == "LFE5U-25F" and synth["fmax_mhz"] == 87.5
    assert set(synth["seconds"]) == {"yosys", "nextpnr"}
    reconfig = d["reconfiguration"]
    assert reconfig["part"] == "LFE5U-25F" and reconfig["cycles"] > 1_000_000
    assert reconfig["clock_hz"] == PlatformConfig().clock_hz
    core = d["fusesoc_core"]
    assert core == {"file": "2x2_bias_requant_relu_residual_window.core",
                    "name": "hwgen:variants:2x2_bias_requant_relu_residual_window:0.1.0"}
    assert (variant.directory / core["file"]).read_text().startswith("CAPI=2:\n")


def test_the_verilog_hash_check_still_guards_a_library_folder(library, tmp_path):
    import shutil

    copy = tmp_path / "v"
    shutil.copytree(library[0] / "1x1_none", copy)
    (copy / "hwgen_accel.v").write_text("// edited\n")
    with pytest.raises(ValueError, match="is not the Verilog its descriptor records"):
        open_variant(copy)


def test_building_again_replaces_its_variants_and_keeps_the_others(tmp_path, monkeypatch):
    tools = FakeTools(monkeypatch)
    out = tmp_path / "lib"
    build(out, ["1x1:none"], tmp_path / "cache")
    build(out, ["1x1:bias"], tmp_path / "cache")
    again = build(out, ["1x1:none"], tmp_path / "cache")
    assert [v["cached"] for v in again["built"]] == [True]
    assert tools.calls["yosys"] == 2  # one for each Verilog
    assert [v["name"] for v in read_library(out)["variants"]] == ["1x1_bias", "1x1_none"]
    assert sorted(p.name for p in out.iterdir()) == ["1x1_bias", "1x1_none", "library.json"]


def test_a_library_of_another_platform_or_a_foreign_folder_is_refused(tmp_path, monkeypatch):
    FakeTools(monkeypatch)
    out = tmp_path / "lib"
    build(out, ["1x1:none"], tmp_path / "cache")
    with pytest.raises(ValueError, match="a library has one platform"):
        build(out, ["1x1:none"], tmp_path / "cache", platform=PlatformConfig(memory="sdr"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty and is not a variant library"):
        build(tmp_path / "other", ["1x1:none"], tmp_path / "cache")


@pytest.mark.parametrize(("specs", "text", "message"), [
    ([], None, "no variant spec given"),
    (["1x1:none", "1x1:none+port1"], None, "are the same variant"),
    ([], '{"a": 1}', "is not a JSON list of strings"),
    ([], "[1x1]", "is not valid JSON"),
])
def test_bad_spec_lists_are_refused(tmp_path, specs, text, message):
    spec_file = None
    if text is not None:
        spec_file = tmp_path / "specs.json"
        spec_file.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_specs(specs, None if spec_file is None else str(spec_file))


def test_a_spec_file_adds_to_the_specs_given(tmp_path):
    spec_file = tmp_path / "specs.json"
    spec_file.write_text('["2x2:none"]')
    assert [s.name for s in read_specs(["1x1:none"], str(spec_file))] == ["1x1_none", "2x2_none"]


@pytest.mark.parametrize("folder", ["../elsewhere", "a/b", ""])
def test_a_library_listing_a_folder_outside_it_is_refused(tmp_path, folder):
    (tmp_path / "library.json").write_text(json.dumps({
        "format": "hwgen-variant-library", "version": 1, "platform": {},
        "variants": [{"name": "x", "folder": folder, "spec": "1x1"}]}))
    with pytest.raises(ValueError, match="is not an hwgen variant library of version 1"):
        read_library(tmp_path)
