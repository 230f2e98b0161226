"""Reading a run's JSON for ``hwgen report``: both forms ``hwgen run --json`` prints are read
into one shape; anything else is one line naming the file, the field and the fix."""

import json
from pathlib import Path

import pytest

from fusion.runtime.report import data
from fusion.runtime.report.data import parse_run, read_run
from tests.helpers.run_json import single_run, workload_run


def test_a_workload_run_is_read_whole():
    run = parse_run(workload_run(), "run.json")
    assert run.form == "workload"
    assert list(run.variants) == ["v4x4", "v8x8"]
    assert run.variants["v4x4"].peak_macs_per_cycle == 16
    assert run.variants["v8x8"].resources == {"lut": 5200, "ff": 4100, "dsp": 64, "bram": 10}
    assert [(r.model, r.variant, r.swap_cycles) for r in run.timeline] == [
        ("ds_cnn", "v4x4", 0), ("ds_cnn", "v4x4", 0), ("autoenc", "v8x8", 60_000),
        ("ds_cnn", "v4x4", 30_000)]
    assert len(run.kernels) == 3 + 3 + 2 + 3
    assert run.kernels[0].bytes_read == 6_000
    assert run.fusion["ds_cnn"].fused[0] == ("k0", run.kernels[0].cycles)
    summary = dict(run.summary)
    assert summary["policy"] == "online"
    assert summary["swaps"] == "2"
    assert summary["static: v8x8 alone"] == "cannot run every kernel"


def test_a_single_model_run_reads_bytes_from_its_counters():
    run = parse_run(single_run(), "run.json")
    assert run.form == "run"
    assert (run.variants, run.timeline, run.fusion) == ({}, (), {})
    assert [k.bytes_read for k in run.kernels] == [6_000, 9_000, 3_100]
    assert {k.model for k in run.kernels} == {"ds_cnn"}
    assert dict(run.summary)["plan"] == "fused"


def test_absent_data_are_not_errors():
    run = workload_run()
    run["variants"]["v4x4"].update(resources=None, part=None, fmax_mhz=None)
    del run["fusion"]
    parsed = parse_run(run, "run.json")
    assert parsed.variants["v4x4"].resources is None
    assert parsed.fusion == {}
    kernel = single_run()
    del kernel["kernels"][0]["counters"]["bytes_read"]
    assert parse_run(kernel, "run.json").kernels[0].bytes_read is None


def _refused(value, *fragments):
    with pytest.raises(ValueError) as exc:
        parse_run(value, "run.json")
    message = str(exc.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_unknown_forms_are_refused_naming_the_fix():
    _refused([1, 2], "run.json is not a run's JSON (a JSON list", "hwgen run ... --json")
    _refused({"format": "hwgen-plan"}, "run.json is a 'hwgen-plan' file, not a run's JSON")
    _refused({"ok": True}, "neither form 'hwgen run' prints")
    _refused({**workload_run(), "version": 2}, "of version 2; this hwgen reads version 1")


def test_a_failed_run_is_refused():
    _refused({"ok": False, "kernel": "k3", "kernels": [], "error": "k3 differs"},
             "the JSON of a failed run ('k3 differs')", "fix the run")


@pytest.mark.parametrize(("edit", "fragment"), [
    (lambda r: r.update(total_cycles="many"), "total_cycles must be a whole number"),
    (lambda r: r["timeline"][1]["kernels"][2].update(cycles=-1),
     "timeline[1].kernels[2].cycles must be a whole number of at least 0, not -1"),
    (lambda r: r["timeline"][0].update(variant="v9x9"),
     "timeline[0].variant must be one of the variants (v4x4, v8x8), not 'v9x9'"),
    (lambda r: r["variants"]["v4x4"].update(rows=0),
     "variants['v4x4'].rows must be a whole number of at least 1, not 0"),
    (lambda r: r["variants"]["v8x8"]["resources"].pop("dsp"),
     "variants['v8x8'].resources.dsp must be a whole number of at least 0, not missing"),
    (lambda r: r["timeline"][0]["kernels"][0].update(predicted_cycles=True),
     "timeline[0].kernels[0].predicted_cycles must be a number of at least 0, not true"),
    (lambda r: r["fusion"]["ds_cnn"].update(fused={}), "fusion['ds_cnn'].fused must be a list"),
    (lambda r: r.update(timeline=None), "timeline must be a list, not null"),
])
def test_a_field_of_the_wrong_type_is_named(edit, fragment):
    run = workload_run()
    edit(run)
    _refused(run, f"run.json: {fragment}", "hwgen run ... --json")


def test_files_missing_unreadable_or_not_json(tmp_path):
    with pytest.raises(ValueError, match=r"^no file .*nope\.json; give the JSON"):
        read_run(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{'not': json}")
    with pytest.raises(ValueError, match=r"x\.json is not JSON \(.* at line 1\); give the JSON"):
        read_run(tmp_path / "x.json")
    (tmp_path / "b.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match=r"^cannot read .*b\.json: .*; give the JSON"):
        read_run(tmp_path / "b.json")
    (tmp_path / "ok.json").write_text(json.dumps(workload_run()))
    assert read_run(tmp_path / "ok.json").source == "ok.json"


def test_sizes_are_checked_before_the_work(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(workload_run()))
    monkeypatch.setattr(data, "MAX_FILE_BYTES", 100)
    with pytest.raises(ValueError, match="bytes, more than a run's JSON ever is"):
        read_run(path)
    monkeypatch.setattr(data, "MAX_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(data, "MAX_KERNEL_RUNS", 10)  # the workload has 11
    with pytest.raises(ValueError, match="holds 11 kernel runs, more than a page plots"):
        read_run(path)


def test_what_hwgen_run_printed_is_read():
    # tests/data/run_qdq_cnn.json: `hwgen run examples/qdq_cnn.onnx --variant <4x4> --json`
    path = Path(__file__).resolve().parents[3] / "data" / "run_qdq_cnn.json"
    raw = json.loads(path.read_text())
    run = read_run(path)
    assert run.form == "run"
    assert [k.name for k in run.kernels] == [k["name"] for k in raw["kernels"]]
    assert all(k.bytes_read for k in run.kernels) and any(k.macs for k in run.kernels)
    assert sum(k.cycles for k in run.kernels) == raw["total_cycles"]
