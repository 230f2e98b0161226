"""``hwgen run --variants DIR --workload FILE``: a workload on a variant library, the
reconfiguration manager choosing each run's variant (:mod:`fusion.runtime.reconfig`)."""

from __future__ import annotations

import argparse
import json
import sys

from hwgen.cli.common import (
    compile_graph,
    cost_model,
    kernel_cache,
    kernel_table,
    workers_from_args,
)

#: ``hwgen run`` options that mean nothing with a library: the model and its variant come
#: from the workload and the library, and a run's files are the workload's.
_SINGLE_MODEL = {"model": "MODEL", "variant": "--variant", "plan": "--plan",
                 "input": "--input", "output": "--output", "db": "--db", "batch": "--batch",
                 "input_shape": "--input-shape"}


def run_workload(args: argparse.Namespace) -> int:
    from fusion.compiler.parallel_pricing import analytical_only
    from fusion.runtime.reconfig.library import open_library
    from fusion.runtime.reconfig.manager import run_workload as run
    from fusion.runtime.reconfig.workload import read_workload
    from fusion.runtime.run import ShadowMismatch
    from fusion.runtime.whole_model import WholeModelMismatch

    if args.variants is None or args.workload is None:
        raise ValueError("a workload runs on a variant library: give both --variants DIR and "
                         "--workload FILE")
    given = [flag for name, flag in _SINGLE_MODEL.items() if getattr(args, name, None)]
    if given:
        raise ValueError(f"{', '.join(given)} cannot go with --variants (the workload file "
                         f"names the models and their inputs); drop "
                         f"{'them' if len(given) > 1 else 'it'}")
    workload = read_workload(args.workload)  # every file it names checked before any work
    library = open_library(args.variants)
    # one board memory for the whole library (open_library checks): one cost model
    cache, model = kernel_cache(args), cost_model(args, library[0].platform)

    def compile_for(graph, variant, fusion):
        return compile_graph(args, graph, variant.config, variant.platform, cache=cache,
                             model=model, fusion=fusion)

    progress = (lambda line: print(f"hwgen: {line}", file=sys.stderr)) if not args.json \
        else None
    try:
        report = run(workload, library, compile_for=compile_for, policy=args.policy,
                     swap_cycles=args.swap_cycles,
                     shadow_inputs=0 if args.shadow_inputs is None else args.shadow_inputs,
                     seed=args.seed, compare_unfused=args.compare_unfused,
                     saturate_nonfinite=args.saturate_nonfinite, progress=progress,
                     workers=workers_from_args(args), local=analytical_only(model))
    except (ShadowMismatch, WholeModelMismatch) as exc:
        return mismatch(exc, args.json)
    data = report.to_dict()
    if args.json:
        print(json.dumps(data))
        return 0
    rows = [("run", "model", "variant", "swap", "cycles", "predicted")]
    for n, r in enumerate(data["timeline"]):
        rows.append((str(n), f"{r['model']} #{r['repeat']}", r["variant"],
                     f"{r['swap_cycles']:,}" if r["swap_cycles"] else "",
                     f"{r['cycles']:,}", f"{r['predicted_cycles']:,}"))
    print("\n".join(kernel_table(rows)))
    static = ", ".join(f"{v} {c:,}" if c is not None else f"{v} cannot run all"
                       for v, c in data["static_cycles"].items())
    print(f"ok: {len(data['timeline'])} runs on {len(library)} variants ({args.policy} "
          f"policy), each kernel bit-exact against the reference; {data['total_cycles']:,} "
          f"cycles = {data['kernel_cycles']:,} running + {data['swaps']} swaps of "
          f"{data['swap_cycles']:,}")
    print(f"static variants: {static}; offline optimum {data['offline_optimal_cycles']:,}")
    print(_whole_model_line(data["timeline"]))
    for line in data["repeat_mismatches"]:
        print(f"hwgen: note: a repeat took other cycles than its first run: {line}",
              file=sys.stderr)
    return 0


def _whole_model_line(timeline: list[dict]) -> str:
    """One line for every run's whole-model check (each within its bound, or the run would
    have stopped): the largest deviation of any output, in LSBs."""
    done = [r["whole_model"] for r in timeline if r["whole_model"].get("done")]
    if not done:
        return "whole model: not checked"
    worst = max((o.get("max_lsb", 0) for w in done for o in w["outputs"]), default=0)
    return (f"whole model: {len(done)} of {len(timeline)} runs checked against the imported "
            f"graph's reference, each within its bound (largest deviation {worst:g} LSB)")


def mismatch(exc: Exception, as_json: bool) -> int:
    """Say that a workload's run differed from its reference (a kernel's shadow check, or a
    run's outputs against the model as imported), as JSON too with ``--json``: status 1."""
    from fusion.runtime.run import ShadowMismatch

    if isinstance(exc, ShadowMismatch):
        if as_json:
            print(json.dumps({"ok": False, "kernel": exc.kernel, "error": str(exc)}))
        print(f"hwgen: shadow check failed: {exc}", file=sys.stderr)
    else:
        if as_json:
            print(json.dumps({"ok": False, "whole_model": exc.check.to_dict(),
                              "error": str(exc)}))
        print(f"hwgen: {exc}", file=sys.stderr)
    return 1
