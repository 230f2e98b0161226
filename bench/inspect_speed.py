"""How ``hwgen inspect``'s time grows with a model's length (issue 29): a chain of
QuantizeLinear/DequantizeLinear pairs of 1,000, 5,000 and 20,000 nodes, imported and run
through every pass (the pairs fold to one quantize and one dequantize).

``python -m bench.inspect_speed [NODES ...]`` prints the seconds of each (best of
``--repeats``, through ``hwgen.cli.main`` in this process, the ONNX file written beforehand)
and the seconds per 1,000 nodes, and writes ``build/bench_inspect.json``; ``make bench`` runs
it. Near-linear growth keeps the per-1,000-node figure flat (about 0.06 s). Before the Q/DQ
pairs folded in one edit (and the importer's order and the edit's renames took one pass), the
same run took 1.5 s at 1,000 nodes, 5.8 s at 2,000 and 42 s at 5,000, and 20,000 had not
finished after 400 s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

from bench.bad_input_probe import qdq_chain
from bench.output import write_results

#: Chain lengths (nodes) measured by default.
LENGTHS = (1_000, 5_000, 20_000)


def inspect_seconds(nodes: int, repeats: int) -> float:
    """The best of ``repeats`` runs of ``hwgen inspect`` on a chain of ``nodes`` nodes."""
    from hwgen.cli import main

    with tempfile.TemporaryDirectory() as root:
        model = qdq_chain(nodes, Path(root) / "chain.onnx")
        best = float("inf")
        for _ in range(repeats):
            began = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()) as out:
                status = main(["inspect", str(model)])
            best = min(best, time.perf_counter() - began)
            if status != 0 or "2 nodes after the passes" not in out.getvalue():
                raise SystemExit(f"hwgen inspect of a {nodes}-node chain did not fold it "
                                 f"(status {status}): {out.getvalue()[:200]}")
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.inspect_speed",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("nodes", type=int, nargs="*", default=list(LENGTHS))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    print("hwgen inspect of a Q/DQ chain:", flush=True)
    results = {}
    for nodes in args.nodes:
        seconds = inspect_seconds(nodes, args.repeats)
        per_k = seconds / nodes * 1000
        results[str(nodes)] = {"seconds": round(seconds, 3),
                               "seconds_per_1000_nodes": round(per_k, 4)}
        print(f"  {nodes:>7,} nodes  {seconds:6.2f} s  ({per_k:.3f} s per 1,000 nodes)",
              flush=True)
    write_results("bench_inspect.json", {"repeats": args.repeats, "chains": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
