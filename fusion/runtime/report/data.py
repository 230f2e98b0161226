"""Reading a run's JSON for ``hwgen report``: the two forms ``hwgen run --json`` prints, checked
and brought to one shape (:class:`RunData`) that the plots read.

- a **workload run** (``hwgen run --variants DIR --workload FILE --json``): an object with
  ``"format": "hwgen-workload-run"`` and ``"version": 1``; its variants, its timeline of model
  runs (each with its kernels) and its fused-vs-unfused comparison per model;
- a **single-model run** (``hwgen run MODEL --variant DIR --json``,
  :meth:`fusion.runtime.run.RunReport.to_dict`): no ``format``, its ``kernels`` at the top
  level. It has kernels to plot and nothing else; the page says so for the rest.

Anything else is refused with one line naming the file, the problem and the fix: the user gave
it, so every field is checked here, and nothing below trusts a type.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwgen.files import read_text

#: The ``format`` of a workload run's JSON, and the version this reader knows.
WORKLOAD_FORMAT = "hwgen-workload-run"
WORKLOAD_VERSION = 1
#: Refused before reading: a run's JSON is kilobytes to a few megabytes; a file this size is
#: something else, and would make a page no browser opens.
MAX_FILE_BYTES = 64 * 1024 * 1024
#: Kernel runs a page plots at the most (each is a point or a bar segment in the browser).
MAX_KERNEL_RUNS = 200_000
#: The resources a variant's synthesis reports, in the order the page shows them.
RESOURCES = ("lut", "ff", "dsp", "bram")

_HOW = "give the JSON that 'hwgen run ... --json' printed"


@dataclass(frozen=True)
class KernelRun:
    """One kernel's run on one variant: what the prediction, roofline and fusion plots read.

    ``bytes_read`` is what the kernel read from external memory (None where the JSON does not
    say).
    """

    model: str
    variant: str
    name: str
    ops: tuple[str, ...]
    cycles: int
    predicted_cycles: float
    macs: int
    ideal_cycles: int
    bytes_read: int | None


@dataclass(frozen=True)
class Variant:
    """One variant of the library: its shape (for the roofline), and its synthesis figures
    (``resources`` None where synthesis was skipped)."""

    name: str
    key: str
    rows: int
    cols: int
    port_bytes: int
    epilogue: tuple[str, ...]
    window_unit: bool
    resources: dict[str, int] | None
    part: str | None
    fmax_mhz: float | None
    reconfig_cycles: int | None

    @property
    def peak_macs_per_cycle(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True)
class ModelRun:
    """One model run of a workload's timeline: its kernels start at ``start_cycle``, after a
    swap of ``swap_cycles`` (0: no swap before it)."""

    phase: int
    repeat: int
    model: str
    variant: str
    start_cycle: int
    swap_cycles: int
    cycles: int
    kernels: tuple[KernelRun, ...]


@dataclass(frozen=True)
class Replan:
    """A change of plan before run ``run`` of a workload on one variant
    (:mod:`fusion.runtime.replan`): why, for what input, and its plan sizes."""

    run: int
    reason: str
    profile: str
    samples_before: int
    samples_after: int


@dataclass(frozen=True)
class FusionCompare:
    """One model's kernels fused and unfused, on ``variant``: lists of (kernel, cycles)."""

    model: str
    variant: str
    fused: tuple[tuple[str, int], ...]
    unfused: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class RunData:
    """A run's JSON, checked: what the page shows.

    ``form`` is ``"workload"`` or ``"run"`` (a single-model run, which has only ``kernels``);
    ``summary`` the rows of the table at the top, as (label, text) pairs.
    """

    source: str
    form: str
    summary: tuple[tuple[str, str], ...]
    kernels: tuple[KernelRun, ...]
    variants: dict[str, Variant]
    timeline: tuple[ModelRun, ...]
    fusion: dict[str, FusionCompare]
    #: A workload on one variant: where its plan changed (none for a library's workload).
    replans: tuple[Replan, ...] = ()


class _Fields:
    """Typed access to one JSON object, each failure one line naming the file and the field."""

    def __init__(self, source: str, obj: Any, where: str) -> None:
        if not isinstance(obj, dict):
            raise ValueError(f"{source}: {where or 'the top level'} must be a JSON object, not "
                             f"{_short(obj)}; {_HOW}")
        self.source, self.obj, self.where = source, obj, where

    def _bad(self, key: str, want: str) -> ValueError:
        value = self.obj.get(key)
        got = "missing" if key not in self.obj else f"{_short(value)}"
        path = f"{self.where}.{key}" if self.where else key
        return ValueError(f"{self.source}: {path} must be {want}, not {got}; {_HOW}")

    def _get(self, key: str, want: str, ok: Callable[[Any], bool], null: bool) -> Any:
        """The field's value if ``ok`` says it is one (or None, where ``null`` allows a
        null), else the error naming the field and what it must be."""
        value = self.obj.get(key)
        if value is None and null and key in self.obj:
            return None
        if not ok(value):
            raise self._bad(key, want + (" or null" if null else ""))
        return value

    def whole(self, key: str, *, null: bool = False) -> int | None:
        return self._get(key, "a whole number of at least 0", lambda v: isinstance(v, int)
                         and not isinstance(v, bool) and v >= 0, null)

    def number(self, key: str, *, null: bool = False) -> float | None:
        value = self._get(key, "a number of at least 0", lambda v: isinstance(v, int | float)
                          and not isinstance(v, bool) and v >= 0, null)  # NaN is not >= 0
        return None if value is None else float(value)

    def text(self, key: str, *, null: bool = False) -> str | None:
        return self._get(key, "a string", lambda v: isinstance(v, str), null)

    def texts(self, key: str) -> tuple[str, ...]:
        return tuple(self._get(key, "a list of strings", lambda v: isinstance(v, list)
                               and all(isinstance(x, str) for x in v), False))

    def array(self, key: str) -> list[Any]:
        return self._get(key, "a list", lambda v: isinstance(v, list), False)

    def mapping(self, key: str, *, null: bool = False) -> dict[str, Any] | None:
        return self._get(key, "an object", lambda v: isinstance(v, dict), null)

    def at(self, key: str, value: Any) -> _Fields:
        return _Fields(self.source, value, f"{self.where}.{key}" if self.where else key)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_run(path: str | Path) -> RunData:
    """Read and check a run's JSON (either form).

    Parameters
    ----------
    path
        The file ``hwgen run ... --json`` printed into.

    Returns
    -------
    RunData

    Raises
    ------
    ValueError
        One line naming the file, the problem and the fix: a missing or unreadable file, not
        JSON, a form this reader does not know, a failed run, or a field of the wrong type.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ValueError(f"{path} is {size:,} bytes, more than a run's JSON ever is "
                             f"({MAX_FILE_BYTES:,} at the most); {_HOW}")
        text = read_text(path)
    except FileNotFoundError:
        raise ValueError(f"no file {path}; {_HOW}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}; {_HOW}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc.msg} at line {exc.lineno}); {_HOW}") from None
    return parse_run(data, path.name)


def parse_run(data: Any, source: str) -> RunData:
    """Check a run's JSON already parsed (see :func:`read_run`); ``source`` names it in
    errors and on the page."""
    if not isinstance(data, dict):
        raise ValueError(f"{source} is not a run's JSON (a JSON {type(data).__name__}, not an "
                         f"object); {_HOW}")
    form = data.get("format")
    if form is None and isinstance(data.get("kernels"), list):
        _check_ok(data, source)
        return _single_run(_Fields(source, data, ""))
    if form == WORKLOAD_FORMAT:
        if data.get("version") != WORKLOAD_VERSION:
            raise ValueError(f"{source} is a {WORKLOAD_FORMAT} of version "
                             f"{_short(data.get('version'))}; this hwgen reads version "
                             f"{WORKLOAD_VERSION}: write it again with this hwgen's "
                             f"'hwgen run --variants DIR --workload FILE --json'")
        _check_ok(data, source)
        return _workload_run(_Fields(source, data, ""))
    what = f"a {_short(form)} file" if form is not None else "neither form 'hwgen run' prints"
    raise ValueError(f"{source} is {what}, not a run's JSON (a workload run's, with "
                     f"\"format\": \"{WORKLOAD_FORMAT}\", or a single model's, with "
                     f"\"kernels\"); {_HOW}")


def _check_ok(data: dict[str, Any], source: str) -> None:
    if data.get("ok") is False:
        why = data.get("error") or "no reason given"
        raise ValueError(f"{source} is the JSON of a failed run ({_short(why)}): it measured "
                         f"nothing to report; fix the run, then report its JSON")


def _kernel(f: _Fields, model: str, variant: str, counters: bool) -> KernelRun:
    """One kernel: a workload run's carries ``bytes_read``; a single-model run's has it in
    ``counters`` (the hardware's count)."""
    if counters:
        c = f.at("counters", f.mapping("counters"))
        bytes_read = c.whole("bytes_read") if "bytes_read" in c.obj else None
    else:
        bytes_read = f.whole("bytes_read", null=True) if "bytes_read" in f.obj else None
    return KernelRun(model=model, variant=variant, name=f.text("name"), ops=f.texts("ops"),
                     cycles=f.whole("cycles"), predicted_cycles=f.number("predicted_cycles"),
                     macs=f.whole("macs"), ideal_cycles=f.whole("ideal_cycles"),
                     bytes_read=bytes_read)


def _check_count(source: str, count: int) -> None:
    if count > MAX_KERNEL_RUNS:
        raise ValueError(f"{source} holds {count:,} kernel runs, more than a page plots "
                         f"({MAX_KERNEL_RUNS:,} at the most): report a shorter workload "
                         f"(fewer repeats)")


def _single_run(f: _Fields) -> RunData:
    model = f.text("model") if "model" in f.obj else "model"
    variant = f.text("variant") if "variant" in f.obj else "variant"
    items = f.array("kernels")
    _check_count(f.source, len(items))
    kernels = tuple(_kernel(f.at(f"kernels[{i}]", k), model, variant, counters=True)
                    for i, k in enumerate(items))
    fused = f.obj.get("fusion")
    summary = [("model", model), ("variant (key)", variant),
               ("plan", "fused" if fused else "unfused" if fused is False else "-"),
               ("kernels", f"{len(kernels):,}"),
               ("total cycles", f"{sum(k.cycles for k in kernels):,}"),
               ("predicted cycles", f"{sum(k.predicted_cycles for k in kernels):,.0f}"),
               ("MACs", f"{sum(k.macs for k in kernels):,}")]
    return RunData(source=f.source, form="run", summary=tuple(summary), kernels=kernels,
                   variants={}, timeline=(), fusion={})


def _variant(f: _Fields, name: str) -> Variant:
    resources = f.mapping("resources", null=True)
    if resources is not None:
        r = f.at("resources", resources)
        resources = {k: r.whole(k) for k in RESOURCES}
    return Variant(name=name, key=f.text("key"), rows=_positive(f, "rows"),
                   cols=_positive(f, "cols"), port_bytes=_positive(f, "port_bytes"),
                   epilogue=f.texts("epilogue"), window_unit=bool(f.obj.get("window_unit")),
                   resources=resources, part=f.text("part", null=True),
                   fmax_mhz=f.number("fmax_mhz", null=True),
                   reconfig_cycles=f.whole("reconfig_cycles", null=True))


def _positive(f: _Fields, key: str) -> int:
    value = f.whole(key)
    if value < 1:
        raise f._bad(key, "a whole number of at least 1")
    return value


def _workload_run(f: _Fields) -> RunData:
    variants = {name: _variant(f.at(f"variants[{name!r}]", v), name)
                for name, v in f.mapping("variants").items()}
    items = f.array("timeline")
    _check_count(f.source, sum(len(r.get("kernels") or ()) if isinstance(r, dict) else 0
                               for r in items))
    timeline = []
    for i, item in enumerate(items):
        r = f.at(f"timeline[{i}]", item)
        model, variant = r.text("model"), r.text("variant")
        if variant not in variants:
            raise r._bad("variant", f"one of the variants ({', '.join(variants) or 'none'})")
        kernels = tuple(_kernel(r.at(f"kernels[{j}]", k), model, variant, counters=False)
                        for j, k in enumerate(r.array("kernels")))
        timeline.append(ModelRun(phase=r.whole("phase"), repeat=r.whole("repeat"), model=model,
                                 variant=variant, start_cycle=r.whole("start_cycle"),
                                 swap_cycles=r.whole("swap_cycles"), cycles=r.whole("cycles"),
                                 kernels=kernels))
    fusion = {}
    # Absent or null: the run compared nothing (the page says so), not a malformed file.
    compared = f.mapping("fusion", null=True) if "fusion" in f.obj else None
    for model, item in (compared or {}).items():
        c = f.at(f"fusion[{model!r}]", item)
        pairs = {}
        for side in ("fused", "unfused"):
            rows = [c.at(f"{side}[{j}]", k) for j, k in enumerate(c.array(side))]
            pairs[side] = tuple((k.text("name"), k.whole("cycles")) for k in rows)
        fusion[model] = FusionCompare(model=model, variant=c.text("variant"), **pairs)
    replans = []
    for i, item in enumerate(f.obj.get("replans") or ()):
        r = f.at(f"replans[{i}]", item)
        replans.append(Replan(run=r.whole("run"), reason=r.text("reason"),
                              profile=r.text("profile"), samples_before=r.whole("samples_before"),
                              samples_after=r.whole("samples_after")))
        if replans[-1].run >= len(timeline):
            raise r._bad("run", f"a run of the timeline (0 to {len(timeline) - 1})")
    summary = (_replan_summary(f, variants, len(replans)) if f.obj.get("policy") == "replan"
               else _workload_summary(f, variants))
    return RunData(source=f.source, form="workload", summary=summary,
                   kernels=tuple(k for r in timeline for k in r.kernels), variants=variants,
                   timeline=tuple(timeline), fusion=fusion, replans=tuple(replans))


def _replan_summary(f: _Fields, variants: dict[str, Variant], replans: int
                    ) -> tuple[tuple[str, str], ...]:
    """A workload on one variant, its plan following its inputs: total, re-plans, and the
    total had the first plan been kept."""
    total, static = f.whole("total_cycles"), f.whole("static_plan_cycles")
    return (("policy", "re-plan on one variant (plans follow the inputs' live samples)"),
            ("total cycles", f"{total:,}"), ("re-plans", f"{replans:,}"),
            ("first plan kept throughout", f"{static:,}"
             + (f" ({total / static:.3f}x of it)" if static else "")),
            ("variant", ", ".join(variants) or "-"))


def _workload_summary(f: _Fields, variants: dict[str, Variant]) -> tuple[tuple[str, str], ...]:
    total = f.whole("total_cycles")
    optimum = f.whole("offline_optimal_cycles", null=True)
    rows = [("policy", f.text("policy")), ("total cycles", f"{total:,}"),
            ("kernel cycles", f"{f.whole('kernel_cycles'):,}"),
            ("swaps", f"{f.whole('swaps'):,}"),
            ("swap cycles", f"{f.whole('swap_cycles'):,}"),
            ("offline optimum", "-" if optimum is None else
             f"{optimum:,}" + (f" ({total / optimum:.3f}x of it)" if optimum else ""))]
    static = f.at("static_cycles", f.mapping("static_cycles"))
    for name in static.obj:
        cycles = static.whole(name, null=True)
        rows.append((f"static: {name} alone", "cannot run every kernel" if cycles is None
                     else f"{cycles:,}"))
    rows.append(("variants", ", ".join(variants) or "-"))
    return tuple(rows)
