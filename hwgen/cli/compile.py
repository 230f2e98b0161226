"""``hwgen compile``: a model's fused plan: kernels, microcode, memory plan."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwgen.cli.common import (
    add_model_arguments,
    add_worker_arguments,
    compile_args,
    host_op_lines,
    kernel_table,
)

HELP = "compile a model for a variant: kernels, microcode, memory plan"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    p.add_argument("-o", "--output", required=True,
                   help="plan folder to write: new, empty, or an old plan (replaced whole)")
    p.add_argument("--explain", action="store_true",
                   help="show every candidate, its predicted cycles, and why it lost")
    add_worker_arguments(p, "processes to price the chains on (default: the cores "
                            "available; the plan is the same)")


def run(args: argparse.Namespace) -> int:
    from fusion.compiler.plan_folder import check_output_folder, write_plan

    # before the work, not after it; what it holds then is what may be replaced
    checked = check_output_folder(Path(args.output))
    compiled = compile_args(args)
    with compiled.times.stage("write"):
        plan = write_plan(compiled, Path(args.output), source=Path(args.model), checked=checked)
    if args.json:
        extra = {"explain": compiled.explain().splitlines()} if args.explain else {}
        print(json.dumps({**plan, **extra, "compile_times": compiled.times.to_dict()}))
        return 0
    if args.explain:
        print(compiled.explain())
        print("\n".join(compiled.times.lines()))
        print()
    rows = [("kernel", "program words", "predicted cycles", "ops")]
    for k in compiled.kernels:
        rows.append((k.name, str(len(k.compiled.program)), f"{k.predicted_cycles:,.0f}",
                     "+".join(n.rsplit("/", 1)[-1] for n in k.spec.nodes)))
    print("\n".join(kernel_table(rows)))
    for line in host_op_lines(compiled.host_ops, measured=False):
        print(line)
    cache = compiled.cache_stats
    print(f"{len(compiled.kernels)} kernels, {len(compiled.host_ops)} host ops, "
          f"{len(compiled.host) - len(compiled.host_ops)} layout host steps, "
          f"{len(compiled.repacks)} repacks between kernels; predicted "
          f"{compiled.predicted_cycles:,.0f} cycles; peak external memory "
          f"{compiled.memory.peak_bytes:,} B (without reuse {compiled.memory.unshared_bytes:,} "
          f"B); kernel cache: {cache.get('memory_hits', 0) + cache.get('disk_hits', 0)} hits, "
          f"{cache.get('misses', 0)} misses; plan in {args.output}")
    return 0
