"""Fused vs unfused on the simulator: per chain and in total (``make demo``, ``make bench``).

``python -m fusion.runtime.compare --variant DIR MODEL...`` compiles each model twice (the
engine's plan, and every op its own kernel), runs both on Verilator with shadow checks, and
prints the measured cycles of each chain's kernels side by side.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusion.compiler.plan import CompiledModel, compile_model
from fusion.ir.graph import Graph
from fusion.kernels.cache import KernelCache
from fusion.runtime.run import RunReport, random_inputs, run_compiled
from hwgen.config import VariantConfig


@dataclass
class Comparison:
    """One model run fused and unfused."""

    name: str
    fused: RunReport
    unfused: RunReport
    compiled: dict[bool, CompiledModel]

    @property
    def ratio(self) -> float:
        return self.fused.total_cycles / self.unfused.total_cycles

    def rows(self) -> list[tuple[str, str, str]]:
        """(chain, fused kernels: cycles, unfused kernels: cycles) per chain."""
        chain_of = {}
        for d in self.compiled[True].decisions:
            for node in d.chain.nodes:
                chain_of[node.name] = d.chain.name
        per: dict[str, dict[bool, list[int]]] = {}
        for fusion, report in ((True, self.fused), (False, self.unfused)):
            for k in report.kernels:
                per.setdefault(chain_of[k.ops[0]], {True: [], False: []})[fusion].append(
                    k.cycles)
        return [(chain, " + ".join(f"{c:,}" for c in v[True]),
                 " + ".join(f"{c:,}" for c in v[False])) for chain, v in per.items()]

    def to_dict(self) -> dict[str, Any]:
        return {"fused_cycles": self.fused.total_cycles,
                "unfused_cycles": self.unfused.total_cycles,
                "fused_over_unfused": round(self.ratio, 3),
                "fused_kernels": len(self.fused.kernels),
                "unfused_kernels": len(self.unfused.kernels),
                "peak_memory_bytes": {"fused": self.fused.peak_memory_bytes,
                                      "unfused": self.unfused.peak_memory_bytes}}


def compare(name: str, graph: Graph, config: VariantConfig, *, cache: KernelCache | None = None,
            seed: int = 1, inputs: dict[str, np.ndarray] | None = None,
            build: Any = None) -> Comparison:
    """Compile and run ``graph`` fused and unfused on the same inputs, on ``build`` (a
    :class:`sim.build.BuildInfo`; the variant's default build otherwise)."""
    inputs = inputs if inputs is not None else random_inputs(graph, seed)
    compiled, reports = {}, {}
    for fusion in (True, False):
        compiled[fusion] = compile_model(graph, config, cache=cache, fusion=fusion)
        reports[fusion] = run_compiled(compiled[fusion], inputs, build=build)
    for out in reports[True].outputs:
        if not np.array_equal(reports[True].outputs[out], reports[False].outputs[out]):
            raise RuntimeError(f"{name}: fused and unfused outputs differ on {out!r}")
    return Comparison(name, reports[True], reports[False], compiled)


def render(c: Comparison) -> str:
    rows = [("chain", "fused (cycles)", "unfused (cycles)")] + c.rows()
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{c.name}:"]
    for r in rows:
        lines.append("  " + "  ".join(x.ljust(w) if i == 0 else x.rjust(w)
                                      for i, (x, w) in enumerate(zip(r, widths, strict=True))))
    lines.append(f"  total: fused {c.fused.total_cycles:,} cycles in {len(c.fused.kernels)} "
                 f"kernels, unfused {c.unfused.total_cycles:,} in {len(c.unfused.kernels)}: "
                 f"fused/unfused {c.ratio:.3f}; every kernel bit-exact against the reference")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from fusion.frontend.load import load_model
    from hwgen.gateware.folder import read_variant
    from sim.build import build_folder

    parser = argparse.ArgumentParser(prog="python -m fusion.runtime.compare",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--variant", required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        config = read_variant(args.variant)
        build = build_folder(args.variant)  # the folder's own Verilog, checked
        for path in args.models:
            graph = load_model(path)
            print(render(compare(Path(path).stem, graph, config, cache=KernelCache(),
                                 seed=args.seed, build=build)), flush=True)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
