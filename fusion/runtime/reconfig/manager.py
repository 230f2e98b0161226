"""The runtime reconfiguration manager: a workload on a library of variants, swapping the
bitstream when it pays.

:func:`run_workload` does, for a :class:`~fusion.runtime.reconfig.workload.Workload` and a
library (:func:`fusion.runtime.reconfig.library.open_library`):

1. **Prices** every model on every variant: each model is compiled for each variant (the
   variant's platform and the cost model given; each compile a task, on forks of this process
   with ``--jobs``: :func:`price`), and a run's predicted cost is the sum of its kernels'
   predicted cycles. A variant that cannot compile a model (a layer that does not
   fit, an op with no kernel and no host fallback) cannot run it (``inf``). Every kernel a plan
   puts on a variant must be one its descriptor's capabilities cover
   (:func:`fusion.runtime.reconfig.library.check_covers`); otherwise the descriptor is refused.
2. **Decides** the variant of each run: ``online`` (:class:`~fusion.runtime.reconfig.planner.
   WorkFunction`, from each run's predicted costs as it comes, with no look-ahead) or
   ``offline`` (:func:`~fusion.runtime.reconfig.planner.offline_plan` over the whole
   workload's predictions).
3. **Runs** each model run on the Verilator build of its variant (:func:`fusion.runtime.run.
   run_compiled`: every kernel shadow-checked bit for bit against the reference), checks its
   outputs against the model as imported (:mod:`fusion.runtime.whole_model`, as ``hwgen run``
   does), and adds the swap's cycles where the variant changes. The first configuration is not
   a swap.
4. **Measures the alternatives**: every (model, variant) pair the schedule did not run is run
   once, so that ``static_cycles`` (each variant running everything it can) and
   ``offline_optimal_cycles`` (the optimum over the *measured* cycles) are measured too. A
   repeat of a model on a variant is the same program on the same values in a fresh
   simulator, so it takes the cycles its first run took; the timeline's own repeats are run
   again all the same, and the report says if one ever differed.

Swaps happen between model runs, never inside one: a swap costs milliseconds (the
bitstream), a kernel microseconds, so a swap between two kernels of one run could not pay for
itself at any swap cost a real FPGA has (the benchmark shows the figures). Each run writes
its inputs and weights into the board's memory (the platform every variant of the library
shares) and reads its outputs back, so nothing a run needs is lost in a swap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fusion.compiler.scheduler import HERE, CompileTimes, Workers, run_tasks
from fusion.runtime.reconfig.library import LibraryVariant, check_covers
from fusion.runtime.reconfig.planner import INF, WorkFunction, offline_plan, static_plan
from fusion.runtime.reconfig.workload import Phase, Step, Workload
from hwgen.files import load_array

#: The policies :func:`run_workload` knows.
POLICIES = ("online", "offline")

FORMAT = "hwgen-workload-run"
VERSION = 1


@dataclass
class RunRecord:
    """One model run of the timeline: where it ran, what it cost, its kernels."""

    step: Step
    variant: str
    start_cycle: int
    swap_cycles: int
    cycles: int
    predicted_cycles: float
    kernels: list[dict[str, Any]]
    outputs: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    #: the whole-model check of its outputs (:meth:`WholeModelCheck.to_dict`)
    whole_model: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.step.phase, "repeat": self.step.repeat,
                "model": self.step.model.stem, "variant": self.variant,
                "start_cycle": self.start_cycle, "swap_cycles": self.swap_cycles,
                "cycles": self.cycles, "predicted_cycles": round(self.predicted_cycles),
                "kernels": self.kernels, "whole_model": self.whole_model}


@dataclass
class WorkloadReport:
    """What :func:`run_workload` measured (its JSON: :meth:`to_dict`)."""

    policy: str
    variants: list[LibraryVariant]
    timeline: list[RunRecord]
    swap_costs: list[int]
    predicted: dict[str, dict[str, float]]  # model -> variant -> predicted cycles (inf: cannot)
    measured: dict[str, dict[str, int | None]]  # model -> variant -> measured cycles
    refused: dict[str, dict[str, str]]  # model -> variant -> why it cannot run it
    fusion: dict[str, Any]
    wall_seconds: float
    repeat_mismatches: list[str]

    @property
    def kernel_cycles(self) -> int:
        return sum(r.cycles for r in self.timeline)

    @property
    def swap_cycles(self) -> int:
        return sum(r.swap_cycles for r in self.timeline)

    @property
    def swaps(self) -> int:
        return sum(1 for r in self.timeline if r.swap_cycles)

    @property
    def total_cycles(self) -> int:
        return self.kernel_cycles + self.swap_cycles

    def _measured_table(self) -> list[list[float]]:
        return [[INF if self.measured[r.step.model.stem][v.name] is None
                 else float(self.measured[r.step.model.stem][v.name]) for v in self.variants]
                for r in self.timeline]

    def static_cycles(self) -> dict[str, int | None]:
        """Each variant's total if it ran every run (None: it cannot run one of them)."""
        table = self._measured_table()
        out = {}
        for i, v in enumerate(self.variants):
            total = static_plan(table, self.swap_costs, i).total
            out[v.name] = None if math.isinf(total) else int(total)
        return out

    def offline_optimal_cycles(self) -> int:
        """The best schedule over the measured cycles, swaps included."""
        return int(offline_plan(self._measured_table(), self.swap_costs).total)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "ok": True, "policy": self.policy,
            "total_cycles": self.total_cycles, "kernel_cycles": self.kernel_cycles,
            "swaps": self.swaps, "swap_cycles": self.swap_cycles,
            "static_cycles": self.static_cycles(),
            "offline_optimal_cycles": self.offline_optimal_cycles(),
            # each variant as the run priced it: the swap cost it used (--swap-cycles, or the
            # descriptor's), beside the descriptor's own figure
            "variants": {v.name: {**v.summary(), "reconfig_cycles": self.swap_costs[i],
                                  "descriptor_reconfig_cycles": v.reconfig_cycles}
                         for i, v in enumerate(self.variants)},
            "predicted": {m: {v: (None if math.isinf(c) else round(c)) for v, c in row.items()}
                          for m, row in self.predicted.items()},
            "measured": self.measured,
            "refused": self.refused,
            "timeline": [r.to_dict() for r in self.timeline],
            "fusion": self.fusion,
            "repeat_mismatches": self.repeat_mismatches,
            "wall_seconds": round(self.wall_seconds, 2),
        }


def kernel_dict(k) -> dict[str, Any]:
    """A kernel of :class:`fusion.runtime.run.KernelRun` for the report."""
    return {"name": k.name, "ops": list(k.ops), "cycles": k.cycles,
            "predicted_cycles": round(k.predicted_cycles), "macs": k.macs,
            "ideal_cycles": k.ideal_cycles, "utilization": round(k.utilization, 4),
            "bytes_read": int(k.counters.get("bytes_read", 0)),
            "bytes_written": int(k.counters.get("bytes_written", 0))}


def phase_inputs(phase: Phase, graph, seed: int, saturate: bool) -> dict[str, np.ndarray]:
    """A phase's input values: its files (checked against the graph, and finite as
    ``hwgen run`` checks them), or random ones."""
    from fusion.reference.executor import finite_inputs
    from fusion.runtime.run import random_inputs

    values = random_inputs(graph, seed)
    model = phase.model.name
    for name, path in phase.inputs:
        if not name:
            if len(graph.inputs) != 1:
                raise ValueError(f"{model} has inputs {', '.join(graph.inputs)}: name each in "
                                 f"the workload's input object")
            name = graph.inputs[0]
        if name not in graph.inputs:
            raise ValueError(f"{model} has no input {name!r} (its inputs: "
                             f"{', '.join(graph.inputs)})")
        value = load_array(path, "input")
        want = tuple(graph.tensors[name].shape)
        if tuple(value.shape) != want:
            raise ValueError(f"input {path} has shape {tuple(value.shape)}, but {name!r} of "
                             f"{model} has shape {want}")
        values[name] = value
    return finite_inputs(values, saturate=saturate)


def price(workload: Workload, library: list[LibraryVariant],
          compile_for: Callable[[Any, LibraryVariant, bool], Any], *,
          workers: Workers = HERE, local: bool = True, times: CompileTimes | None = None
          ) -> tuple[dict, dict, dict, dict]:
    """Compile every model for every variant: each (model, variant) compile a task
    (:func:`fusion.compiler.scheduler.run_tasks`), on forks of this process when ``workers``
    has more than one job and the first compiles predict it pays; a compile on a fork keeps
    its own stages on it.

    Parameters
    ----------
    workload, library, compile_for
        As :func:`run_workload` takes them.
    workers : Workers
        Local processes only: a Dask cluster's workers do not hold the kernel cache's folder.
    local : bool
        False keeps the compiles here (a cost model that holds files or connections).
    times : CompileTimes, optional
        Receives each compile's seconds, as stage ``"library compiles"``.

    Returns
    -------
    graphs, compiled, predicted, refused
        By model stem: the graph; the compiled plan per variant name; its predicted cycles
        per variant name (``inf`` where it cannot run); why a variant cannot run it.
    """
    from fusion.compiler.lower import CompileError
    from fusion.frontend.load import load_model

    graphs = {path.stem: load_model(path) for path in workload.models()}
    pairs = [(name, v) for name in graphs for v in library]

    def compile_one(pair: tuple[str, LibraryVariant]) -> tuple[Any, str]:
        name, v = pair
        try:
            return compile_for(graphs[name], v, True), ""
        except CompileError as exc:
            return None, str(exc).splitlines()[0]

    done = run_tasks(compile_one, pairs, workers=replace(workers, scheduler=""),
                     sizes=[len(graphs[name].nodes) for name, _ in pairs],
                     stage="library compiles", names=[f"{name} on {v.name}" for name, v in pairs],
                     times=times, local=local)
    compiled: dict = {name: {} for name in graphs}
    predicted: dict = {name: {} for name in graphs}
    refused: dict = {name: {} for name in graphs}
    for (name, v), (plan, why) in zip(pairs, done, strict=True):
        if plan is None:
            predicted[name][v.name] = INF
            refused[name][v.name] = why
            continue
        for k in plan.kernels:
            check_covers(v, k.spec.kind.name, k.spec.kind.stages(k.spec.params), k.name)
        compiled[name][v.name] = plan
        predicted[name][v.name] = float(plan.predicted_cycles)
    return graphs, compiled, predicted, refused


def run_workload(workload: Workload, library: list[LibraryVariant], *,
                 compile_for: Callable[[Any, LibraryVariant, bool], Any],
                 policy: str = "online", swap_cycles: int | None = None,
                 shadow_inputs: int = 0, seed: int = 0, compare_unfused: bool = False,
                 saturate_nonfinite: bool = False,
                 progress: Callable[[str], None] | None = None,
                 workers: Workers = HERE, local: bool = True) -> WorkloadReport:
    """Run ``workload`` on ``library`` (see the module docstring).

    Parameters
    ----------
    workload : Workload
    library : list of LibraryVariant
        The variants, on one platform.
    compile_for : callable
        ``compile_for(graph, variant, fusion)`` compiles a graph for a variant (the caller's
        cost model and kernel cache); raises CompileError when it cannot.
    policy : {"online", "offline"}
    swap_cycles : int, optional
        Cycles of one swap, for every variant; the descriptors' own figures by default.
    shadow_inputs : int
        Directed input sets each kernel also runs on (:func:`fusion.runtime.run.run_compiled`).
    seed : int
        Seed of random inputs and of the directed sets.
    saturate_nonfinite : bool
        Saturate infinities and read NaN as 0 in float inputs, instead of refusing them
        (``hwgen run --saturate-nonfinite``).
    compare_unfused : bool
        Also run each model unfused once, on the variant that ran it most (the report's
        fused-versus-unfused plot).
    progress : callable, optional
        Called with a line for each run.
    workers, local : Workers, bool
        Where the library's compiles run (:func:`price`).

    Raises
    ------
    ValueError
        An unknown policy, a negative swap cost, a step no variant can run, or a descriptor
        whose capabilities do not cover a kernel placed on it.
    ShadowMismatch
        A kernel differs from the reference (the run stops there).
    WholeModelMismatch
        A run's outputs are beyond the bound of the model as imported (the run stops there).
    """
    from fusion.runtime.run import run_compiled
    from fusion.runtime.whole_model import WholeModelMismatch, check_whole_model
    from sim.build import build_folder

    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose {' or '.join(POLICIES)}")
    if swap_cycles is not None and swap_cycles < 0:
        raise ValueError(f"--swap-cycles must be 0 or more, not {swap_cycles}")
    began = time.perf_counter()
    say = progress or (lambda line: None)
    unknown = [v for v in library if v.reconfig_cycles is None]
    if swap_cycles is None and unknown:
        raise ValueError(f"variant {unknown[0].name} has no reconfiguration cost "
                         f"({unknown[0].reconfig_reason or 'none recorded'}); give "
                         f"--swap-cycles N to price swaps")
    swap = [swap_cycles if swap_cycles is not None else v.reconfig_cycles for v in library]
    times = CompileTimes()
    with times.stage("library compiles"):
        graphs, compiled, predicted, refused = price(workload, library, compile_for,
                                                     workers=workers, local=local, times=times)
    say(f"compiled {len(graphs)} model(s) for {len(library)} variant(s) in "
        f"{times.stages['library compiles']:.1f} s {times.where['library compiles']}")
    steps = workload.steps()
    # each phase's inputs read and checked against its model before any simulation (its
    # repeats share them)
    inputs = [phase_inputs(p, graphs[p.model.stem], seed, saturate_nonfinite)
              for p in workload.phases]
    builds: dict[str, Any] = {}

    def run(v: LibraryVariant, plan, values, shadow: int):
        """``plan`` on ``v``'s Verilator build (built once, then cached by its hash)."""
        if v.name not in builds:
            builds[v.name] = build_folder(v.folder.directory)
        return run_compiled(plan, values, build=builds[v.name], shadow_inputs=shadow,
                            seed=seed)

    table = [[predicted[s.model.stem][v.name] for v in library] for s in steps]
    for t, row in enumerate(table):
        if all(math.isinf(c) for c in row):
            why = "; ".join(f"{v}: {r}" for v, r in refused[steps[t].model.stem].items())
            raise ValueError(f"no variant of the library can run {steps[t].model.name} ({why})")
    if policy == "offline":
        chosen = list(offline_plan(table, swap).variants)
    else:
        chosen = []
        online = WorkFunction(swap)  # decides each run from its own prices, no look-ahead
    measured: dict[str, dict[str, int | None]] = {
        m: {v.name: None for v in library} for m in predicted}
    timeline, clock, current, mismatches = [], 0, None, []
    for t, step in enumerate(steps):
        i = chosen[t] if policy == "offline" else online.choose(table[t])
        v, model = library[i], step.model.stem
        swapped = swap[i] if current is not None and current != i else 0
        current = i
        say(f"run {t + 1}/{len(steps)}: {step.model.name} (phase {step.phase}, repeat "
            f"{step.repeat}) on {v.name}" + (f" after a swap of {swapped:,} cycles"
                                             if swapped else ""))
        report = run(v, compiled[model][v.name], inputs[step.phase], shadow_inputs)
        # graphs[model] is the model as imported: compiling it made new graphs
        whole = check_whole_model(graphs[model], compiled[model][v.name].graph,
                                  inputs[step.phase], report.outputs)
        if not whole.ok:
            raise WholeModelMismatch(f"run {t + 1} ({step.model.name} on {v.name})", whole)
        cycles = sum(k.cycles for k in report.kernels)
        if measured[model][v.name] is None:
            measured[model][v.name] = cycles
        elif measured[model][v.name] != cycles:
            mismatches.append(f"{model} on {v.name}: {cycles} cycles, first run "
                              f"{measured[model][v.name]}")
        timeline.append(RunRecord(step, v.name, clock + swapped, swapped, cycles,
                                  predicted[model][v.name],
                                  [kernel_dict(k) for k in report.kernels], report.outputs,
                                  whole.to_dict()))
        clock += swapped + cycles
    # the alternatives the schedule did not take, measured once each
    first = {m: inputs[next(i for i, p in enumerate(workload.phases) if p.model.stem == m)]
             for m in graphs}  # each model's first phase's inputs
    for model, row in measured.items():
        for v in library:
            if row[v.name] is None and v.name in compiled[model]:
                say(f"measuring {model} on {v.name} (for the static and optimal totals)")
                report = run(v, compiled[model][v.name], first[model], 0)
                row[v.name] = sum(k.cycles for k in report.kernels)
    fusion = _fusion(timeline, library, graphs, compile_for, first, run, say) \
        if compare_unfused else {}
    return WorkloadReport(policy, library, timeline, swap, predicted, measured, refused,
                          fusion, time.perf_counter() - began, mismatches)


def _fusion(timeline: list[RunRecord], library: list[LibraryVariant], graphs: Mapping,
            compile_for, values: Mapping[str, Mapping[str, np.ndarray]], run,
            say) -> dict[str, Any]:
    """Each model unfused, once, on the variant that ran it most, beside its fused run."""
    by_name = {v.name: v for v in library}
    out = {}
    for model in graphs:
        runs = [r for r in timeline if r.step.model.stem == model]
        counts: dict[str, int] = {}
        for r in runs:
            counts[r.variant] = counts.get(r.variant, 0) + 1
        name = max(counts, key=lambda n: (counts[n], n))
        fused = next(r for r in runs if r.variant == name)
        say(f"running {model} unfused on {name} (fused versus unfused)")
        plan = compile_for(graphs[model], by_name[name], False)
        report = run(by_name[name], plan, values[model], 0)
        out[model] = {"variant": name,
                      "fused": [{"name": k["name"], "ops": k["ops"], "cycles": k["cycles"]}
                                for k in fused.kernels],
                      "unfused": [{"name": k.name, "ops": list(k.ops), "cycles": k.cycles}
                                  for k in report.kernels],
                      "fused_cycles": fused.cycles,
                      "unfused_cycles": sum(k.cycles for k in report.kernels)}
    return out
