"""What several commands share: reading variant options, stage lists and model inputs."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.files import check_regular, read_text
from hwgen.platform import DDR3_SPEEDGRADES, MEMORIES, REFRESH, PlatformConfig

#: ``--min-gain``'s default; fusion.compiler.engine.DEFAULT_MIN_GAIN, which the CLI does not
#: import before it must (tests/test_cli.py checks the two agree).
DEFAULT_MIN_GAIN = 0.02


def stage_list(text: str) -> tuple[str, ...]:
    if text.strip().lower() in ("", "none"):
        return ()
    stages = tuple(s.strip() for s in text.split(",") if s.strip())
    for stage in stages:
        if stage not in EPILOGUE_STAGES:
            raise argparse.ArgumentTypeError(
                f"unknown epilogue stage {stage!r}; the known stages are "
                f"{', '.join(EPILOGUE_STAGES)}")
    return stages


def _whole_number(text: str, lo: int, hi: int, expected: str) -> int:
    """``text`` as a whole number from ``lo`` to ``hi``, or argparse's error saying what was
    ``expected``."""
    try:
        value = int(text)
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"expected {expected}, not {text!r}")
    return value


def positive_int(text: str) -> int:
    """An option that counts something: a whole number, at least 1."""
    return _whole_number(text, 1, 1 << 62, "a whole number of at least 1")


def count(text: str) -> int:
    """An option that counts something that may be none: a whole number, at least 0."""
    return _whole_number(text, 0, 1000, "a whole number from 0 to 1000")


def cycles(text: str) -> int:
    """An option that is a number of clock cycles: a whole number, at least 0."""
    return _whole_number(text, 0, 1 << 62, "a whole number of cycles, at least 0")


def fraction(text: str) -> float:
    """An option that is a share of something: a number from 0 to 1 (``nan`` is not one)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:  # also false for nan
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, not {text!r}")
    return value


def seed(text: str) -> int:
    """A random seed: a whole number from 0 to 2**32 - 1 (what numpy's generators take)."""
    return _whole_number(text, 0, (1 << 32) - 1, f"a whole number from 0 to {(1 << 32) - 1}")


def add_variant_arguments(p: argparse.ArgumentParser) -> None:
    """The variant's options (``hwgen generate``, ``hwgen build``; :func:`config_from_args`
    reads them)."""
    p.add_argument("--config", help="a JSON file of VariantConfig fields (or a descriptor)")
    p.add_argument("--rows", type=int)
    p.add_argument("--cols", type=int)
    p.add_argument("--epilogue", type=stage_list,
                   help=f"comma-separated stages in order, from {','.join(EPILOGUE_STAGES)}")
    p.add_argument("--port-bytes", dest="port_bytes", type=int)
    p.add_argument("--port-latency", dest="port_latency", type=int)
    p.add_argument("--spad-a-depth", dest="spad_a_depth", type=int)
    p.add_argument("--spad-b-depth", dest="spad_b_depth", type=int)
    p.add_argument("--spad-e-depth", dest="spad_e_depth", type=int)
    p.add_argument("--imem-depth", dest="imem_depth", type=int)
    p.add_argument("--mem-addr-bits", dest="mem_addr_bits", type=int)
    p.add_argument("--window-unit", dest="window_unit", action="store_true", default=None,
                   help="add the window unit: depthwise convolutions and pools in hardware "
                        "(needs --port-bytes == --rows == --cols)")
    p.add_argument("--epilogue-share", dest="epilogue_share", type=int, metavar="N",
                   help="the epilogue's stages get cols/N lanes and take N cycles a row: "
                        "N times fewer of their multipliers, slower only where rows drain "
                        "faster (a power of two dividing --cols; default 1)")
    p.add_argument("--acc-banks", dest="acc_banks", type=int, metavar="N",
                   help="accumulators per processing element (1, 2, 4 or 8; default 1): a "
                        "super tile of up to N output tiles keeps its partial sums across "
                        "k chunks, so a deep K loads its operands once per super tile")


def config_from_args(args: argparse.Namespace) -> VariantConfig:
    if args.config:
        try:
            data = json.loads(read_text(args.config, "--config"))
        except FileNotFoundError:
            raise ValueError(f"no config file at {args.config}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {args.config} is not valid JSON: {exc}") from None
        if isinstance(data, dict) and data.get("format") == "hwgen-variant":
            data = data.get("config")
        return VariantConfig.from_dict(data)
    fields = {}
    for name in ("rows", "cols", "port_bytes", "port_latency", "spad_a_depth", "spad_b_depth",
                 "spad_e_depth", "imem_depth", "mem_addr_bits", "window_unit",
                 "epilogue_share", "acc_banks"):
        value = getattr(args, name, None)
        if value is not None:
            fields[name] = value
    if args.epilogue is not None:
        fields["epilogue"] = args.epilogue
    return VariantConfig(**fields)


def add_platform_arguments(p: argparse.ArgumentParser) -> None:
    """The board's memory: ``--memory``, ``--refresh``, ``--dram-module`` (``hwgen generate``
    and ``hwgen variants build``; :func:`platform_from_args` reads them)."""
    p.add_argument("--memory", choices=MEMORIES,
                   help="the board's memory: ideal (fixed latency, the default), or a LiteDRAM "
                        "controller with sdr or ddr3 DRAM (needs a port of at least the "
                        "controller's word: 16 bytes for ddr3)")
    p.add_argument("--refresh", choices=REFRESH,
                   help="DRAM refresh: normal, or hot (DDR3 above 85 C: twice as often)")
    p.add_argument("--dram-module", dest="module",
                   help="the DRAM part, a LiteDRAM module class (default MT41K128M16 for ddr3, "
                        "IS42S16160 for sdr)")
    p.add_argument("--speedgrade", choices=DDR3_SPEEDGRADES,
                   help="ddr3 only: the grade whose timings LiteDRAM uses (default the slowest "
                        "that runs at the clock: 800 at 100 MHz)")


def platform_files(config: VariantConfig, platform: PlatformConfig) -> dict[str, str]:
    """The memory system's files a variant folder holds on ``platform`` (none for the ideal
    memory).

    Raises
    ------
    ValueError
        If the variant does not fit the platform (:func:`sim.memory.board_memory`).
    """
    if not platform.is_dram:
        return {}
    from sim.memory import board_memory  # LiteDRAM, only for a DRAM platform

    return board_memory(config, platform).folder_files()


def executor_from_args(args: argparse.Namespace):
    """The executor ``--scheduler``/``--jobs`` ask for, and the call that closes it: a Dask
    cluster's (:func:`fusion.compiler.scheduler.client`), or a local process pool.

    Raises
    ------
    ValueError
        If Dask is missing or the scheduler cannot be reached.
    """
    if args.scheduler:
        from fusion.compiler.scheduler import client, close_clients

        return client(args.scheduler).get_executor(), close_clients
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=args.jobs)
    return pool, pool.shutdown


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def add_worker_arguments(p: argparse.ArgumentParser, jobs_help: str) -> None:
    """``--jobs J`` (``jobs_help`` says what runs on them) and ``--scheduler ADDRESS``."""
    p.add_argument("--jobs", type=positive_int, default=None, metavar="J", help=jobs_help)
    p.add_argument("--scheduler", metavar="ADDRESS", default="",
                   help="a Dask scheduler (e.g. tcp://host:8786) whose workers price the "
                        "chains instead of local processes (the same plan; its workers need "
                        "hwgen installed)")


def workers_from_args(args: argparse.Namespace):
    """The :class:`~fusion.compiler.scheduler.Workers` of ``--jobs`` (the cores available by
    default) and ``--scheduler``, which is reached now, before any work (else ValueError)."""
    from fusion.compiler.scheduler import Workers, client

    workers = Workers(jobs=getattr(args, "jobs", None) or available_cores(),
                      scheduler=getattr(args, "scheduler", None) or "")
    if workers.scheduler:
        client(workers.scheduler)
    return workers


def platform_from_args(args: argparse.Namespace) -> PlatformConfig:
    """The platform of ``hwgen generate``: ``--memory``/``--refresh``/``--dram-module``/
    ``--speedgrade``, else the one recorded in a ``--config`` descriptor, else the ideal
    memory."""
    given = {name: getattr(args, name, None)
             for name in ("memory", "refresh", "module", "speedgrade")}
    if getattr(args, "config", None) and not any(v is not None for v in given.values()):
        try:
            data = json.loads(read_text(args.config, "--config"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            data = None  # config_from_args names the problem
        if isinstance(data, dict) and isinstance(data.get("platform"), dict):
            return PlatformConfig.from_dict(data["platform"])
    fields = {name: value for name, value in given.items() if value is not None}
    if fields and "memory" not in fields:
        raise ValueError("--refresh, --dram-module and --speedgrade describe a DRAM: add "
                         "--memory sdr or --memory ddr3")
    return PlatformConfig(**fields)


def input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.partition("=")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(
            f"--input-shape takes NAME=D0,D1,... with non-negative integer dimensions "
            f"(e.g. x=1,3,32,32), not {text!r}")
    return name, shape


def add_model_arguments(p: argparse.ArgumentParser, *, model_optional: bool = False) -> None:
    """The options ``hwgen compile`` and ``hwgen run`` share: a model and a variant.

    ``model_optional`` for ``hwgen run``, whose model may come from ``--plan`` instead, and
    whose variants may come from a library (``--variants``: the command checks that one of
    the two is given). The compile options default to None so that a command can tell one
    given from the default.
    """
    p.add_argument("model", nargs="?" if model_optional else None,
                   help="an ONNX model (.onnx) or an hwgen JSON graph (.json)")
    p.add_argument("--variant", required=not model_optional,
                   help="a folder written by 'hwgen generate'")
    add_input_arguments(p)
    p.add_argument("--no-fusion", dest="no_fusion", action="store_true",
                   help="every op its own kernel, through memory")
    p.add_argument("--min-gain", dest="min_gain", type=fraction,
                   help=f"fraction of predicted cycles fusion must save (default "
                        f"{DEFAULT_MIN_GAIN})")
    p.add_argument("--no-host-fallback", dest="no_host_fallback", action="store_true",
                   help="refuse a model with ops the accelerator cannot run (one line per op) "
                        "instead of running them on the host, and keep every op the "
                        "accelerator can run on it")
    p.add_argument("--without", type=without, metavar="TECHNIQUE[,...]",
                   help="compile without these techniques, to measure what each brings: "
                        "window_conv (convolution windows gathered by the accelerator), "
                        "kmajor_store (outputs stored as the next kernel reads them), "
                        "grouped_gemm (grouped and depthwise convolutions as grouped GEMMs), "
                        "window_unit (depthwise convolutions on the window unit)")
    p.add_argument("--cache", help="kernel cache folder (default $HWGEN_KERNEL_CACHE or "
                                   "build/kernel_cache)")
    p.add_argument("--profiles", metavar="DB",
                   help="a profile database: a kernel measured there on this variant and "
                        "platform is priced by its measured cycles before any model")
    p.add_argument("--cost-model", dest="cost_model", metavar="DIR",
                   help="a learned cost model written by 'hwgen train' (default: the "
                        "analytical model)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def without(text: str):
    """``--without``: the compile options without the named techniques."""
    from fusion.compiler.options import CompileOptions

    try:
        return CompileOptions.without(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_input_arguments(p: argparse.ArgumentParser) -> None:
    """How a model's inputs are shaped: ``--input-shape`` and ``--batch`` (every command that
    loads a model; :func:`load_args` reads them)."""
    p.add_argument("--input-shape", dest="input_shape", type=input_shape, action="append",
                   metavar="NAME=D0,D1,...",
                   help="static shape of an ONNX input with dynamic dimensions (repeatable)")
    p.add_argument("--batch", type=positive_int, default=None, metavar="B",
                   help="inferences per run: every ONNX input's leading (batch) dimension "
                        "becomes B, so that each kernel runs all B at once (default 1)")


def load_args(args: argparse.Namespace, *, keep: bool = True):
    """The model of ``args`` loaded with its ``--input-shape`` and ``--batch``, and the batch;
    from the import cache beside the kernel cache (:mod:`fusion.frontend.import_cache`),
    where a new import is stored unless not ``keep``.

    Raises
    ------
    ValueError
        If ``--input-shape`` names an input twice.
    """
    from fusion.frontend.load import load_model

    shapes = dict(args.input_shape or ())
    if len(shapes) != len(args.input_shape or ()):
        raise ValueError("--input-shape names an input more than once; give each input once")
    batch = args.batch or 1
    if not hasattr(args, "cache"):  # a command without a kernel cache
        return load_model(args.model, shapes, batch), batch
    return _imports(args).load(args.model, shapes, batch, keep=keep), batch


def _imports(args: argparse.Namespace):
    from fusion.frontend.import_cache import ImportCache

    return ImportCache(kernel_cache(args).root / "imports")


def compile_args(args: argparse.Namespace, *, plan_cache: bool = False):
    """Load the model and the variant, and compile (through the kernel cache). With
    ``plan_cache``, a plan compiled before from the same model, variant, options and data is
    read back instead (:mod:`fusion.compiler.plan_cache`; not with a measured or learned cost
    model, whose files would decide the plan too). The result's ``times`` include the
    import, and reading the plan back."""
    from fusion.compiler import memplan
    from fusion.compiler.scheduler import CompileTimes
    from hwgen.gateware.folder import open_variant

    variant = open_variant(args.variant)  # its platform prices the candidates
    config = variant.config
    times = CompileTimes()
    with times.stage("import"):
        graph, batch = load_args(args, keep=False)
    memplan.check_batch_fits(graph, config, batch)  # a refused model leaves no file behind
    _imports(args).keep(args.model, dict(args.input_shape or ()), batch, graph)
    cache = kernel_cache(args)
    learned = getattr(args, "profiles", None) or getattr(args, "cost_model", None)
    data = _input_hints(args, graph)
    plans, key = None, None
    if plan_cache and not learned:
        from fusion.compiler.plan_cache import PlanCache
        from hwgen.cli.plan_parts import plan_parts

        plans = PlanCache(Path(cache.root) / "plans")
        key = plans.key(plan_parts(args, variant, batch, data))
        with times.stage("plan read-back"):
            known = plans.get(key, config, args.variant)
        if known is not None:
            known.times = times
            return known
    # What is loaded now lives as long as the command: out of the collector's full passes,
    # which walk every object (ResNet-50's compile: 25 of them, 1.05 s of 20.9 s).
    # hwgen.cli.main unfreezes it at the command's end.
    gc.freeze()
    model = cost_model(args, variant.platform)
    compiled = compile_graph(args, graph, config, variant.platform, cache=cache, model=model,
                             batch=batch, data=data, times=times)
    if plans is not None:
        plans.put(key, compiled, args.model)
    if learned:
        counts = ", ".join(f"{n} by {tier}" for tier, n in sorted(model.counts.items()))
        print(f"hwgen: candidates priced by {model.describe()} ({counts})", file=sys.stderr)
    return compiled


def kernel_cache(args: argparse.Namespace):
    """The kernel cache ``--cache`` names (the default one otherwise), with the facts derived
    from kernels' parameters kept beside it from now on (:mod:`fusion.kernels.derived`)."""
    from fusion.kernels import derived
    from fusion.kernels.cache import KernelCache

    if args.cache and Path(args.cache).exists() and not Path(args.cache).is_dir():
        # the cache ignores failed writes (never a reason to fail), so say it here
        raise ValueError(f"--cache {args.cache} is a file, not a folder; give a folder for "
                         f"the kernel cache")
    cache = KernelCache(args.cache) if args.cache else KernelCache()
    derived.use(Path(cache.root) / "derived")
    return cache


def _input_hints(args: argparse.Namespace, graph):
    """What the command's ``--input`` files say of the data the plan will run on (which
    elements are zero: :mod:`fusion.compiler.data_hints`); None without any."""
    if not getattr(args, "input", None):
        return None
    from fusion.compiler.data_hints import ZeroHints
    from hwgen.files import load_array

    paths = named_paths(args.input, "--input", graph.inputs, "inputs")
    return ZeroHints.of({name: load_array(path, "--input") for name, path in paths.items()})


def compile_graph(args: argparse.Namespace, graph, config: VariantConfig, platform, *,
                  cache, model, batch: int = 1, fusion: bool = True, data=None, times=None):
    """``graph`` compiled for ``config`` on ``platform`` with the command's compile options
    (``--no-fusion``, ``--min-gain``, ``--no-host-fallback``, ``--without``); ``fusion``
    False compiles it unfused whatever they say."""
    from fusion import progress
    from fusion.compiler.plan import compile_model

    min_gain = DEFAULT_MIN_GAIN if args.min_gain is None else args.min_gain
    return compile_model(graph, config, cache=cache, fusion=fusion and not args.no_fusion,
                         min_gain=min_gain, host_fallback=not args.no_host_fallback,
                         batch=batch, platform=platform, model=model, data=data,
                         progress=progress.wanted(),
                         workers=workers_from_args(args), times=times,
                         **({"options": args.without} if args.without else {}))


def cost_model(args: argparse.Namespace, platform):
    """The model ``--profiles`` and ``--cost-model`` ask for, on ``platform``: measured
    profiles first (when given), then the learned model (when given) or the analytical one."""
    from fusion.cost import AnalyticalModel
    from fusion.cost.tiered import TieredModel

    model = AnalyticalModel(platform)
    if getattr(args, "cost_model", None):
        from fusion.cost.learned_store import load

        model = load(args.cost_model).on(platform)
    measured = None
    if getattr(args, "profiles", None):
        from fusion.cost.profiles import ProfileDB

        check_regular(args.profiles, "--profiles")
        if not Path(args.profiles).is_file():
            raise ValueError(f"no profile database at {args.profiles}; make one with "
                             f"'hwgen calibrate --db {args.profiles}' or 'hwgen run --db'")
        db = ProfileDB(args.profiles)
        measured = lambda features: db.measured(features, platform)  # noqa: E731
    return TieredModel(model, measured)


def host_op_lines(steps, measured: bool) -> list[str]:
    """One line per compute op on the host: name, op, why, elements or predicted time, and
    (``measured``, for ``hwgen run``'s :class:`fusion.runtime.run.HostRun`) the measured
    time."""
    lines = []
    for h in steps:
        if measured:
            lines.append(f"host op {h.name} ({h.op}, {h.reason}): {h.elements:,} elements in "
                         f"{h.seconds * 1e3:.3f} ms (predicted {h.predicted_seconds * 1e3:.3f} "
                         f"ms)")
        else:
            lines.append(f"host op {h.name} ({h.node.op}, {h.reason}): predicted "
                         f"{h.predicted_seconds * 1e3:.3f} ms")
    return lines


def kernel_table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as aligned lines: the first and last columns (names) left-aligned, the
    figures between them right-aligned."""
    n = len(rows[0])
    widths = [max(len(r[i]) for r in rows) for i in range(n)]
    return ["  ".join(c.ljust(w) if i in (0, n - 1) else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
            for r in rows]


def named_paths(values: list[str] | None, flag: str, names: Sequence[str],
                what: str) -> dict[str, str]:
    """``[NAME=]FILE`` options as ``{name: file}``; a file without a name is for the only one
    of ``names`` (the model's inputs or outputs, ``what``).

    Raises
    ------
    ValueError
        A name that is not one of ``names``, or no name when there are several.
    """
    out: dict[str, str] = {}
    for text in values or []:
        name, sep, path = text.partition("=")
        if not sep or name.endswith(".npy"):
            name, path = "", text
        if not name:
            if len(names) != 1:
                raise ValueError(f"the model has {what} {', '.join(names)}; name the one "
                                 f"{path} is for: {flag} NAME={path}")
            name = names[0]
        if name not in names:
            raise ValueError(f"{flag} {name}: the model's {what} are {', '.join(names)}")
        out[name] = path
    return out
