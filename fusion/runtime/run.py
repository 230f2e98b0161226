""":func:`run_compiled`: run a compiled model on the simulated accelerator.

Each kernel is one simulator job on the variant's build (built once, cached by its hash): its
operands are written at the planned addresses, its program runs to ``done``, and its output
region is read back together with the hardware counters. Host steps run in numpy with the
reference executor: layout and the model-boundary quantize/dequantize, and the compute ops the
plan put on the host (no accelerator kernel, or cheaper there); each is timed, and the report
counts the compute ones (``host_ops``).

The whole model is one simulator launch. The reference walks the plan first (host steps, and
each kernel's nodes one by one), which gives every kernel the values of its inputs; then the
model's kernels run back to back as jobs of one launch on one memory (a launch costs about
0.3 s, more than most kernels' simulation), then each kernel's directed sets; then the results
are checked in plan order. An input that an earlier kernel stored where this one reads it
(:meth:`fusion.compiler.memplan.MemoryPlan.in_place`) is not written: the kernel reads what
the hardware stored. The host writes the others from the reference's values, which are the
hardware's, as every kernel before is checked equal to the reference bit for bit, and the
first that is not stops the run.

Shadow execution: before its result is used, every kernel's output is compared bit for bit
with the reference executor running the kernel's nodes one by one (the unfused reference) on
the same input values. The first difference stops the run with :class:`ShadowMismatch`,
naming the kernel, its nodes and where the values differ. A kernel whose compiled metadata
does not match its operands (shapes, dtypes) is refused before it runs.

Two more checks run with every kernel, so that a fault the model's own values do not exercise
is still seen:

- **directed inputs**: in the same simulator launch, the kernel also runs on ``shadow_inputs``
  further sets of input values chosen to reach every stage's edge cases (negative and positive
  pre-activations, both saturations, each clamp bound, exact rounding ties where the
  multiplier allows them: :mod:`fusion.runtime.shadow_inputs`); each is checked against the
  reference like the model's own, and only the model's own result is used;
- **counter invariants** (:mod:`fusion.runtime.invariants`): after each run the hardware
  counters must agree with what the program implies (bytes read and written, k-slices,
  instructions retired, cycles at least the ideal and at least the analytical timing model's
  floor for correct hardware); a disagreement raises :class:`CounterViolation`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from fusion.compiler.plan import CompiledModel, HostStep, KernelStep
from fusion.ir.graph import Graph, GraphError, Node
from fusion.passes.layout_identity import layout_chain
from fusion.progress import steps as progress_steps
from fusion.reference import executor
from fusion.runtime.data_profile import TensorProfile, kernel_profiles
from fusion.runtime.invariants import MemoryWords, check_runs, timing_floor
from fusion.runtime.run_report import HostRun, KernelRun, RunReport, kernel_macs
from fusion.runtime.shadow_inputs import directed_inputs
from fusion.runtime.shadow_verdicts import VerdictStore
from hwgen.energy import estimate
from hwgen.perf import memory_summary


class ShadowMismatch(RuntimeError):
    """A kernel's hardware result differs from the reference: the run stopped there."""

    def __init__(self, kernel: str, message: str) -> None:
        super().__init__(message)
        self.kernel = kernel


class CounterViolation(ShadowMismatch):
    """A kernel's hardware counters disagree with its program (see
    :func:`fusion.runtime.invariants.check_counters`): the run stopped there.

    Attributes
    ----------
    kernel : str
    violations : list of fusion.runtime.invariants.Violation
        Each names the counter, the expected and the measured value.
    """

    def __init__(self, kernel: str, violations: list) -> None:
        super().__init__(kernel, f"kernel {kernel!r}: " + "; ".join(str(v) for v in violations)
                         + ". The hardware did other work than its program asks; the run "
                           "stopped here")
        self.violations = violations

#: Directed input sets each kernel also runs on by default (``run_compiled(shadow_inputs=)``).
DEFAULT_SHADOW_INPUTS = 2


def evaluate_nodes(graph: Graph, nodes: list[Node], env: dict[str, np.ndarray]) -> None:
    """Run ``nodes`` with the reference executor, adding their outputs to ``env``.

    A GEMM that reads its A through reshapes reads the tensor before them
    (:func:`fusion.compiler.kernels._gemm`), while its node still names the reshaped one:
    such an input is made first by running the layout chain from the tensor ``env`` has.
    Any other missing input is an error, not something to recompute.
    """
    made = {out for n in nodes for out in n.outputs}
    for node in nodes:
        for name in node.inputs:
            if name and name not in env and name not in made:
                chain = layout_chain(graph, name)
                starts = [k for k, n in enumerate(chain) if n.inputs[0] in env]
                if not starts:
                    raise KeyError(f"tensor {name!r} has no value, and no layout chain makes "
                                   f"it from one")
                for link in chain[starts[-1]:]:
                    executor.evaluate_node(graph, link, env)
        executor.evaluate_node(graph, node, env)


def check_dispatch(step: KernelStep, operands: Mapping[str, np.ndarray]) -> None:
    """Dispatch check: the compiled kernel's metadata (one schema for every kind,
    :mod:`fusion.kernels.program`) against what the plan asks of it (its kind and params)
    and the operands it is given (shapes, dtypes)."""
    meta, spec = step.compiled.meta, step.spec
    if meta["kind"] != spec.kind.name:
        raise GraphError(f"kernel {step.name!r} was compiled as a {meta['kind']} kernel, not "
                         f"{spec.kind.name}; recompile the model")
    want = spec.kind.key_params(spec.params)
    for key in sorted(set(want) | set(meta["params"])):
        if meta["params"].get(key) != want.get(key):
            raise GraphError(f"kernel {step.name!r} was compiled for {key} "
                             f"{meta['params'].get(key)}, but its nodes need {want.get(key)}; "
                             f"recompile the model")
    for name, (dtype, shape) in step.compiled.operands.items():  # in region order
        if name not in operands:
            raise GraphError(f"kernel {step.name!r}: no value for its operand {name!r}")
        value = operands[name]
        if list(np.shape(value)) != list(shape):
            raise GraphError(f"kernel {step.name!r} was compiled for operand {name} of shape "
                             f"{tuple(shape)}, not {np.shape(value)}; recompile the model")
        if np.asarray(value).dtype != np.dtype(dtype):
            raise GraphError(f"kernel {step.name!r} was compiled for {name} as {dtype}, "
                             f"not {np.asarray(value).dtype}")


def run_compiled(compiled: CompiledModel, inputs: Mapping[str, Any], *,
                 build: Any = None, shadow_inputs: int = DEFAULT_SHADOW_INPUTS,
                 seed: int = 0, profile_data: bool = False, jobs: int = 1,
                 verdicts: VerdictStore | None = None, progress: bool = False) -> RunReport:
    """Run ``compiled`` on the simulator with shadow checks (see the module docstring).

    Parameters
    ----------
    compiled : CompiledModel
    inputs : mapping
        One value per graph input.
    build : sim.build.BuildInfo, optional
        The variant's build (built and cached on first use otherwise).
    shadow_inputs : int
        Directed input sets each kernel also runs on, in the same simulator launch, checked
        against the reference (0: only the model's own values).
    seed : int
        Seed of the directed inputs' random part.
    profile_data : bool
        Also profile every integer tensor a kernel reads or writes, from the reference's
        values (:mod:`fusion.runtime.data_profile`): the report's ``data_profiles``.
    jobs : int
        Simulator processes at once. The model's kernels always run back to back on one
        memory in one of them (a kernel reads an input where its producer stored it); with
        more than 1, the directed sets are dealt out to the others and to it by their
        predicted cycles (:func:`sim.parallel.run_spread`).
    progress : bool
        Show progress lines for the reference walk and the checks (:mod:`fusion.progress`).
    verdicts : VerdictStore, optional
        Directed sets a program already passed on this build are not run again
        (:mod:`fusion.runtime.shadow_verdicts`); passes are recorded there. None: every set
        runs.

    Raises
    ------
    ShadowMismatch
        At the first kernel whose result, on the model's values or on a directed set, differs
        from the reference.
    CounterViolation
        At the first kernel whose counters disagree with its program (a ShadowMismatch).
    GraphError
        For inputs that do not match the graph.
    ValueError
        For a negative ``shadow_inputs``.
    """
    from sim.build import build_variant
    from sim.parallel import run_spread
    from sim.run import Job, MemoryImage, run_programs

    if not isinstance(shadow_inputs, int) or isinstance(shadow_inputs, bool) or (
            shadow_inputs < 0):
        raise ValueError(f"shadow_inputs is a count of directed input sets, 0 or more, not "
                         f"{shadow_inputs!r}")

    graph, config = compiled.graph, compiled.config
    build = build or build_variant(config)
    env: dict[str, np.ndarray] = dict(graph.initializers)
    env.update(executor.coerce_inputs(graph, inputs))
    began = time.perf_counter()
    host: list[HostRun] = []
    # 1. The reference walk: host steps run (and are timed) as the plan orders them, and each
    #    kernel's nodes run one by one (the unfused reference), which gives every kernel its
    #    input values before any hardware runs.
    planned = []  # (step, input sets, the reference's output on each, its verdict's key)
    sets_cached = 0  # directed sets not run: their program passed them on this build
    profiles: dict[str, TensorProfile] = {}  # each tensor's, from its first kernel
    for step in progress_steps(compiled.steps, "reference", show=progress, unit="step"):
        if isinstance(step, HostStep):
            t0 = time.perf_counter()
            # float ops between a dequantize and a quantize in float64, as the whole-model
            # check's reference (fusion.runtime.whole_model): float32 noise would round a
            # near-half either way, and later layers grow the 1 LSB
            executor.evaluate_node(graph, step.node, env, float64=True)
            seconds = time.perf_counter() - t0
            host.append(HostRun(step.name, step.node.op,
                                int(np.size(env[step.node.outputs[0]])), seconds, step.role,
                                step.reason, step.predicted_seconds))
            continue
        spec = step.spec
        sets = [{t: env[t] for t in spec.inputs}]
        key = None  # the verdict the directed sets of this program on this build record
        if verdicts is not None and shadow_inputs and hasattr(build, "digest"):
            key = verdicts.key(step.compiled.program, build.digest, shadow_inputs, seed)
        if key is not None and verdicts.passed(key):
            sets_cached += shadow_inputs
            key = None
        else:
            sets += directed_inputs(graph, spec, step.compiled, sets[0], config, shadow_inputs,
                                    seed=seed)
        wants = []
        for n, values in enumerate(sets):
            ref_env = {**values, **graph.initializers}
            evaluate_nodes(graph, [graph.node(x) for x in spec.nodes], ref_env)
            wants.append(ref_env[spec.output])
            if profile_data and n == 0:  # the model's own values, not the directed sets
                for p in kernel_profiles(graph, config, spec, ref_env):
                    profiles.setdefault(p.tensor, p)
        env[spec.output] = wants[0]
        planned.append((step, sets, wants, key))
    # 2. Every kernel on every set: first the model, its kernels back to back on one memory in
    #    one simulator process whatever ``jobs`` says (each keeps what the ones before it
    #    stored, and an input region that is an earlier kernel's output where it lies is not
    #    written: the hardware reads what the producer stored, so a memory plan that lets a
    #    kernel overwrite what a later one reads shows), then the directed sets, each kernel on
    #    its own, dealt out to ``jobs`` processes with the model's chain.
    spread = jobs > 1 and hasattr(build, "digest")  # processes at once (a simulator build)
    model_jobs, directed_jobs, host_bytes = [], [], 0
    step_jobs: dict[str, list[Job]] = {}  # each kernel's jobs: the model's, then the directed
    for step, sets, _, _ in planned:
        in_place = compiled.memory.in_place(step.name)
        for n, values in enumerate(sets):
            operands = step.spec.operands(graph, values, config)
            check_dispatch(step, operands)
            writes = step.compiled.memory(**operands)
            if n == 0:
                region_at = {r.addr: name for name, r in step.compiled.regions.items()}
                writes = [(addr, data) for addr, data in writes
                          if region_at[addr] not in in_place]
                host_bytes += sum(len(data) for addr, data in writes
                                  if step.spec.region_role(region_at[addr]) != "const")
            job = Job(program=step.compiled.program,
                      memory=MemoryImage(writes=tuple(writes), reads=step.compiled.reads),
                      name=step.name if n == 0 else f"{step.name}-directed{n}",
                      keep_memory=n == 0)
            (model_jobs if n == 0 else directed_jobs).append((job, step.predicted_cycles))
            step_jobs.setdefault(step.name, []).append(job)
    units = [[job for job, _ in model_jobs]] + [[job] for job, _ in directed_jobs]
    expected = [sum(c for _, c in model_jobs)] + [c for _, c in directed_jobs]
    launched = time.perf_counter()
    if not model_jobs:
        results = []
    elif spread:
        results = [r for part in run_spread(config, units, expected, jobs, build=build)
                   for r in part]
    else:
        results = run_programs(config, [j for u in units for j in u], build=build)
    sim_seconds = time.perf_counter() - launched
    model_results = iter(results[:len(model_jobs)])
    directed_results = iter(results[len(model_jobs):])
    # 3. The checks, kernel by kernel in plan order: the first difference stops the run. The
    #    model's kernels read what the kernels before them stored; each was checked equal to
    #    the reference before its readers are, so a difference names the kernel that made it.
    runs: list[KernelRun] = []
    for step, sets, wants, key in progress_steps(planned, "checks", show=progress, unit="kernel"):
        spec = step.spec
        done = [next(model_results)] + [next(directed_results) for _ in sets[1:]]
        # the floor of any data: a program that branches on data at its fastest
        fastest = spec.kind.fastest_params(config, spec.params)
        predicted = spec.kind.features(config, fastest).analytical_cycles()
        floor = timing_floor(config, step.compiled.program, predicted)
        checked = check_runs(config, step.compiled.program, [r.counters for r in done],
                             floor_cycles=floor,
                             memories=[MemoryWords(job.memory.writes, config.port_bytes)
                                       for job in step_jobs[step.name]])
        for n, (result, want, violations) in enumerate(zip(done, wants, checked, strict=True)):
            got = spec.result(graph, step.compiled.decode(result.outputs))
            if got.shape != want.shape or not np.array_equal(got, want):
                what = "" if n == 0 else f" on directed input set {n} of {len(sets) - 1}"
                raise ShadowMismatch(step.name, _mismatch(step, got, want, what))
            if violations:
                raise CounterViolation(step.name, violations)
            if n == 0:
                env[spec.output] = got
                macs = kernel_macs(graph, list(spec.nodes))
                ideal = -(-macs // (config.rows * config.cols))
                weights = spec.weight_bytes(config)
                runs.append(KernelRun(step.name, list(spec.nodes),
                                      int(result.counters["cycles"]), step.predicted_cycles,
                                      dict(result.counters), spec.describe(), macs, ideal,
                                      memory_summary(result.counters, config.port_bytes),
                                      estimate(result.counters, config, build.platform),
                                      max(ideal, -(-weights // config.port_bytes))))
        if key is not None and len(sets) > 1:  # every directed set passed: not run again
            verdicts.record(key)
    outputs = {name: env[name].astype(graph.tensors[name].dtype, copy=False)
               for name in graph.outputs}
    return RunReport(outputs, runs, compiled.memory.peak_bytes, time.perf_counter() - began,
                     host, compiled.batch, compiled.roofline_cycles, compiled.weight_bytes,
                     host_bytes, sim_seconds, sum(int(r.counters["cycles"]) for r in results),
                     [r.to_dict() for r in compiled.repacks],
                     [p.to_dict() for p in profiles.values()],
                     shadow_sets_run=sum(len(sets) - 1 for _, sets, _, _ in planned),
                     shadow_sets_cached=sets_cached,
                     sim_processes=min(jobs, len(units)) if spread and model_jobs else 1)


def _mismatch(step: KernelStep, got: np.ndarray, want: np.ndarray, what: str = "") -> str:
    where = f"kernel {step.name!r} ({' -> '.join(step.spec.nodes)}){what}"
    if got.shape != want.shape:
        return f"{where}: the hardware result has shape {got.shape}, the reference {want.shape}"
    diff = np.argwhere(got != want)
    first = tuple(int(i) for i in diff[0])
    return (f"{where}: {len(diff):,} of {got.size:,} elements differ from the unfused reference; "
            f"first at index {first}: hardware {got[first]}, reference {want[first]}. The "
            f"kernel's program or its output buffer is wrong; the run stopped here")


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for every graph input.

    Integer inputs take their whole range. A float input that is quantized takes values
    spanning its quantized range (a little beyond, so saturation is exercised); any other
    float input is standard normal.
    """
    from fusion.ir import ops

    rng = np.random.default_rng(seed)
    values = {}
    for name in graph.inputs:
        if name in graph.initializers:
            continue
        t = graph.tensors[name]
        if t.dtype != "float32":
            lo, hi = ops.INT_RANGE[t.dtype]
            values[name] = rng.integers(lo, hi + 1, t.shape).astype(t.dtype)
            continue
        span = _quantized_span(graph, name)
        if span is None:
            values[name] = rng.standard_normal(t.shape).astype(np.float32)
        else:
            lo, hi = span
            values[name] = rng.uniform(lo, hi, t.shape).astype(np.float32)
    return values


def _quantized_span(graph: Graph, name: str) -> tuple[float, float] | None:
    """The float range the first quantize reached from ``name`` maps onto, widened by 5%."""
    from fusion.ir import ops

    seen, todo = set(), [name]
    while todo:
        tensor = todo.pop()
        for node in graph.consumers(tensor):
            if node.name in seen:
                continue
            seen.add(node.name)
            out = graph.tensors[node.outputs[0]]
            if node.op == "quantize" and out.quant is not None and not out.quant.per_channel:
                lo, hi = ops.INT_RANGE[out.dtype]
                s, z = out.quant.scale[0], out.quant.zero_point[0]
                return (lo - z) * s * 1.05, (hi - z) * s * 1.05
            if node.op in ("reshape", "Reshape", "flatten", "Flatten", "transpose", "Transpose"):
                todo.append(node.outputs[0])
    return None
