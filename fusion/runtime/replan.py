"""Re-planning when the data changes: a workload on one variant, its plan following the live
samples of each run's input (issue 33).

A batched plan (:mod:`fusion.frontend.batch`) runs ``B`` inferences that do not see each
other: the batched run equals ``B`` runs of one input each. A padded batch (a server filling
its batch with zeros when fewer requests came) spends most of its cycles on samples whose
input is all zero, and every such sample has the same output: the model's output for a zero
input. So the runtime profiles each run's input (:func:`input_profile`: which samples hold a
non-zero value) and runs the plan *for its live samples*: the model compiled at a batch of
``b`` samples (the live ones, rounded up to whole row blocks of the array when the model's
samples are single rows), gathered from the input and scattered back into the full batch's
outputs; a padded sample takes the model's output for one zero sample, which the accelerator
computes once per model (the batch-1 plan on a zero input, its cycles counted in the run that
first needs it). Every value still comes from the
accelerator, shadow-checked kernel by kernel, and the output is bit for bit what the full
plan gives (the whole-model check compares it with the model as imported on the full input).

When the plan changes, with hysteresis:

- a plan for ``b`` samples holds up to ``b`` live ones; an input with more re-plans
  (``reason: "live samples"``);
- an input with fewer live samples re-plans only when the plan for it is predicted at least
  ``threshold`` cheaper than the plan in use (``reason: "saving"``): a phase whose live count
  wobbles within a plan's capacity keeps its plan;
- ``b`` is the live count, rounded up to whole row blocks of the array when the model's
  samples are single rows (the MLP's): the extra rows cost nothing and widen the capacity.

Plans are compiled through the caller's ``compile_for`` (its kernel cache: a plan seen before
is not built again) and logged in :attr:`ReplanReport.replans`. ``static_plan_cycles`` is the
measured total had the first run's plan been kept for every run (each distinct input run
once on it: a repeat of a plan on the same values takes the same cycles).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.runtime.reconfig.manager import kernel_dict

#: Default: re-plan to a plan predicted at least this share cheaper than the one in use.
THRESHOLD = 0.1


@dataclass(frozen=True)
class InputProfile:
    """Which samples of a batched input are live (hold a non-zero value in any input)."""

    batch: int
    live: tuple[int, ...]

    @property
    def padded(self) -> int:
        return self.batch - len(self.live)

    def describe(self) -> str:
        return f"{len(self.live)} of {self.batch} samples live"


def input_profile(inputs: Mapping[str, np.ndarray], batch: int) -> InputProfile:
    """The live samples of ``inputs`` (every input leads with ``batch`` samples): a sample is
    padding when every value of it, in every input, is exactly zero (it quantizes to the
    zero point, whatever the scale).

    Raises
    ------
    ValueError
        An input whose leading axis is not ``batch``.
    """
    live = np.zeros(batch, bool)
    for name, x in inputs.items():
        x = np.asarray(x)
        if x.ndim == 0 or x.shape[0] != batch:
            raise ValueError(f"input {name!r} has shape {x.shape}: a batched workload's "
                             f"inputs lead with the batch ({batch})")
        live |= (x.reshape(batch, -1) != 0).any(axis=1)
    return InputProfile(batch, tuple(int(i) for i in np.flatnonzero(live)))


def plan_batch(profile: InputProfile, granule: int) -> int:
    """The samples of the plan for ``profile``: the full batch when no sample is padding,
    else the live ones rounded up to ``granule`` samples (at most the batch; 0 when none is
    live: the run is the padding's output alone)."""
    if not profile.padded:
        return profile.batch
    return min(profile.batch, -(-len(profile.live) // granule) * granule)


def capacity(b: int, batch: int) -> int:
    """Live samples a plan of ``b`` samples runs: all ``b`` (the padding's output is the
    model's for one zero sample, measured once, :func:`run_replanned`)."""
    return b


def replan_reason(b: int, want: int, profile: InputProfile, predicted: Callable[[int], float],
                  threshold: float) -> str:
    """Why a model whose plan runs ``b`` samples re-plans to ``want`` (:func:`plan_batch`)
    for an input of ``profile``, or ``""`` when it keeps its plan: ``"live samples"`` when the
    plan cannot hold them (it must), ``"saving"`` when the new plan is predicted (``predicted``:
    samples -> cycles) at least ``threshold`` cheaper; the band between is the hysteresis."""
    if len(profile.live) > capacity(b, profile.batch):
        return "live samples"
    if want != b and predicted(want) <= (1 - threshold) * predicted(b):
        return "saving"
    return ""


def gather(inputs: Mapping[str, np.ndarray], profile: InputProfile, b: int
           ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The ``b`` samples a plan of ``b`` runs (the live ones, then padded ones up to ``b``),
    and for each of the batch's samples the row of the plan's outputs that holds its result:
    -1 for a padded sample when the run holds none (its output is the padding's,
    :func:`scatter`)."""
    if b == profile.batch:
        return dict(inputs), np.arange(profile.batch)
    live = list(profile.live)
    padded = [i for i in range(profile.batch) if i not in set(live)]
    chosen = live + padded[:b - len(live)]
    rows = np.full(profile.batch, len(live) if b > len(live) else -1)
    rows[live] = np.arange(len(live))
    return {n: np.asarray(x)[chosen] for n, x in inputs.items()}, rows


def scatter(outputs: Mapping[str, np.ndarray], rows: np.ndarray,
            pad: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The full batch's outputs from a plan's (``rows``: :func:`gather`'s), the padded
    samples that the run did not hold given ``pad``: the model's outputs for one zero
    sample.

    Raises
    ------
    ValueError
        When a row is the padding's and no ``pad`` is given.
    """
    if (rows < 0).any():
        if pad is None:
            raise ValueError("the run holds no padded sample: give the padding's output")
        return {n: np.concatenate([np.asarray(outputs[n]).reshape(-1, *np.shape(pad[n])[1:]),
                                   np.asarray(pad[n])])[rows] for n in pad}
    return {n: np.asarray(y)[rows] for n, y in outputs.items()}


@dataclass
class Replan:
    """One change of plan."""

    run: int
    reason: str
    profile: str
    samples_before: int
    samples_after: int
    predicted_before: float
    predicted_after: float

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "reason": self.reason, "profile": self.profile,
                "samples_before": self.samples_before, "samples_after": self.samples_after,
                "predicted_cycles_before": round(self.predicted_before),
                "predicted_cycles_after": round(self.predicted_after)}


@dataclass
class ReplanRun:
    """One model run of the workload on its plan."""

    step: Any
    profile: InputProfile
    samples: int
    start_cycle: int
    cycles: int
    predicted_cycles: float
    kernels: list[dict[str, Any]]
    whole_model: dict[str, Any] = field(default_factory=dict)
    variant: str = ""
    #: Cycles of the one run measuring the padding's output, when this run needed it first
    #: (in ``cycles`` too).
    pad_cycles: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.step.phase, "repeat": self.step.repeat,
                "model": self.step.model.stem, "variant": self.variant,
                "start_cycle": self.start_cycle, "swap_cycles": 0, "cycles": self.cycles,
                "predicted_cycles": round(self.predicted_cycles),
                "live_samples": len(self.profile.live), "batch": self.profile.batch,
                "plan_samples": self.samples, "pad_cycles": self.pad_cycles,
                "kernels": self.kernels,
                "whole_model": self.whole_model}


@dataclass
class ReplanReport:
    """What :func:`run_replanned` measured (its JSON: :meth:`to_dict`)."""

    variant: str
    #: The variant for the report (:meth:`fusion.runtime.reconfig.library.LibraryVariant.
    #: summary`'s fields).
    summary: dict[str, Any]
    timeline: list[ReplanRun]
    replans: list[Replan]
    static_plan_cycles: int
    threshold: float
    wall_seconds: float

    @property
    def total_cycles(self) -> int:
        return sum(r.cycles for r in self.timeline)

    def to_dict(self) -> dict[str, Any]:
        return {"format": "hwgen-workload-run", "version": 1, "ok": True,
                "policy": "replan", "variants": {self.variant: self.summary},
                "total_cycles": self.total_cycles, "kernel_cycles": self.total_cycles,
                "swaps": 0, "swap_cycles": 0, "threshold": self.threshold,
                "replans": [r.to_dict() for r in self.replans],
                "static_plan_cycles": self.static_plan_cycles,
                "timeline": [r.to_dict() for r in self.timeline],
                "wall_seconds": round(self.wall_seconds, 2)}


def run_replanned(steps: list[Any], inputs: list[Mapping[str, np.ndarray]], *, batch: int,
                  variant: str, summary: dict[str, Any], compile_for: Callable[[Any, int], Any],
                  run: Callable[[Any, Mapping[str, np.ndarray]], Any],
                  check: Callable[[Any, Any, Mapping[str, np.ndarray], Mapping], Any],
                  granule: Callable[[Any], int], threshold: float = THRESHOLD,
                  progress: Callable[[str], None] | None = None) -> ReplanReport:
    """Run ``steps`` (a workload's, :meth:`Workload.steps`) on one variant, re-planning as
    the module docstring says.

    Parameters
    ----------
    steps, inputs
        The workload's runs, and each phase's input values (the full batch).
    batch : int
        The batch every model runs at.
    variant, summary
        The variant's name and its description, for the report.
    compile_for : callable
        ``compile_for(model_path, b)``: the model compiled at a batch of ``b`` samples.
    run : callable
        ``run(plan, values)``: the :class:`~fusion.runtime.run_report.RunReport` of a plan on
        ``values`` (every kernel shadow-checked).
    check : callable
        ``check(model_path, full_plan, full_inputs, full_outputs)``: the whole-model check of
        a run's outputs on the full batch (raises when they are beyond its bound); its
        ``to_dict()`` is reported.
    granule : callable
        ``granule(plan)``: samples a plan rounds up to (:func:`plan_batch`).
    threshold : float
        The saving (a share of the predicted cycles) that makes a smaller plan worth it.

    Raises
    ------
    ValueError
        A threshold outside [0, 1).
    """
    if not 0 <= threshold < 1:
        raise ValueError(f"the re-plan threshold must be from 0 to below 1, not {threshold}")
    began = time.perf_counter()
    say = progress or (lambda line: None)
    plans: dict[tuple[Any, int], Any] = {}

    def plan(model, b: int):
        if (model, b) not in plans:
            plans[(model, b)] = compile_for(model, b)
        return plans[(model, b)]

    timeline: list[ReplanRun] = []
    replans: list[Replan] = []
    current: dict[Any, int] = {}  # model -> samples of its plan in use
    first: dict[Any, int] = {}  # model -> samples of its first plan
    pads: dict[Any, Any] = {}  # model -> the run of its batch-1 plan on a zero sample

    def predicted(model, n: int) -> float:
        return plan(model, n).predicted_cycles if n else 0.0

    def padding(model, values) -> Any | None:
        """The padding's output, the model's run on one zero sample (on the accelerator,
        once per model): that run's report the first time, None after (its outputs are in
        ``pads``)."""
        if model in pads:
            return None
        say(f"measuring {model.name} on one zero sample (the padding's output)")
        pads[model] = run(plan(model, 1), {n: np.zeros_like(np.asarray(x)[:1])
                                           for n, x in values.items()})
        return pads[model]

    clock = 0
    for t, step in enumerate(steps):
        values = inputs[step.phase]
        profile = input_profile(values, batch)
        model = step.model
        full = plan(model, batch)
        want = plan_batch(profile, granule(full))
        if model not in current:
            current[model] = first[model] = want
        else:
            b = current[model]
            reason = replan_reason(b, want, profile, lambda n, m=model: predicted(m, n),
                                   threshold)
            if reason:
                before, after = predicted(model, b), predicted(model, want)
                replans.append(Replan(t, reason, profile.describe(), b, want, before, after))
                say(f"run {t + 1}: re-planned for {profile.describe()} ({reason}): "
                    f"{b} -> {want} samples, predicted {before:,.0f} -> {after:,.0f} cycles")
                current[model] = want
        b = current[model]
        run_values, rows = gather(values, profile, b)
        pad_run = padding(model, values) if (rows < 0).any() else None
        pad = pads[model].outputs if (rows < 0).any() else None
        runs = ([pad_run] if pad_run else []) + ([run(plan(model, b), run_values)] if b else [])
        pad_cycles = pad_run.total_cycles if pad_run else 0
        cycles = sum(r.total_cycles for r in runs)
        outputs = scatter(runs[-1].outputs if b else pad, rows, pad)
        whole = check(model, full, values, outputs)
        say(f"run {t + 1}/{len(steps)}: {model.name} (phase {step.phase}), "
            f"{profile.describe()}, plan of {b} samples: {cycles - pad_cycles:,} cycles"
            + (f" (and {pad_cycles:,} measuring the padding's output)" if pad_cycles else ""))
        timeline.append(ReplanRun(step, profile, b, clock, cycles,
                                  predicted(model, b) + (predicted(model, 1) if pad_run
                                                         else 0.0),
                                  [kernel_dict(k) for r in runs for k in r.kernels],
                                  whole.to_dict(), variant=variant, pad_cycles=pad_cycles))
        clock += cycles
    # the first plan kept throughout (where it holds the run's live samples; the full plan
    # where it does not): each distinct (phase, plan) run once; each model's padding output,
    # when one of its runs needs it, measured once
    static, seen, padded = 0, {}, set()
    for r in timeline:
        model, b = r.step.model, first[r.step.model]
        if len(r.profile.live) > capacity(b, batch):
            b = batch
        run_values, rows = gather(inputs[r.step.phase], r.profile, b)
        key = (r.step.phase, b)
        if key not in seen:
            if r.samples == b:
                seen[key] = r.cycles - r.pad_cycles
            else:
                say(f"measuring phase {r.step.phase} on the first plan ({b} samples)")
                seen[key] = run(plan(model, b), run_values).total_cycles if b else 0
        static += seen[key]
        if (rows < 0).any() and model not in padded:
            padded.add(model)
            padding(model, inputs[r.step.phase])
            static += pads[model].total_cycles
    return ReplanReport(variant, summary, timeline, replans, static, threshold,
                        time.perf_counter() - began)

