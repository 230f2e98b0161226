"""``hwgen report``'s page as HTML text: self-contained (plotly.js inline, nothing fetched),
every section present as a plot or a note, user text escaped, written in one step.
test_browser.py opens it in Chromium."""

import json
import re

import plotly.offline
import pytest

from fusion.runtime.report.data import parse_run
from fusion.runtime.report.page import SECTIONS, render, write_report
from tests.helpers.run_json import single_run, workload_run

IDS = [s.id for s in SECTIONS]


def _render(raw):
    return render(parse_run(raw, "run.json"))


def test_the_page_needs_no_network():
    page, _, _ = _render(workload_run())
    # no script, style or image from elsewhere: every <script> is inline
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=", page)
    # plotly.js itself is in the page, once; nothing else names an address
    library = plotly.offline.get_plotlyjs()
    assert page.count(library) == 1
    assert not re.search(r"https?://", page.replace(library, ""))
    assert page.count("Plotly.newPlot(") == 5


def test_a_workload_page_has_the_summary_and_five_plots():
    page, drawn, missing = _render(workload_run())
    assert (drawn, missing) == (tuple(IDS), ())
    for section in SECTIONS:
        assert f'<section id="{section.id}">' in page
        assert f'<div id="plot-{section.id}"' in page
        assert f"<h2>{section.title}</h2>" in page
    assert '<section id="summary">' in page
    assert "<td>swap cycles</td><td class=num>90,000</td>" in page
    assert "<td>static: v8x8 alone</td><td>cannot run every kernel</td>" in page
    # the variant table: Fmax and the swap-in cost beside the resource bars
    assert "<td>LFE5U-25F</td><td class=num>101.2</td><td class=num>30,000</td>" in page
    assert "<title>hwgen report: run.json</title>" in page


def test_a_single_model_page_notes_what_it_lacks():
    page, drawn, missing = _render(single_run())
    assert drawn == ("prediction", "roofline")
    assert missing == ("fusion", "timeline", "resources")
    for name in missing:
        assert f'<p class="missing" id="missing-{name}">' in page
        assert f'<div id="plot-{name}"' not in page
    assert "no roofline lines" in page


def test_names_from_the_json_are_escaped():
    raw = workload_run()
    evil = "</script><script>alert(1)</script>"
    raw["timeline"][0]["model"] = evil
    raw["policy"] = "<b>online</b>"
    page, _, _ = _render(raw)
    assert evil not in page
    assert "&lt;b&gt;online&lt;/b&gt;" in page


def test_write_report_replaces_the_page_in_one_step(tmp_path):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(workload_run()))
    out = tmp_path / "report.html"
    out.write_text("old")
    written = write_report(run_json, out)
    assert written.size == out.stat().st_size > 1_000_000  # plotly.js is in it
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "run.json"]


@pytest.mark.parametrize(("out", "message"), [
    ("", "is a folder; name the HTML file to write"),
    ("nowhere/report.html", "no folder"),
    ("run.json", "is the run's JSON itself; name another file"),
])
def test_an_output_that_cannot_be_written_is_refused_first(tmp_path, out, message):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(workload_run()))
    with pytest.raises(ValueError, match=message):
        write_report(run_json, tmp_path / out)
    assert json.loads(run_json.read_text())["format"] == "hwgen-workload-run"
