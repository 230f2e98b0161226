"""``hwgen run``: a model on Verilator, every kernel shadow-checked."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from fusion.progress import wanted
from hwgen.cli.common import (
    add_model_arguments,
    add_worker_arguments,
    available_cores,
    compile_args,
    count,
    cycles,
    fraction,
    host_op_lines,
    kernel_cache,
    kernel_table,
    load_args,
    named_paths,
    seed,
    workers_from_args,
)
from hwgen.files import load_array

#: fusion.runtime.run.DEFAULT_SHADOW_INPUTS, which the CLI does not import before it must
#: (tests/test_cli.py checks the two agree).
DEFAULT_SHADOW_INPUTS = 2

HELP = ("compile a model (or read a compiled plan) and run every kernel on Verilator, each "
        "shadow-checked against the reference")

#: Compile options that mean nothing for a plan that is already compiled.
_COMPILE_OPTIONS = {"no_fusion": "--no-fusion", "min_gain": "--min-gain", "cache": "--cache",
                    "input_shape": "--input-shape", "batch": "--batch", "without": "--without"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p, model_optional=True)
    p.add_argument("--plan", metavar="DIR",
                   help="run a plan folder written by 'hwgen compile' instead of compiling; its "
                        "files are checked against their sha256 and the variant first. The "
                        "hashes catch accidents (a truncated or damaged file, a plan for "
                        "another variant), not a deliberate edit: anyone can recompute them. "
                        "Give MODEL too to verify the plan: it is imported and run through "
                        "the passes again (no pricing), and a plan whose graph differs is "
                        "refused")
    p.add_argument("--input", action="append", metavar="[NAME=]FILE.npy",
                   help="an input's value (default: random, from --seed)")
    p.add_argument("--output", action="append", metavar="[NAME=]FILE.npy",
                   help="write an output (in the model's output dtype)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the random inputs")
    p.add_argument("--shadow-inputs", dest="shadow_inputs", type=count, default=None,
                   metavar="N",
                   help=f"directed input sets (edge cases of every stage: signs, saturation at "
                        f"both ends, rounding ties) each kernel also runs on, beside the "
                        f"model's own values, each shadow-checked (default "
                        f"{DEFAULT_SHADOW_INPUTS}; 0 for none)")
    add_worker_arguments(p, "simulator processes at once, and processes pricing the chains "
                            "when it compiles (default: the cores available): the model's "
                            "kernels run chained on one memory in one of them, the directed "
                            "shadow sets are dealt out to all")
    p.add_argument("--rerun-shadow-sets", dest="rerun_shadow", action="store_true",
                   help="run every directed set, also those a kernel program already passed "
                        "on this build (recorded beside the kernel cache)")
    p.add_argument("--db", metavar="FILE",
                   help="a profile database (SQLite; created if new) that every kernel run is "
                        "appended to (what 'hwgen calibrate' measures, from real workloads)")
    p.add_argument("--variants", metavar="DIR",
                   help="a variant library ('hwgen variants build'): run --workload on it, "
                        "the reconfiguration manager choosing the variant of each model run "
                        "and swapping when it pays (instead of MODEL and --variant)")
    p.add_argument("--workload", metavar="FILE",
                   help='with --variants or --variant: a JSON file {"phases": [{"model": '
                        '"m.onnx", "input": "x.npy", "repeat": 3}, ...]}, paths relative to '
                        "it; input may be an object of input name to file, or left out for "
                        "random inputs. On one --variant, each model runs at --batch and its "
                        "plan follows the live (non-zero) samples of each run's input, "
                        "re-planned with hysteresis (docs/sparsity.md)")
    p.add_argument("--replan-threshold", dest="replan_threshold", type=fraction,
                   default=None, metavar="SHARE",
                   help="with --variant and --workload: re-plan for fewer live samples only "
                        "when the new plan is predicted at least this share cheaper (default "
                        "0.1)")
    p.add_argument("--policy", choices=("online", "offline"), default="online",
                   help="with --variants: online (the work function algorithm: each run "
                        "decided from its own predicted costs, no look-ahead) or offline "
                        "(the optimal schedule of the whole workload's predictions)")
    p.add_argument("--swap-cycles", dest="swap_cycles", type=cycles, metavar="N",
                   help="with --variants: cycles of one swap instead of the descriptors' own "
                        "reconfiguration cost (what-if)")
    p.add_argument("--compare-unfused", dest="compare_unfused", action="store_true",
                   help="with --variants: also run each model unfused once, for the report's "
                        "fused-versus-unfused plot")
    p.add_argument("--board-port", dest="board_port", metavar="DEVICE",
                   help="run on an FPGA board over its UART (a serial device such as "
                        "/dev/ttyUSB0, or a pyserial URL), --variant being the folder 'hwgen "
                        "build --board' wrote; 'sim' runs the same host runtime against the "
                        "board's design simulated by Verilator (docs/boards.md)")
    p.add_argument("--profile-data", dest="profile_data", action="store_true",
                   help="also profile every integer tensor a kernel reads or writes, from the "
                        "reference's values: zeros, all-zero tiles at the array's granularity, "
                        "range, histogram, requantize saturation (--json: data_profiles; with "
                        "--db, stored with the model and variant: hwgen profile shows them)")
    p.add_argument("--saturate-nonfinite", dest="saturate_nonfinite", action="store_true",
                   help="let NaN and infinities into float inputs: an infinity saturates, NaN "
                        "reads as 0.0 (the zero point); refused by default")


def shadow_verdicts(args: argparse.Namespace):
    """The directed sets' verdicts, in the kernel cache's folder (``--cache``)."""
    from fusion.kernels.cache import default_root
    from fusion.runtime.shadow_verdicts import VerdictStore

    return VerdictStore(Path(args.cache or default_root()) / "shadow_verdicts")


def _compiled(args: argparse.Namespace):
    """The model compiled now, or the plan folder's, checked (``--plan``)."""
    workers_from_args(args)  # a --scheduler it cannot reach is refused, compiled or not
    if args.plan is None:
        if args.model is None:
            raise ValueError("give a MODEL to compile and run, or --plan DIR (a folder written "
                             "by 'hwgen compile')")
        return compile_args(args, plan_cache=True)
    given = [flag for name, flag in _COMPILE_OPTIONS.items() if getattr(args, name)]
    if given:
        raise ValueError(f"{', '.join(given)} cannot change a compiled plan; drop "
                         f"{'them' if len(given) > 1 else 'it'}, or compile again with "
                         f"'hwgen compile'")
    from fusion.compiler.plan_reader import read_plan
    from hwgen.gateware.folder import read_variant

    return read_plan(args.plan, read_variant(args.variant), model=args.model,
                     variant=args.variant)


def _check_input_shape(name: str, path: str, got: tuple[int, ...], want: tuple[int, ...],
                       batch: int) -> None:
    """Refuse an ``--input`` file of another shape than the plan's, with the ``--batch`` that
    would take it when only the leading (batch) dimension differs."""
    if tuple(got) == tuple(want):
        return
    fix = "give a value of that shape"
    if len(got) == len(want) and got and tuple(got[1:]) == tuple(want[1:]) and got[0] >= 1:
        fix = f"run with --batch {got[0]} to take {got[0]} inputs at once"
    raise ValueError(f"--input {path} has shape {tuple(got)}, but input {name!r} of the plan "
                     f"(batch {batch}) has shape {tuple(want)}: {fix}")


def run(args: argparse.Namespace) -> int:
    if args.board_port is not None and (args.variants is not None or args.workload is not None):
        raise ValueError("--board-port runs one model on the board of --variant DIR (a folder "
                         "of 'hwgen build --board'); a workload on a variant library runs in "
                         "simulation: drop --board-port, or --variants and --workload")
    if args.profile_data and (args.variants is not None or args.workload is not None
                              or args.board_port is not None):
        raise ValueError("--profile-data profiles one model's run on the simulator; drop "
                         "--variants, --workload and --board-port, or --profile-data")
    if args.workload is not None and args.variants is None and args.variant is not None:
        from hwgen.cli.run_replan import run_replan

        return run_replan(args)
    if args.replan_threshold is not None:
        raise ValueError("--replan-threshold is for a workload on one variant; give --variant "
                         "DIR --workload FILE, or drop it")
    if args.variants is not None or args.workload is not None:
        from hwgen.cli.run_workload import run_workload

        return run_workload(args)
    if args.variant is None:
        raise ValueError("give --variant DIR (a folder written by 'hwgen generate'), or "
                         "--variants DIR --workload FILE (a variant library)")
    for flag, given in (("--policy", args.policy != "online"),
                        ("--swap-cycles", args.swap_cycles is not None),
                        ("--compare-unfused", args.compare_unfused)):
        if given:
            raise ValueError(f"{flag} is for a workload on a variant library; give "
                             f"--variants DIR --workload FILE, or drop {flag}")
    import numpy as np

    from fusion.reference.executor import finite_inputs
    from fusion.runtime.clock import Clock
    from fusion.runtime.run import ShadowMismatch, random_inputs, run_compiled
    from hwgen.gateware.folder import open_variant
    from sim.build import build_folder

    compiled = _compiled(args)
    if args.plan is not None and args.no_host_fallback and compiled.fallbacks:
        from fusion.compiler.lower import refuse_host_compute

        raise refuse_host_compute(compiled.graph, [h.node for h in compiled.fallbacks],
                                  "--no-host-fallback")
    graph = compiled.graph
    inputs = random_inputs(graph, args.seed)
    for name, path in named_paths(args.input, "--input", graph.inputs, "inputs").items():
        inputs[name] = load_array(path, "--input")
        _check_input_shape(name, path, inputs[name].shape, graph.tensors[name].shape,
                           compiled.batch)
    inputs = finite_inputs(inputs, saturate=args.saturate_nonfinite)
    outputs = named_paths(args.output, "--output", graph.outputs, "outputs")  # before the run
    for path in outputs.values():
        folder = Path(path).resolve().parent
        if not folder.is_dir():  # found now, not after minutes of simulation
            raise ValueError(f"cannot write --output {path}: no folder {folder}; create it "
                             f"first")
    if args.db:  # a database that cannot take the record, found before the simulation too
        from fusion.cost.profiles import ProfileDB

        with ProfileDB(args.db):
            pass
    board = None
    with contextlib.ExitStack() as stack:
        if args.board_port is not None:
            from hwgen.board.session import open_session

            build = board = stack.enter_context(open_session(args.variant, args.board_port))
            platform = board.folder.platform
        else:
            build = build_folder(args.variant)
            platform = build.platform
        clock = Clock.of(open_variant(args.variant).descriptor, platform.clock_hz)
        try:
            report = run_compiled(compiled, inputs, build=build,
                                  shadow_inputs=(DEFAULT_SHADOW_INPUTS
                                                 if args.shadow_inputs is None
                                                 else args.shadow_inputs), seed=args.seed,
                                  profile_data=args.profile_data,
                                  jobs=args.jobs or available_cores(),
                                  verdicts=None if args.rerun_shadow else shadow_verdicts(args),
                                  progress=wanted())
        except ShadowMismatch as exc:
            if args.json:
                print(json.dumps({"ok": False, "kernel": exc.kernel, "error": str(exc)}))
            print(f"hwgen: shadow check failed: {exc}", file=sys.stderr)
            return 1
    for name, path in outputs.items():
        np.save(path, report.outputs[name], allow_pickle=False)
    if args.db:
        try:
            _record(args.db, compiled, report, platform, args.seed, inputs)
        except ValueError as exc:
            # a database error, not a result that differs (status 1): the run itself is done
            raise ValueError(f"{exc}; the run itself passed"
                             + (" and its --output files are written" if outputs else "")) \
                from None
    whole = _whole_model(args, compiled, inputs, report.outputs)
    if args.json:
        print(json.dumps({**report.to_dict(), "fusion": compiled.fusion,
                          "model": graph.name, "variant": compiled.config.key(),
                          "time": clock.figures(report.total_cycles, report.batch),
                          "cache": compiled.cache_stats, "whole_model": whole.to_dict(),
                          "compile_times": compiled.times.to_dict(),
                          **({} if board is None else {"board": board.figures()}),
                          **({} if whole.ok else {"ok": False})}))
        return _whole_model_status(whole)
    rows = [("kernel", "cycles", "predicted", "MACs", "ideal", "util", "ops")]
    for k in report.kernels:
        rows.append((k.name, f"{k.cycles:,}", f"{k.predicted_cycles:,.0f}", f"{k.macs:,}",
                     f"{k.ideal_cycles:,}", f"{k.utilization:.2f}" if k.macs else "-",
                     "+".join(n.rsplit("/", 1)[-1] for n in k.ops)))
    rows.append(("total", f"{report.total_cycles:,}",
                 f"{sum(k.predicted_cycles for k in report.kernels):,.0f}",
                 f"{report.total_macs:,}", f"{report.ideal_cycles:,}",
                 f"{report.utilization:.2f}", ""))
    print("\n".join(kernel_table(rows)))
    if report.data_profiles:
        from fusion.runtime.data_profile import profile_table

        print("\n".join(kernel_table(profile_table(report.data_profiles))))
    for line in host_op_lines(report.host_ops, measured=True):
        print(line)
    layout = [h for h in report.host if h.role == "layout"]
    host = (f"{len(report.host_ops)} host ops in "
            f"{sum(h.seconds for h in report.host_ops) * 1e3:.1f} ms, "
            f"{len(layout)} layout host steps in {sum(h.seconds for h in layout) * 1e3:.1f} ms"
            + (f" ({', '.join(sorted({h.op for h in layout}))})" if layout else "")
            + (f", {len(report.repacks)} repacks between kernels (predicted "
               f"{sum(r['predicted_seconds'] for r in report.repacks) * 1e3:.1f} ms on the "
               f"host, {sum(r['written_bytes'] for r in report.repacks):,} B written)"
               if report.repacks else ""))
    print(f"ok: {len(report.kernels)} kernels {'fused' if compiled.fusion else 'unfused'}, "
          f"each bit-exact against the reference; {report.total_cycles:,} cycles for "
          f"{report.total_macs:,} MACs (utilization {report.utilization:.2f} of the "
          f"{compiled.config.rows}x{compiled.config.cols} array); {host}; peak external "
          f"memory {report.peak_memory_bytes:,} B; {report.wall_seconds:.1f} s")
    print(f"batch {report.batch}: {report.inferences_per_mcycle:,.1f} inferences per million "
          f"cycles; weight-bandwidth roofline {report.roofline_cycles:,} cycles "
          f"({report.weight_bytes:,} B of weights at {compiled.config.port_bytes} B a cycle), "
          f"{report.roofline_fraction:.2f} of it reached")
    print(f"shadow checks: the model's values and {report.shadow_sets_run} directed sets run "
          f"({report.shadow_sets_cached} passed before on this build, not run again), on "
          f"{report.sim_processes} simulator process(es) in {report.sim_seconds:.1f} s")
    print(clock.summary(report.total_cycles, report.batch))
    if board is not None:
        print(board.summary())
    print(whole.summary())
    return _whole_model_status(whole)


def _whole_model(args: argparse.Namespace, compiled, inputs, outputs):
    """The run's outputs against the imported graph's reference (fusion.runtime.whole_model):
    the import of MODEL (with --plan too); without MODEL there is no imported graph."""
    from fusion.runtime.whole_model import check_whole_model, not_done

    if args.model is None:
        return not_done("no MODEL given: a plan holds its graph after the passes only; run "
                        "with MODEL --plan DIR to compare with the model as imported")
    if args.plan is None:
        imported, _ = load_args(args)
    else:
        from fusion.frontend.import_cache import ImportCache
        from fusion.ir.graph import GraphError

        try:  # through the import cache, at the plan's batch
            imported = ImportCache(kernel_cache(args).root / "imports").load(
                args.model, batch=compiled.batch)
        except GraphError as exc:  # e.g. dynamic shapes, which the plan fixed when compiled
            return not_done(f"MODEL does not import on its own: {exc}")
    return check_whole_model(imported, compiled.graph, inputs, outputs)


def _whole_model_status(whole) -> int:
    """Exit status 1, with the line that says where, when the whole-model check failed."""
    if whole.ok:
        return 0
    print(f"hwgen: {whole.failure()}", file=sys.stderr)
    return 1


def _record(db_path: str, compiled, report, platform, seed_value: int, inputs) -> None:
    """Append the run's kernels to the profile database (source ``runtime``), and with
    ``--profile-data`` its data profiles, under the model, its variant and its input."""
    from fusion.cost.data_profile_table import input_key
    from fusion.cost.profiles import ProfileDB
    from fusion.runtime.online import record_runtime

    with ProfileDB(db_path) as db:
        record_runtime(db, compiled, report, platform, extra={"input_seed": seed_value})
        if report.data_profiles:
            db.add_data_profiles(report.data_profiles, model=compiled.graph.name,
                                 model_key=compiled.graph.signature(),
                                 variant_key=compiled.config.key(), run_key=input_key(inputs))
