"""The calibration sweep of ``hwgen calibrate``: kernels of every kind, on variant folders of
every platform, run on Verilator by any ``concurrent.futures`` executor, into a profile
database, resumably.

What is swept, on each variant folder (its platform comes with it):

- **GEMMs** (:func:`gemm_specs`): shapes log-uniform from 1 to 512 on each axis (odd sizes
  included), each stage set of the variant's chain fused and unfused, and the tilings the
  engine chooses between (the tiler's default, one-tile super tiles, single buffering, K
  chunking, the other loop order, B streamed in chunks for a single row block);
- **whole models' kernels** (:func:`model_specs`): the bundled example models
  (``examples/*.onnx``: convolutions through window loads, max pools, depthwise
  convolutions, residual passes, MLPs) and random networks (:mod:`sim.synthetic`: CNNs and
  MLPs of log-uniform shapes, so that passes, pools and convolutions of every size are
  measured, not only the examples' few) on random inputs, fused and unfused. The MLPerf
  Tiny models (``examples/real``) are never swept: they are the held-out workloads.

A sweep is cut into tasks (:class:`Task`): a variant folder and a few dozen GEMMs, or one
model, each one simulator launch. Tasks go to an executor (a local process pool by default,
a Dask cluster's ``client.get_executor()`` with ``--scheduler``); each worker builds (once,
under the build cache's lock) and runs in its own run folder, and returns rows as JSON. The
parent writes them to the database (:class:`fusion.cost.profiles.ProfileDB`) as they come
and shows a progress bar (runs done, runs a minute, ETA). A run already in the database (its
run key: the kernel, platform, seed and source) is not run again, so an interrupted sweep
resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusion.cost.data import Row
from fusion.kernels.codegen import ProgramTooLong
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.protocol import KernelRefused
from fusion.kernels.tiling import Tiling
from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig
from hwgen.reference import EpilogueParams

#: The source recorded for the sweep's runs (the runtime's are ``"runtime"``).
SOURCE = "calibrate"
#: GEMMs a task runs in one simulator launch.
GEMMS_PER_TASK = 24
#: Largest GEMM dimension of the sweep (log-uniform from 1).
MAX_DIM = 512
#: What a candidate measured at its model's placement adds to its seed (:func:`candidate_specs`):
#: more than any model's kernel count, so that no two candidates share one.
PLACED_SEED = 500_000
#: The bundled models whose kernels the sweep runs (the MLPerf Tiny ones are held out).
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _tilings() -> list[Tiling | None]:
    """The tilings a GEMM is swept with (those that do not fit a shape are refused there)."""
    out: list[Tiling | None] = [None, Tiling(tm=1, tn=1), Tiling(tm=2, tn=2, double_buffer=False),
                                Tiling(tm=1, tn=1, kt=16), Tiling(tm=2, tn=4, order="nm")]
    out += [Tiling(stream=q) for q in (2, 4)]  # refused where it does not fit
    return out


@dataclass(frozen=True)
class GemmSpec:
    """One swept GEMM, small enough to send to a worker (the kernel is built there)."""

    M: int
    K: int
    N: int
    stages: tuple[str, ...]
    fused: bool
    tiling: Tiling | None
    seed: int
    #: The workload the run belongs to (default: its GEMM problem).
    group: str = ""
    kgroup: int = 0
    kmajor_out: bool = False
    #: The epilogue's parameters (a model's layer: per-channel requantization, its residual
    #: op); None: drawn with the operands.
    epilogue: EpilogueParams | None = field(default=None, compare=False)
    #: Its regions' word addresses as ``(region, address)`` pairs (a model's layer where the
    #: model's memory plan puts it); None: built alone.
    placement: tuple[tuple[str, int], ...] | None = None

    def case(self, config: VariantConfig):
        """The :class:`sim.gemm_check.GemmCase` (a grouped GEMM's B zero off its blocks)."""
        from sim.gemm_check import GemmCase, grouped_problem, random_problem

        problem = (grouped_problem(config, self.M, self.K, self.N, self.kgroup, self.stages,
                                   self.seed) if self.kgroup else None)
        if self.epilogue is not None:
            problem = problem or random_problem(self.M, self.K, self.N, self.stages, self.seed)
            # the layer's parameters; per channel, the drawn scale on every channel
            mult, shift = problem.params.mult, problem.params.shift
            problem = dataclasses.replace(
                problem, params=self.epilogue, mult=np.full(self.N, mult, np.int32),
                shift=np.full(self.N, shift, np.int32))
        return GemmCase(self.M, self.K, self.N, stages=self.stages, fused=self.fused,
                        tiling=self.tiling, seed=self.seed, problem=problem,
                        kgroup=self.kgroup, kmajor_out=self.kmajor_out,
                        placement=self.placement)

    def features(self, config: VariantConfig, case=None) -> GemmFeatures:  # noqa: ANN001
        """The features of its kernel (built by ``case``, its :meth:`case` by default), at
        its placement."""
        case = case or self.case(config)
        return GemmFeatures.from_kernel(case.kernel(config)).at(dict(self.placement or ()))

    @property
    def workload(self) -> str:
        """The GEMM problem (cross-validation keeps its tilings and fusions together), or
        the model it was drawn from (:func:`candidate_specs`)."""
        return self.group or f"gemm {self.M}x{self.K}x{self.N} {','.join(self.stages) or 'none'}"


def _log_uniform(rng: random.Random) -> int:
    return max(1, min(MAX_DIM, round(math.exp(rng.uniform(0.0, math.log(MAX_DIM))))))


def gemm_specs(config: VariantConfig, samples: int,
               seed: int) -> list[tuple[GemmSpec, GemmFeatures]]:
    """``samples`` GEMMs that build on ``config``, with their features (module docstring).

    Drawn with ``seed``; a draw the variant refuses (a tiling or pass that does not fit, a
    program too long for the instruction memory) is skipped, as in :mod:`sim.calibrate`.
    """
    rng = random.Random(seed)
    chain = config.epilogue
    stage_sets = [s for s in ((), ("bias", "requant", "relu"), ("bias", "requant"),
                              ("requant", "residual"), chain) if set(s) <= set(chain)]
    out: list[tuple[GemmSpec, GemmFeatures]] = []
    tries = 0
    while len(out) < samples and tries < 50 * samples:
        tries += 1
        m, k, n = (_log_uniform(rng) for _ in range(3))
        stages = rng.choice(stage_sets)
        fused = True if not stages else rng.random() < 0.7
        tiling = rng.choice(_tilings())
        spec = GemmSpec(m, k, n, tuple(stages), fused, tiling, seed * 1_000_003 + tries)
        try:
            kernel = spec.case(config).kernel(config)
        except (KernelRefused, ProgramTooLong, ValueError):
            continue  # refused as illegal, too long, or too big for the variant's memory
        out.append((spec, GemmFeatures.from_kernel(kernel)))
    return out


def candidate_specs(model: str, config: VariantConfig, platform: PlatformConfig,
                    seed: int, network: int = -1) -> list[tuple[GemmSpec, GemmFeatures]]:
    """Every candidate the engine prices for each GEMM kernel of ``model`` (or of the random
    network of seed ``network``, :mod:`sim.synthetic`, grouped as that network's workload;
    seeded by the network, so that two networks' identical candidates are two runs) (its
    :meth:`~fusion.kernels.gemm.kind.GemmKind.variants`: the tiler's best tilings, the best
    of each loop order, streamed B), fused and unfused, as GEMMs of the model's workload:
    what selection regret is measured on (how much slower the predicted-best candidate of a
    kernel is than its measured-best). Each keeps its layer's epilogue parameters (a GEMM
    that computes the same; only the operands are random, seeded). Their workload is the
    model's as ``hwgen run --db`` records it (``model`` and the graph's name).

    Each candidate is measured built alone, and those with the regions of the kernel the
    model runs (its tilings) also where the model's memory plan puts that kernel: on a DRAM
    the banks its regions fall in change its cycles, and the engine chooses among them
    there (:mod:`fusion.compiler.placed_choice`). A placed candidate's seed is its alone
    twin's plus :data:`PLACED_SEED`, so that both are stored (a run's key holds the seed)."""
    from fusion.kernels.gemm.params import GemmParams

    compiled = _compile(model, network, True, config, platform)
    group = f"network {network}" if network >= 0 else f"model {compiled.graph.name}"
    first = (network if network >= 0 else seed) * 1_000_003
    out: dict[tuple, tuple[GemmSpec, GemmFeatures]] = {}
    for i, k in enumerate(compiled.kernels):
        p = k.spec.params
        if not isinstance(p, GemmParams):
            continue
        regions = k.spec.regions(config)
        placement = tuple(sorted(k.compiled.placement.items()))
        for fused in (True, False) if p.stages else (True,):
            base = dataclasses.replace(p, tiling=None, fused=fused)
            for v in k.spec.kind.variants(config, base):
                spec = GemmSpec(v.M, v.K, v.N, tuple(v.stages), v.fused, v.tiling, first + i,
                                group, v.kgroup, v.kmajor_out, v.epilogue)
                placed = ([dataclasses.replace(spec, seed=spec.seed + PLACED_SEED,
                                               placement=placement)]
                          if k.spec.kind.regions(config, v) == regions else [])
                for s in (spec, *placed):
                    try:
                        features = s.features(config)
                    except (KernelRefused, ProgramTooLong, ValueError):
                        continue
                    out.setdefault((s.M, s.K, s.N, s.stages, s.fused, s.tiling, s.kgroup,
                                    s.kmajor_out, s.placement), (s, features))
    return list(out.values())


def model_specs(networks: int = 0, seed: int = 0) -> list[tuple[str, int, bool]]:
    """The whole-model runs of a sweep, as ``(model, network, fused)``: each bundled example
    (``network`` -1), then ``networks`` random networks (:func:`network_seed`; ``model``
    empty), each fused and unfused."""
    models = [(str(p), -1) for p in sorted(EXAMPLES.glob("*.onnx"))]
    models += [("", network_seed(seed, i)) for i in range(networks)]
    return [(m, n, fused) for m, n in models for fused in (True, False)]


def network_seed(seed: int, index: int) -> int:
    """The seed of a sweep's ``index``-th random network (:func:`sim.synthetic.network`)."""
    return seed * 10_007 + index


@dataclass(frozen=True)
class Task:
    """One simulator launch of a sweep: GEMMs on a variant folder, or one model's kernels.

    Attributes
    ----------
    variant : str
        The variant folder (its platform with it).
    gemms : tuple of GemmSpec
        The GEMMs to run (a GEMM task).
    model : str
        An ONNX model whose kernels to run (a model task), ``""`` otherwise.
    network : int
        The seed of a random network (:mod:`sim.synthetic`) whose kernels to run (a model
        task), -1 otherwise.
    fused : bool
        The model compiled with fusion (a model task).
    seed : int
        The model's random inputs.
    """

    variant: str
    gemms: tuple[GemmSpec, ...] = ()
    model: str = ""
    network: int = -1
    fused: bool = True
    seed: int = 0

    @property
    def workload(self) -> str:
        """A model task's workload name (its rows' group in cross-validation)."""
        return f"network {self.network}" if self.network >= 0 else f"model {Path(self.model).stem}"

    @property
    def runs(self) -> int:
        """Kernels the task runs (a model task's are known once it is compiled: counted 1)."""
        return len(self.gemms) or 1


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    """The tool versions a row records: asked once per worker process, not once per task
    (``check_toolchain`` runs ``verilator --version``)."""
    import importlib.metadata

    from sim import toolchain

    out = {dist: importlib.metadata.version(dist) for dist in ("numpy", "scikit-learn",
                                                               "amaranth", "cocotb")}
    try:
        out["verilator"] = toolchain.check_toolchain().version_text
    except Exception as exc:  # the run itself will say what is missing
        out["verilator"] = f"unknown ({type(exc).__name__})"
    return out


def run_task(task: Task) -> list[dict[str, Any]]:
    """Run ``task`` (in a worker: builds the folder's simulation if needed) and return its rows
    as :meth:`fusion.cost.data.Row.to_dict` dicts (JSON travels to any executor)."""
    from hwgen.gateware.folder import open_variant
    from sim.build import build_folder

    variant = open_variant(task.variant)
    config, platform = variant.config, variant.platform
    build = build_folder(task.variant)
    versions = dict(_versions())
    rows: list[Row] = []
    if task.gemms:
        from sim.gemm_check import run_gemms

        cases = [g.case(config) for g in task.gemms]
        reports = run_gemms(config, cases, build=build)
        for spec, case, report in zip(task.gemms, cases, reports, strict=True):
            extra = {"seed": spec.seed, "versions": versions,
                     "sim_seconds": round(report.wall_seconds, 4)}
            if spec.placement:
                extra["placement"] = dict(spec.placement)
            rows.append(Row(spec.features(config, case), dict(report.counters), report.ok, extra,
                            platform, spec.workload))
    else:
        rows = _model_rows(task, config, platform, build, versions)
    return [r.to_dict() for r in rows]


def _model_rows(task: Task, config: VariantConfig, platform: PlatformConfig, build,
                versions: dict[str, str]) -> list[Row]:
    from fusion.runtime.online import kernel_rows
    from fusion.runtime.run import random_inputs, run_compiled

    compiled = _compile(task.model, task.network, task.fused, config, platform)
    report = run_compiled(compiled, random_inputs(compiled.graph, task.seed), build=build)
    return kernel_rows(compiled, report, platform, workload=task.workload,
                       extra={"seed": task.seed, "versions": versions, "fused": task.fused})


def _compile(model: str, network: int, fused: bool, config: VariantConfig,
             platform: PlatformConfig):
    """A model task's model (a file, or the random network of seed ``network``), compiled."""
    from fusion.compiler.plan import compile_model
    from fusion.frontend import import_onnx
    from fusion.kernels.cache import KernelCache
    from sim.synthetic import network as random_network

    source = random_network(network) if network >= 0 else model
    return compile_model(import_onnx(source), config, cache=KernelCache(disk=False),
                         fusion=fused, platform=platform)


@dataclass
class SweepResult:
    """What a sweep did."""

    tasks: int = 0
    runs: int = 0
    added: int = 0
    skipped: int = 0
    #: Runs whose output differed from the reference (recorded with ``ok`` false).
    mismatched: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Wall seconds planning took (compiling the models it draws from), before any run.
    planning_seconds: float = 0.0

    @property
    def runs_per_minute(self) -> float:
        return 60.0 * self.runs / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "runs": self.runs, "added": self.added,
                "skipped": self.skipped, "mismatched": self.mismatched, "failed": self.failed,
                "seconds": round(self.seconds, 1),
                "planning_seconds": round(self.planning_seconds, 1),
                "runs_per_minute": round(self.runs_per_minute, 1)}


def _candidates_of(folder: str, model: str, seed: int, network: int
                   ) -> list[tuple[GemmSpec, GemmFeatures]]:
    """A planning task: :func:`candidate_specs` on the variant ``folder`` (opened where it
    runs: only names and numbers travel)."""
    from hwgen.gateware.folder import open_variant

    variant = open_variant(folder)
    return candidate_specs(model, variant.config, variant.platform, seed, network)


def _model_features(folder: str, model: str, network: int, fused: bool) -> list[Any]:
    """A planning task: the features of each kernel of a model task (what its rows' keys
    hold), to leave out a model the database already holds whole."""
    from hwgen.gateware.folder import open_variant

    variant = open_variant(folder)
    config = variant.config
    compiled = _compile(model, network, fused, config, variant.platform)
    return [k.spec.kind.features(config, k.spec.params) for k in compiled.kernels]


def plan_tasks(folders: Sequence[str], samples: int, seed: int, done: set[str],
               run_key: Callable[[Row, str, int], str], *, models: bool = True,
               networks: int = 0, candidates_of: Sequence[str] = (),
               network_candidates: int = 0, executor: Executor | None = None,
               progress: bool = False) -> tuple[list[Task], int]:
    """The tasks of a sweep over ``folders``, leaving out every run whose key is in ``done``
    (what the database holds); and how many runs were left out. ``models``: the bundled
    examples' kernels too; ``networks``: that many random networks' kernels too;
    ``candidates_of``: every candidate of these models' GEMMs too (:func:`candidate_specs`);
    ``network_candidates``: of the first that many random networks' GEMMs too (training data
    shaped like a model's candidates: convolutions' GEMMs, the engine's tilings, alone and
    where the network's memory plan puts them).

    Planning compiles every model and network it draws from; those compiles are tasks on
    ``executor`` (the sweep's workers, local or Dask) when given, joined in their order, so
    that the tasks are the same wherever they were planned; ``progress``: a line counting
    them."""
    from fusion.progress import steps
    from hwgen.gateware.folder import open_variant

    def submit(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        if executor is None:
            return lambda: fn(*args)
        return executor.submit(fn, *args).result

    # every compile of every folder submitted first: the workers plan while results come in
    planned = []
    for folder in folders:
        variant = open_variant(folder)
        drawn = [submit(_candidates_of, str(folder), model, seed, -1) for model in candidates_of]
        drawn += [submit(_candidates_of, str(folder), "", seed, network_seed(seed, i))
                  for i in range(network_candidates)]
        whole = [(m, n, f, submit(_model_features, str(folder), m, n, f))
                 for m, n, f in model_specs(networks, seed) if n >= 0 or models]
        planned.append((folder, variant, drawn, whole))
    total = sum(len(d) + len(w) for _, _, d, w in planned)
    bar = iter(steps(range(total), "planning", show=progress, unit="compile"))
    tasks: list[Task] = []
    skipped = 0
    for folder, variant, drawn, whole in planned:
        config, platform = variant.config, variant.platform
        todo = []
        specs = gemm_specs(config, samples, seed)
        for result in drawn:
            specs += result()
            next(bar, None)
        for spec, features in specs:
            if run_key(Row(features, {}, platform=platform), SOURCE, spec.seed) in done:
                skipped += 1
            else:
                todo.append(spec)
        for i in range(0, len(todo), GEMMS_PER_TASK):
            tasks.append(Task(str(folder), tuple(todo[i:i + GEMMS_PER_TASK])))
        for model, network, fused, result in whole:
            keys = [run_key(Row(f, {}, platform=platform), SOURCE, seed) for f in result()]
            next(bar, None)
            if keys and all(k in done for k in keys):
                skipped += len(keys)
                continue
            tasks.append(Task(str(folder), model=model, network=network, fused=fused,
                              seed=seed))
    for _ in bar:  # closes the line
        pass
    return tasks, skipped


def run_sweep(tasks: Iterable[Task], sink: Callable[[list[Row]], int], *,
              executor: Executor | None = None, progress: bool = True) -> SweepResult:
    """Run ``tasks`` (on ``executor``, else here, one after another), handing each task's
    rows to ``sink`` (which stores them and returns how many were new) as it finishes.

    A task that fails is named in the result (and its error), never silently dropped; the
    others go on.
    """
    from tqdm import tqdm

    tasks = list(tasks)
    result = SweepResult(tasks=len(tasks))
    began = time.perf_counter()
    bar = tqdm(total=sum(t.runs for t in tasks), unit="run", disable=not progress,
               dynamic_ncols=True)

    def measured(task: Task, run: Callable[[], list[dict[str, Any]]]) -> list[Row] | None:
        """The task's rows, or None with the task named in the result if it failed."""
        try:
            return [Row.from_dict(d) for d in run()]
        except Exception as exc:  # noqa: BLE001 -- recorded and reported, not lost
            result.failed.append(f"{_label(task)}: {type(exc).__name__}: {exc}")
            return None

    def take(task: Task, rows: list[Row] | None) -> None:
        if rows is None:
            return
        result.runs += len(rows)
        result.mismatched += sum(not r.ok for r in rows)
        # outside the task's errors: a sink that cannot store (a database error) stops the
        # sweep as what it is, never as a failed measurement
        result.added += sink(rows)
        bar.update(task.runs)
        minutes = (time.perf_counter() - began) / 60
        bar.set_postfix(runs_per_min=f"{result.runs / minutes:.0f}" if minutes else "-")

    futures: dict = {}
    try:
        if executor is None:
            for task in tasks:
                take(task, measured(task, lambda task=task: run_task(task)))
        else:
            futures = {executor.submit(run_task, task): task for task in tasks}
            for future in as_completed(futures):
                task = futures[future]
                take(task, measured(task, future.result))
    finally:
        for future in futures:  # stopped early: what has not started never will
            future.cancel()
        bar.close()
    result.seconds = time.perf_counter() - began
    return result


def _label(task: Task) -> str:
    what = (f"{len(task.gemms)} GEMMs" if task.gemms
            else f"{task.workload} {'fused' if task.fused else 'unfused'}")
    return f"{task.variant}: {what}"
