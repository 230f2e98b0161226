"""``hwgen run --variant DIR --workload FILE``: a workload on one variant, each run's plan
following the live samples of its input (:mod:`fusion.runtime.replan`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hwgen.cli.common import compile_graph, cost_model, kernel_cache, kernel_table
from hwgen.cli.run_workload import mismatch

#: ``hwgen run`` options that mean nothing for a workload: the models and their inputs come
#: from the workload file.
_SINGLE_MODEL = {"model": "MODEL", "plan": "--plan", "input": "--input", "output": "--output",
                 "db": "--db", "input_shape": "--input-shape", "policy": None,
                 "swap_cycles": "--swap-cycles", "compare_unfused": "--compare-unfused"}


def run_replan(args: argparse.Namespace) -> int:
    from fusion.frontend.load import load_model
    from fusion.runtime.reconfig.manager import phase_inputs
    from fusion.runtime.reconfig.workload import read_workload
    from fusion.runtime.replan import THRESHOLD, run_replanned
    from fusion.runtime.run import ShadowMismatch, run_compiled
    from fusion.runtime.whole_model import WholeModelMismatch, check_whole_model
    from hwgen.gateware.folder import open_variant
    from sim.build import build_folder

    given = [flag for name, flag in _SINGLE_MODEL.items()
             if flag and getattr(args, name, None)]
    if args.policy != "online":
        given.append("--policy")
    if given:
        raise ValueError(f"{', '.join(given)} cannot go with --variant and --workload (the "
                         f"workload file names the models and their inputs; one variant "
                         f"never swaps); drop {'them' if len(given) > 1 else 'it'}")
    workload = read_workload(args.workload)
    variant = open_variant(args.variant)
    batch = args.batch or 1
    cache, model = kernel_cache(args), cost_model(args, variant.platform)
    imported = {p: load_model(p, batch=batch) for p in workload.models()}
    inputs = [phase_inputs(ph, imported[ph.model], args.seed, args.saturate_nonfinite)
              for ph in workload.phases]
    build = build_folder(args.variant)
    c, name = variant.config, Path(args.variant).resolve().name
    shadow = 0 if args.shadow_inputs is None else args.shadow_inputs

    def compile_for(path, b):
        return compile_graph(args, load_model(path, batch=b), variant.config,
                             variant.platform, cache=cache, model=model, batch=b)

    def check(path, full_plan, values, outputs):
        whole = check_whole_model(imported[path], full_plan.graph, values, outputs)
        if not whole.ok:
            raise WholeModelMismatch(f"{path.name}", whole)
        return whole

    def granule(plan):
        # single-row samples (a [batch, features] input): whole row blocks cost the same
        flat = all(len(plan.graph.tensors[n].shape) == 2 for n in plan.graph.inputs)
        return variant.config.rows if flat else 1

    progress = (lambda line: print(f"hwgen: {line}", file=sys.stderr)) if not args.json \
        else None
    try:
        report = run_replanned(
            workload.steps(), inputs, batch=batch, variant=name,
            summary={"key": c.key(), "rows": c.rows, "cols": c.cols,
                     "port_bytes": c.port_bytes, "epilogue": list(c.epilogue),
                     "window_unit": bool(c.window_unit), "resources": None, "part": None,
                     "fmax_mhz": None, "reconfig_cycles": None},
            compile_for=compile_for,
            run=lambda plan, values: run_compiled(plan, values, build=build,
                                                  shadow_inputs=shadow, seed=args.seed),
            check=check, granule=granule,
            threshold=THRESHOLD if args.replan_threshold is None else args.replan_threshold,
            progress=progress)
    except (ShadowMismatch, WholeModelMismatch) as exc:
        return mismatch(exc, args.json)
    data = report.to_dict()
    if args.json:
        print(json.dumps(data))
        return 0
    rows = [("run", "model", "live", "plan", "cycles", "predicted")]
    for n, r in enumerate(data["timeline"]):
        rows.append((str(n), f"{r['model']} #{r['repeat']}",
                     f"{r['live_samples']}/{r['batch']}", f"{r['plan_samples']} samples",
                     f"{r['cycles']:,}", f"{r['predicted_cycles']:,}"))
    print("\n".join(kernel_table(rows)))
    for r in data["replans"]:
        print(f"re-plan before run {r['run']}: {r['profile']} ({r['reason']}), "
              f"{r['samples_before']} -> {r['samples_after']} samples, predicted "
              f"{r['predicted_cycles_before']:,} -> {r['predicted_cycles_after']:,} cycles")
    print(f"ok: {len(data['timeline'])} runs on {name}, each kernel "
          f"bit-exact against the reference and each output checked against the model as "
          f"imported; {data['total_cycles']:,} cycles, {len(data['replans'])} re-plans; the "
          f"first plan kept throughout: {data['static_plan_cycles']:,}")
    return 0
