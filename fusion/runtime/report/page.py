"""``hwgen report``'s page: one self-contained HTML file (plotly.js inline, no network needed to
view it) with a summary table and the five plot sections of :mod:`.figures`.

Every section is a ``<section id=...>`` holding either the plot's ``<div id="plot-...">`` or a
``<p class="missing">`` note; the tests find them by these ids (:data:`SECTIONS`).
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fusion.runtime.report import figures
from fusion.runtime.report.data import RESOURCES, RunData, read_run
from hwgen.atomic import write_file


@dataclass(frozen=True)
class Section:
    """One section of the page: its id (``plot-<id>`` is its plot's div), heading, what the
    plot shows, and the builder (``(run, colours) -> Plot``)."""

    id: str
    title: str
    about: str
    build: Callable[[RunData, dict[str, str]], figures.Plot]


SECTIONS = (
    Section("fusion", "Per-kernel cycles, fused and unfused",
            "Each model's kernels as measured fused and unfused; a bar stacks the kernels of "
            "one plan, the figure above it is its total.",
            lambda run, colours: figures.fusion_plot(run)),
    Section("prediction", "Predicted against measured cycles",
            "Each kernel's cycles as the cost model predicted them and as Verilator measured "
            "them; on the dashed line the prediction is exact.", figures.prediction_plot),
    Section("roofline", "Utilization against the roofline",
            "Each kernel's MACs per cycle against its MACs per byte read from external "
            "memory; a variant's roofline is min(rows x cols, port bytes x intensity).",
            figures.roofline_plot),
    Section("timeline", "Reconfiguration timeline",
            "Which variant ran each model run, along the run's cycles; a hatched bar is a "
            "swap (loading another bitstream) and its cost.", figures.timeline_plot),
    Section("resources", "Per-variant resources",
            "What each variant's synthesis used on its FPGA part (log scale); the table gives "
            "Fmax and the cycles a swap to it costs.", figures.resources_plot),
)

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1100px; padding: 1.5em 2em 4em; color: #222; background: #fff; }
h1 { margin-bottom: 0.1em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.source { color: #666; margin-top: 0; }
.about, .caption { color: #555; }
.caption { font-size: 0.9em; }
.missing { background: #fff8e1; border-left: 4px solid #f0b400; padding: 0.6em 1em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 0.3em 0.9em; border-bottom: 1px solid #e4e4e4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f5f5f5; }
"""


@dataclass(frozen=True)
class Written:
    """What :func:`write_report` wrote: the page's size, and the sections drawn or noted."""

    path: Path
    size: int
    drawn: tuple[str, ...]
    missing: tuple[str, ...]


def render(run: RunData) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The page's HTML for a checked run.

    Returns
    -------
    tuple
        The HTML, the ids of the sections drawn, and of those replaced by a note.
    """
    import plotly.offline

    colours = figures.variant_colours(run)
    parts, drawn, missing = [], [], []
    for section in SECTIONS:
        plot = section.build(run, colours)
        parts.append(f'<section id="{section.id}">\n<h2>{html.escape(section.title)}</h2>\n'
                     f'<p class="about">{html.escape(section.about)}</p>')
        if plot.figure is None:
            missing.append(section.id)
            parts.append(f'<p class="missing" id="missing-{section.id}">'
                         f'{html.escape(plot.missing)}</p>')
        else:
            drawn.append(section.id)
            parts.append(plot.figure.to_html(
                full_html=False, include_plotlyjs=False, div_id=f"plot-{section.id}",
                default_width="100%", default_height=f"{plot.figure.layout.height}px",
                config={"displaylogo": False, "responsive": True}))
            if plot.caption:
                parts.append(f'<p class="caption">{html.escape(plot.caption)}.</p>')
        if section.id == "resources" and run.variants:
            parts.append(_variant_table(run))
        parts.append("</section>")
    title = f"hwgen report: {run.source}"
    page = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n'
            # plotly.js itself, inline: the page opens with no network (a CDN link would not).
            f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>\n'
            f'</head>\n<body>\n<h1>hwgen report</h1>\n'
            f'<p class="source">{html.escape(_describe(run))}</p>\n'
            f'<section id="summary">\n<h2>Summary</h2>\n{_table(["", ""], run.summary)}\n'
            f'</section>\n' + "\n".join(parts) + "\n</body>\n</html>\n")
    return page, tuple(drawn), tuple(missing)


def _describe(run: RunData) -> str:
    what = ("a single-model run" if run.form != "workload" else
            "a workload run on one variant, its plan following its inputs" if _replanned(run)
            else "a workload run on a variant library")
    return f"From {run.source}: {what}, {len(run.kernels):,} kernel runs."


def _replanned(run: RunData) -> bool:
    """A workload run on one variant (its summary names the re-plan policy)."""
    return any(label == "re-plans" for label, _ in run.summary)


def _table(header: list[str], rows) -> str:
    """An HTML table; cells that are numbers (with commas) align right."""
    def cell(text: str) -> str:
        numeric = text.replace(",", "").replace(".", "").replace("x", "").strip().isdigit()
        return f'<td{" class=num" if numeric else ""}>{html.escape(text)}</td>'

    head = ("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
            if any(header) else "")
    body = "".join("<tr>" + "".join(cell(str(c)) for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _variant_table(run: RunData) -> str:
    rows = []
    for v in run.variants.values():
        res = v.resources or {}
        rows.append((v.name, f"{v.rows}x{v.cols}", str(v.port_bytes),
                     ", ".join(v.epilogue) or "-", "yes" if v.window_unit else "no",
                     v.part or "-", "-" if v.fmax_mhz is None else f"{v.fmax_mhz:.1f}",
                     "-" if v.reconfig_cycles is None else f"{v.reconfig_cycles:,}",
                     *(f"{res[r]:,}" if r in res else "-" for r in RESOURCES)))
    return _table(["variant", "array", "port B/cycle", "epilogue", "window unit", "part",
                   "Fmax (MHz)", "swap-in cycles", *(r.upper() for r in RESOURCES)], rows)


def write_report(run_json: str | Path, out: str | Path) -> Written:
    """Read a run's JSON and write its page to ``out`` in one step (a reader never finds half
    a page).

    Parameters
    ----------
    run_json
        What ``hwgen run ... --json`` printed (either form, see
        :mod:`fusion.runtime.report.data`).
    out
        The HTML file to write (replaced if it exists).

    Returns
    -------
    Written

    Raises
    ------
    ValueError
        A bad run's JSON, or an ``out`` that cannot be written (no such folder, a folder, the
        input itself): one line naming the fix.
    """
    run_json, out = Path(run_json), Path(out)
    if out.is_dir():
        raise ValueError(f"-o {out} is a folder; name the HTML file to write, such as "
                         f"{out / 'report.html'}")
    if not out.resolve().parent.is_dir():  # found before the work, not after
        raise ValueError(f"cannot write -o {out}: no folder {out.resolve().parent}; create it "
                         f"first")
    if out.exists() and run_json.exists() and os.path.samefile(out, run_json):
        raise ValueError(f"-o {out} is the run's JSON itself; name another file for the page")
    run = read_run(run_json)
    page, drawn, missing = render(run)
    data = page.encode("utf-8")
    write_file(out, data)
    return Written(path=out, size=len(data), drawn=drawn, missing=missing)
