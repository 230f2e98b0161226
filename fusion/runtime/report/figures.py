"""The five plots of ``hwgen report``, made with plotly from a checked run (:class:`RunData`).

Each builder returns a :class:`Plot`: a figure, or no figure and a one-line note saying which
data the run's JSON lacks and how to get them (a single-model run has no timeline; a library
built without synthesis has no resources). A plot is never dropped without a word, and absent
data are never an error.

Colours follow the variant on every plot (:func:`variant_colours`), so a variant's points, its
roofline and its bars read as one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.colors import qualitative

from fusion.runtime.report.data import RESOURCES, KernelRun, RunData

_WORKLOAD = "'hwgen run --variants DIR --workload FILE --json'"
# Plans and swaps are not variants: colours outside the D3 palette the variants take.
_FUSED, _UNFUSED, _SWAP = "#2e7d5b", "#b5b5b5", "#3a3a3a"
#: Every figure's frame: white background, legend above the plot, room for axis titles.
_LAYOUT = {"template": "plotly_white", "height": 440, "margin": {"l": 70, "r": 30, "t": 40,
           "b": 60}, "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
           "font": {"size": 13}}


@dataclass(frozen=True)
class Plot:
    """One section's plot: ``figure``, or None and ``missing`` (what the JSON lacks and how to
    get it); ``caption`` says what a drawn figure leaves out."""

    figure: go.Figure | None
    missing: str = ""
    caption: str = ""


def _kernels(count: int) -> str:
    return f"{count} kernel{'' if count == 1 else 's'}"


def variant_colours(run: RunData) -> dict[str, str]:
    """A colour per variant: the library's order, then any other variant a kernel names."""
    names = list(run.variants) + [k.variant for k in run.kernels if k.variant not in run.variants]
    palette = qualitative.D3
    return {name: palette[i % len(palette)] for i, name in enumerate(dict.fromkeys(names))}


def fusion_plot(run: RunData) -> Plot:
    """Each model's kernels fused and unfused: two stacked bars per model, a segment a kernel
    (fused and unfused plans have different kernels, so they stack rather than pair up)."""
    if not run.fusion:
        if run.form == "run":
            return Plot(None, missing=f"No fused-vs-unfused comparison: a single-model run "
                                      f"measures one plan. Run a workload ({_WORKLOAD}), which "
                                      f"measures each model both ways.")
        return Plot(None, missing=f"No fused-vs-unfused comparison: the run's \"fusion\" is "
                                  f"empty. Run the workload again with {_WORKLOAD} to "
                                  f"measure each model both ways.")
    fig = go.Figure()
    sides = (("fused", _FUSED), ("unfused", _UNFUSED))
    depth = max(len(getattr(c, side)) for c in run.fusion.values() for side, _ in sides)
    # Trace i holds every bar's i-th kernel, so a bar is a stack of its kernels in plan order.
    for i in range(depth):
        for side, colour in sides:
            models, names, cycles = [], [], []
            for model, compare in run.fusion.items():
                kernels = getattr(compare, side)
                if i < len(kernels):
                    models.append(model)
                    names.append(kernels[i][0])
                    cycles.append(kernels[i][1])
            if models:
                fig.add_bar(x=[models, [side] * len(models)], y=cycles, name=side,
                            legendgroup=side, showlegend=i == 0, customdata=names,
                            marker={"color": colour, "line": {"color": "white", "width": 1}},
                            hovertemplate="%{customdata}: %{y:,} cycles<extra>%{x}</extra>")
    totals = [(model, side, sum(c for _, c in getattr(compare, side)))
              for model, compare in run.fusion.items() for side, _ in sides]
    fig.add_scatter(x=[[t[0] for t in totals], [t[1] for t in totals]],
                    y=[t[2] for t in totals], mode="text", text=[f"{t[2]:,}" for t in totals],
                    textposition="top center", showlegend=False, hoverinfo="skip")
    fig.update_layout(_LAYOUT, barmode="stack", yaxis_title="cycles")
    saving = [f"{m}: {1 - f / u:.0%} fewer cycles fused" for m, f, u in
              ((m, sum(c for _, c in x.fused), sum(c for _, c in x.unfused))
               for m, x in run.fusion.items()) if u]
    return Plot(fig, caption="; ".join(saving))


def prediction_plot(run: RunData, colours: dict[str, str]) -> Plot:
    """Predicted against measured cycles, a point a kernel, the line y = x, log axes."""
    if not run.kernels:
        return Plot(None, missing="No kernels: the run's JSON lists no kernel runs, so there "
                                  "is nothing to compare; run a model that has kernels.")
    unique = list(dict.fromkeys((k.variant, k.model, k.name, k.cycles, k.predicted_cycles)
                                for k in run.kernels))
    # A log axis has no 0: a kernel measured or predicted at 0 cycles cannot be drawn.
    points = [p for p in unique if p[3] > 0 and p[4] > 0]
    if not points:
        return Plot(None, missing="No kernel has both measured and predicted cycles above 0, "
                                  "so none can be placed on log axes.")
    fig = go.Figure()
    for variant in dict.fromkeys(p[0] for p in points):
        mine = [p for p in points if p[0] == variant]
        error = sum(abs(p[4] - p[3]) / p[3] for p in mine) / len(mine)
        fig.add_scatter(x=[p[3] for p in mine], y=[p[4] for p in mine], mode="markers",
                        name=f"{variant} (mean |error| {error:.1%})",
                        marker={"color": colours[variant], "size": 9, "opacity": 0.8},
                        customdata=[[p[1], p[2]] for p in mine],
                        hovertemplate="%{customdata[0]} / %{customdata[1]}<br>measured "
                                      "%{x:,}<br>predicted %{y:,.0f}<extra></extra>")
    lo = min(min(p[3], p[4]) for p in points) / 1.5
    hi = max(max(p[3], p[4]) for p in points) * 1.5
    fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                    line={"color": "grey", "dash": "dash"}, hoverinfo="skip")
    axis = {"type": "log", "range": [math.log10(lo), math.log10(hi)]}
    fig.update_layout(_LAYOUT, xaxis={**axis, "title": "measured cycles (Verilator)"},
                      yaxis={**axis, "title": "predicted cycles (cost model)"})
    left = []
    if len(points) < len(unique):
        left.append(f"{_kernels(len(unique) - len(points))} at 0 cycles left out (log axes)")
    if len(unique) < len(run.kernels):
        left.append("a kernel that ran several times alike on one variant is drawn once")
    return Plot(fig, caption="; ".join(left))


def roofline_plot(run: RunData, colours: dict[str, str]) -> Plot:
    """Achieved MACs per cycle against operational intensity (MACs per byte read from external
    memory), under each variant's roofline ``min(rows * cols, port_bytes * intensity)``."""
    def placed(k: KernelRun) -> bool:
        return k.macs > 0 and k.cycles > 0 and bool(k.bytes_read)

    points = list(dict.fromkeys(k for k in run.kernels if placed(k)))
    if not points:
        why = ("no kernel multiplies (0 MACs)" if not any(k.macs for k in run.kernels) else
               "its kernels do not say how many bytes they read from external memory "
               "(\"bytes_read\")")
        return Plot(None, missing=f"No roofline: {why}. It needs kernels with MACs and "
                                  f"bytes read, as {_WORKLOAD} or 'hwgen run MODEL --json' "
                                  f"report them.")
    fig = go.Figure()
    for variant in dict.fromkeys(k.variant for k in points):
        mine = [k for k in points if k.variant == variant]
        fig.add_scatter(x=[k.macs / k.bytes_read for k in mine],
                        y=[k.macs / k.cycles for k in mine], mode="markers", name=variant,
                        legendgroup=variant, marker={"color": colours[variant], "size": 9},
                        customdata=[[k.model, k.name, k.macs, k.bytes_read, k.cycles]
                                    for k in mine],
                        hovertemplate="%{customdata[0]} / %{customdata[1]}<br>%{customdata[2]:,}"
                                      " MACs, %{customdata[3]:,} B read, %{customdata[4]:,} "
                                      "cycles<extra></extra>")
    xs = [k.macs / k.bytes_read for k in points]
    lo, hi = min(xs) / 2, max(xs) * 2
    used = [v for v in run.variants.values() if v.name in {k.variant for k in points}]
    for v in used:
        ridge = v.peak_macs_per_cycle / v.port_bytes  # where the port stops being the limit
        grid = sorted({lo, hi, *([ridge] if lo < ridge < hi else [])})
        fig.add_scatter(x=grid, y=[min(v.peak_macs_per_cycle, v.port_bytes * x) for x in grid],
                        mode="lines", name=f"{v.name} roofline ({v.rows}x{v.cols}, "
                                           f"{v.port_bytes} B/cycle)", legendgroup=v.name,
                        line={"color": colours[v.name], "dash": "dot"}, hoverinfo="skip")
    fig.update_layout(_LAYOUT, xaxis={"type": "log", "title": "operational intensity (MACs "
                                                              "per byte read)"},
                      yaxis={"type": "log", "title": "MACs per cycle achieved"})
    left = []
    if not used:
        left.append("no roofline lines: a single-model run's JSON does not carry the variant's "
                    f"rows, cols and port width; a workload run's does ({_WORKLOAD})")
    if len(points) < len(run.kernels):
        skipped = len({k for k in run.kernels if not placed(k)})
        if skipped:
            left.append(f"{_kernels(skipped)} without MACs, bytes read or cycles left out")
    return Plot(fig, caption="; ".join(left))


def timeline_plot(run: RunData, colours: dict[str, str]) -> Plot:
    """Which variant ran which model run, along cycles; each swap a hatched bar before the
    run it served, labelled with its cost."""
    if not run.timeline:
        if run.form == "run":
            return Plot(None, missing=f"No reconfiguration timeline: a single-model run uses "
                                      f"one variant throughout. Run a workload ({_WORKLOAD}) "
                                      f"to see which variant ran each model and where it "
                                      f"swapped.")
        return Plot(None, missing="No reconfiguration timeline: the workload's timeline is "
                                  "empty (it ran no model); give it phases to run.")
    fig = go.Figure()
    rows = list(run.variants)
    for variant in rows:
        mine = [r for r in run.timeline if r.variant == variant]
        if not mine:
            continue
        fig.add_bar(orientation="h", y=[variant] * len(mine), x=[r.cycles for r in mine],
                    base=[r.start_cycle for r in mine], name=variant,
                    marker={"color": colours[variant], "line": {"color": "white", "width": 1}},
                    text=[r.model for r in mine], textposition="inside",
                    insidetextanchor="middle",
                    customdata=[[r.model, r.phase, r.repeat, r.start_cycle,
                                 r.start_cycle + r.cycles] for r in mine],
                    hovertemplate="%{customdata[0]} (phase %{customdata[1]}, repeat "
                                  "%{customdata[2]})<br>cycles %{customdata[3]:,} to "
                                  "%{customdata[4]:,}<extra>%{y}</extra>")
    swaps = [r for r in run.timeline if r.swap_cycles > 0]
    if swaps:
        fig.add_bar(orientation="h", y=[r.variant for r in swaps],
                    x=[r.swap_cycles for r in swaps],
                    base=[max(0, r.start_cycle - r.swap_cycles) for r in swaps],
                    name="swap (reconfiguration)",
                    marker={"color": _SWAP, "pattern": {"shape": "/"}},
                    text=[f"swap {r.swap_cycles:,}" for r in swaps], textposition="inside",
                    customdata=[r.swap_cycles for r in swaps],
                    hovertemplate="swap to %{y}: %{customdata:,} cycles<extra></extra>")
    # Overlay: a row's bars sit at their own cycles, not side by side as grouped bars would.
    fig.update_layout(_LAYOUT, barmode="overlay", height=160 + 60 * len(rows),
                      xaxis_title="cycles", yaxis={"categoryorder": "array",
                                                   "categoryarray": rows[::-1]})
    for r in run.replans:  # a workload on one variant: where its plan changed
        fig.add_vline(x=run.timeline[r.run].start_cycle, line_dash="dash",
                      line_color=_SWAP, annotation_text=f"re-plan: {r.samples_after} samples",
                      annotation_position="top right")
    total = sum(r.swap_cycles for r in swaps)
    replans = f"; {len(run.replans)} re-plans (dashed)" if run.replans else ""
    return Plot(fig, caption=f"{len(run.timeline)} model runs; {len(swaps)} swaps costing "
                             f"{total:,} cycles{replans}")


def resources_plot(run: RunData, colours: dict[str, str]) -> Plot:
    """LUT, FF, DSP and BRAM of each variant with synthesis figures: bars grouped by resource,
    on a log axis (LUTs run to thousands, DSPs to tens)."""
    if not run.variants:
        return Plot(None, missing=f"No variants: a single-model run's JSON has no library. Run "
                                  f"a workload on a library ({_WORKLOAD}) for its resources.")
    synthesized = [v for v in run.variants.values() if v.resources is not None]
    if not synthesized:
        return Plot(None, missing="No resource figures: the library was built without "
                                  "synthesis. Build it again with synthesis ('hwgen variants "
                                  "build' without skipping it) for LUT, FF, DSP and BRAM.")
    fig = go.Figure()
    labels = [r.upper() for r in RESOURCES]
    for v in synthesized:
        values = [v.resources[r] for r in RESOURCES]
        fig.add_bar(x=labels, y=values, name=v.name, marker={"color": colours[v.name]},
                    text=[f"{x:,}" for x in values], textposition="outside")
    fig.update_layout(_LAYOUT, barmode="group", yaxis={"type": "log", "title": "count"})
    rest = [v.name for v in run.variants.values() if v.resources is None]
    return Plot(fig, caption=(f"no synthesis figures for {', '.join(rest)} (synthesis skipped)"
                              if rest else ""))
