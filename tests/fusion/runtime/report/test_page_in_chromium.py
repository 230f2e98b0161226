"""``hwgen report``'s page in a real browser: headless Chromium (Debian's package) opens the
file with no network, runs plotly.js, and prints the DOM it ended with; every plot section must
then hold plotly's drawn SVG with its bars or points, and every other section its note.

Without Chromium the test is skipped, except under CI (``$CI`` set), where it fails: CI must
install it (``.ci/run`` does: ``apt-get install chromium``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fusion.runtime.report.data import parse_run
from fusion.runtime.report.page import SECTIONS, render
from tests.helpers.run_json import single_run, workload_run

#: Chromium as root on a machine with no network: no sandbox (root), no GPU, and nothing that
#: reaches out (updates, sync, QUIC), which would otherwise hang it here.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")
TIMEOUT = 60


def chromium() -> str:
    path = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else \
        shutil.which("chromium")
    if path is None:
        reason = "Chromium is not installed: apt-get install chromium (Debian's package)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; .ci/run must install it before 'make test'")
        pytest.skip(reason)
    return path


def dump_dom(page: Path) -> str:
    """The DOM after the page's scripts ran (virtual time lets plotly finish drawing)."""
    with tempfile.TemporaryDirectory(prefix="hwgen-chromium-") as profile:
        proc = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={profile}",
                                 "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        finally:
            # Chromium's helpers (zygote, renderer) share its process group: end them all,
            # whether it finished, hung or the test was interrupted.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    assert proc.returncode == 0 and out.strip(), f"chromium failed: {err[-2000:]}"
    return out


class _Sections(HTMLParser):
    """Counts, per ``<section id>``, plotly's drawn SVGs (``svg.main-svg``), the data marks
    it drew (``.point``: a bar or a marker) and the notes (``p.missing``)."""

    def __init__(self) -> None:
        super().__init__()
        self.section: str | None = None
        self.counts: Counter[tuple[str | None, str]] = Counter()
        self.plotted: set[str] = set()  # plot divs plotly took over (js-plotly-plot)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "section":
            self.section = attrs.get("id")
        if tag == "svg" and "main-svg" in classes:
            self.counts[self.section, "svg"] += 1
        if "point" in classes:
            self.counts[self.section, "point"] += 1
        if tag == "p" and "missing" in classes:
            self.counts[self.section, "missing"] += 1
        if tag == "div" and "js-plotly-plot" in classes:
            self.plotted.add(attrs.get("id"))

    def handle_endtag(self, tag):
        if tag == "section":
            self.section = None


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Both forms' pages, rendered once, each opened once in Chromium."""
    folder = tmp_path_factory.mktemp("report")
    found = {}
    for name, raw in (("workload", workload_run()), ("single", single_run())):
        path = folder / f"{name}.html"
        path.write_text(render(parse_run(raw, f"{name}.json"))[0])
        parser = _Sections()
        parser.feed(dump_dom(path))
        found[name] = parser
    return found


def test_every_plot_of_a_workload_page_draws(pages):
    page = pages["workload"]
    for section in SECTIONS:
        assert f"plot-{section.id}" in page.plotted, section.id
        assert page.counts[section.id, "svg"] >= 1, section.id
        assert page.counts[section.id, "point"] >= 2, section.id  # its data, not bare axes
        assert page.counts[section.id, "missing"] == 0
    # what the fixture holds: 5 fused + 10 unfused kernel bars, 2 swaps + 4 runs, 4 x 2 bars
    assert page.counts["fusion", "point"] == 15
    assert page.counts["timeline", "point"] == 6
    assert page.counts["resources", "point"] == 8


def test_a_single_model_page_draws_two_and_notes_three(pages):
    page = pages["single"]
    assert page.plotted == {"plot-prediction", "plot-roofline"}
    for name in ("prediction", "roofline"):
        assert page.counts[name, "point"] >= 3
    for name in ("fusion", "timeline", "resources"):
        assert page.counts[name, "missing"] == 1
        assert page.counts[name, "svg"] == 0
