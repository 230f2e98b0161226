"""``make mutate``: inject each fault of :mod:`bench.mutations` and check that hwgen catches it.

For the unmutated sources (the baseline, which must pass every check) and then for each
mutation, the campaign copies the sources (``hwgen``, ``fusion``, ``sim``, ``rtl_templates``,
``examples``) into a scratch folder, patches the copy, and runs there, with the copy first on
``PYTHONPATH`` and its own build folder and kernel cache:

1. ``hwgen generate`` of the mutant's variant (:data:`VARIANTS`): a small array with every
   epilogue stage, or, for the parts only a variant whose A row is one memory word has
   (window loads, the transposing store, the window unit), such a variant with the unit;
2. that variant's checks with default options: on the first, ``hwgen gemm`` on a few shapes
   (:data:`GEMMS`, :data:`STREAMED` with its B streamed, :data:`PRUNED` block-sparse and
   :data:`ZERO_TILES` zero-skipping)
   and ``hwgen run`` on every
   bundled example (``examples/*.onnx``); on the second, ``hwgen run`` of the bundled
   examples that convolve and pool (:data:`WINDOW_MODELS`: window convolutions, depthwise
   convolutions, max and global pools on the unit, K-major stores); on the third, a 4x4 on
   LiteDRAM DDR3, ``hwgen gemm`` on :data:`GEMMS` and ``hwgen run`` of :data:`DRAM_MODELS`
   (the read buffer and the DRAM adapter); on the fourth, a 4x4 with accumulator banks,
   ``hwgen gemm`` of :data:`BANKED_GEMMS`. The baseline runs all four.

A check catches the mutant when it exits non-zero: 1 is a mismatch or counter violation, 2 an
error (a failed build or generate counts as caught, and the table says so; so does a crash,
a Python traceback, which is told apart from exit 1). The table lists,
per mutation, the file, the checks that caught it and its status; the campaign exits 1 if a
mutant survived, and 2 if the baseline fails or a mutation no longer applies.

Usage: ``python -m bench.mutate [--jobs N] [--only NAME ...] [--keep]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.mutations import MUTATIONS, Mutation

ROOT = Path(__file__).resolve().parent.parent
#: What the scratch copy holds: the packages and the bundled examples.
COPIED = ("hwgen", "fusion", "sim", "rtl_templates", "examples")
_STAGES = ("--epilogue", "bias,requant,relu,clamp,residual")
#: The variants a mutant is generated as (hwgen generate options), by
#: :attr:`bench.mutations.Mutation.variant`.
VARIANTS = {
    "base": ("--rows", "4", "--cols", "4", *_STAGES),
    "window": ("--rows", "4", "--cols", "4", "--port-bytes", "4", *_STAGES, "--window-unit"),
    "ddr3": ("--rows", "4", "--cols", "4", "--port-bytes", "16", "--mem-addr-bits", "21",
             *_STAGES, "--memory", "ddr3"),
    "banks": ("--rows", "4", "--cols", "4", *_STAGES, "--acc-banks", "4"),
}
#: The bundled models the window variant runs (random inputs, every kernel shadow-checked):
#: qdq_cnn (a max pool and an unpadded depthwise convolution on the unit, window loads) and
#: DS-CNN (padded depthwise convolutions, their outputs stored K-major through the transposer,
#: a global pool's sum).
WINDOW_MODELS = ("examples/qdq_cnn.onnx", "examples/real/ds_cnn_qdq.onnx")
#: The bundled models the DDR3 variant runs: a whole model's loads and stores through the
#: adapter, each kernel reading what the one before stored.
DRAM_MODELS = ("examples/qdq_cnn.onnx", "examples/qdq_mlp_residual.onnx")
#: ``hwgen gemm`` shapes (M, K, N): a single tile, ragged edges over several super tiles,
#: and a long K with K chunking.
GEMMS = ((4, 8, 4), (19, 40, 23), (32, 96, 40))
#: ``hwgen gemm`` shapes and tilings (M, K, N, tm, tn, kt) the banks variant runs: super
#: tiles of several tiles over k chunks, each tile in its own accumulator bank.
BANKED_GEMMS = ((13, 96, 15, 2, 2, 32), (16, 100, 16, 4, 1, 24))
#: A GEMV streamed in q chunks (M, K, N, q), checked like the others: its counted WAITs.
STREAMED = (3, 256, 40, 4)
#: Block-sparse GEMMs (M, K, N, share of weight blocks zero): several row blocks, a GEMV whose
#: weights stream through the ring of slots, and one of a block or two a column block (a
#: MATMUL or two each: a load into a slot races the MATMUL that still reads it).
PRUNED = ((19, 40, 23, 0.6), (3, 256, 40, 0.75), (1, 32, 64, 0.9))
#: GEMMs with this share of A's tiles all zero point, run zero-skipping (``--zero-tiles``).
ZERO_TILES = ((19, 40, 23, 0.5), (16, 96, 12, 0.7))
#: Seconds a check may take before it counts as hung (and so as caught).
TIMEOUT = 600


class MutationDoesNotApply(RuntimeError):
    """A mutation's text is not in its file exactly once: the code moved on."""


@dataclass
class Outcome:
    """What the checks said about one mutant (or the baseline)."""

    name: str
    path: str
    caught_by: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # checks that exited 2 or worse
    seconds: float = 0.0

    @property
    def caught(self) -> bool:
        return bool(self.caught_by or self.errors)

    def status(self) -> str:
        if self.caught_by:
            return "caught"
        if self.errors:
            return "caught (error: " + ", ".join(self.errors) + ")"
        return "SURVIVED"


def patch(mutation: Mutation, text: str) -> str:
    """``text`` with the mutation's ``old`` text, which must occur exactly once, replaced."""
    count = text.count(mutation.old)
    if count != 1:
        raise MutationDoesNotApply(
            f"mutation {mutation.name!r}: its text occurs {count} times in {mutation.path} "
            f"(it must occur once); update bench/mutations.py to the current code:\n"
            f"    {mutation.old}")
    return text.replace(mutation.old, mutation.new)


def apply(mutation: Mutation, root: Path) -> None:
    """Patch the file ``mutation.path`` under ``root``."""
    path = root / mutation.path
    path.write_text(patch(mutation, path.read_text()))


def scratch_copy(into: Path, source: Path = ROOT) -> None:
    """Copy the sources the checks run from (:data:`COPIED`) from ``source`` into ``into``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build")
    for name in COPIED:
        shutil.copytree(source / name, into / name, ignore=ignore)


def checks(variant: str = "base") -> list[tuple[str, list[str]]]:
    """The checks of ``variant``: a name and the ``hwgen`` arguments of each."""
    if variant == "window":
        return [(f"run {Path(model).stem} (window)", ["run", model, "--variant", "variant"])
                for model in WINDOW_MODELS]
    if variant == "banks":
        return [(f"gemm {m}x{k}x{n} {tm}x{tn} kt={kt} (banks)", [
            "gemm", "--variant", "variant", "--m", str(m), "--k", str(k), "--n", str(n),
            "--tm", str(tm), "--tn", str(tn), "--kt", str(kt)])
            for m, k, n, tm, tn, kt in BANKED_GEMMS]
    if variant == "ddr3":
        return [(f"gemm {m}x{k}x{n} (ddr3)", ["gemm", "--variant", "variant", "--m", str(m),
                                                 "--k", str(k), "--n", str(n)])
                for m, k, n in GEMMS] + [
                (f"run {Path(model).stem} (ddr3)", ["run", model, "--variant", "variant"])
                for model in DRAM_MODELS]
    out = []
    for m, k, n in GEMMS:
        out.append((f"gemm {m}x{k}x{n}", ["gemm", "--variant", "variant", "--m", str(m),
                                          "--k", str(k), "--n", str(n)]))
    m, k, n, q = STREAMED
    out.append((f"gemm {m}x{k}x{n} streamed", [
        "gemm", "--variant", "variant", "--m", str(m), "--k", str(k), "--n", str(n),
        "--stream", str(q), "--epilogue", "bias,requant,relu"]))
    for m, k, n, share in PRUNED:
        out.append((f"gemm {m}x{k}x{n} pruned {share:.0%}", [
            "gemm", "--variant", "variant", "--m", str(m), "--k", str(k), "--n", str(n),
            "--prune", str(share), "--epilogue", "bias,requant,relu"]))
    for m, k, n, share in ZERO_TILES:
        out.append((f"gemm {m}x{k}x{n} zero tiles {share:.0%}", [
            "gemm", "--variant", "variant", "--m", str(m), "--k", str(k), "--n", str(n),
            "--zero-tiles", str(share), "--epilogue", "bias,requant,relu"]))
    for model in sorted((ROOT / "examples").glob("*.onnx")):
        out.append((f"run {model.stem}", ["run", f"examples/{model.name}", "--variant",
                                          "variant"]))
    return out


def _hwgen(folder: Path, args: list[str], log) -> int:
    """Run ``hwgen args`` in the copy; its exit status, or -1 for a traceback (a crash is not
    a check that caught the fault, even though Python exits 1 then)."""
    env = {**os.environ, "PYTHONPATH": str(folder), "HWGEN_BUILD_DIR": str(folder / "build/sim"),
           "HWGEN_KERNEL_CACHE": str(folder / "build/kernel_cache")}
    log.write(f"$ hwgen {' '.join(args)}\n")
    try:
        done = subprocess.run([sys.executable, "-m", "hwgen.cli", *args], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        log.write(f"(timed out after {TIMEOUT} s)\n")
        return 124
    log.write(done.stdout + done.stderr + f"(exit {done.returncode})\n")
    log.flush()
    return -1 if "Traceback (most recent call last)" in done.stderr else done.returncode


def run_mutant(mutation: Mutation | None, work: Path) -> Outcome:
    """Copy the snapshot ``work / "sources"``, patch it (unless ``mutation`` is None: the
    baseline, checked on every variant), generate the mutant's variant and run its checks."""
    name = mutation.name if mutation else "baseline"
    outcome = Outcome(name, mutation.path if mutation else "-")
    folder = work / name
    began = time.perf_counter()
    scratch_copy(folder, work / "sources")
    if mutation is not None:
        apply(mutation, folder)
    with open(folder / "checks.log", "w") as log:
        for variant in (mutation.variant,) if mutation else tuple(VARIANTS):
            if _hwgen(folder, ["generate", *VARIANTS[variant], "-o", "variant"], log) != 0:
                outcome.errors.append(f"generate {variant}")
                continue
            for check, args in checks(variant):
                code = _hwgen(folder, args, log)
                if code == 1:
                    outcome.caught_by.append(check)
                elif code != 0:
                    outcome.errors.append(f"{check} " + ("crashed" if code == -1
                                                         else f"exit {code}"))
    outcome.seconds = time.perf_counter() - began
    return outcome


def table(outcomes: list[Outcome]) -> str:
    rows = [("mutation", "file", "caught by", "status")]
    for o in outcomes:
        rows.append((o.name, o.path, ", ".join(o.caught_by) or "-", o.status()))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(" | ".join([*(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)),
                                 r[3]]) for r in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.mutate", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutations")
    p.add_argument("--keep", action="store_true", help="keep the scratch folders (and logs)")
    args = p.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTATIONS}
    if unknown:
        print(f"bench.mutate: error: no mutation named {', '.join(sorted(unknown))}",
              file=sys.stderr)
        return 2
    for mutation in chosen:  # every patch must apply before anything runs
        try:
            patch(mutation, (ROOT / mutation.path).read_text())
        except MutationDoesNotApply as exc:
            print(f"bench.mutate: error: {exc}", file=sys.stderr)
            return 2
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="hwgen-mutate-"))
    scratch_copy(work / "sources")  # one snapshot: edits made while it runs do not leak in
    try:
        baseline = run_mutant(None, work)
        if baseline.caught:
            print(f"bench.mutate: error: the unmutated sources fail the checks "
                  f"({baseline.status()}: {', '.join(baseline.caught_by + baseline.errors)}); "
                  f"see {work / 'baseline' / 'checks.log'}", file=sys.stderr)
            args.keep = True
            return 2
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda m: run_mutant(m, work), chosen))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(table(outcomes))
    survived = [o.name for o in outcomes if not o.caught]
    print(f"{len(outcomes) - len(survived)} of {len(outcomes)} mutants caught "
          f"({len(checks())} checks each, {len(checks('window'))} on the window variant) "
          f"in {time.perf_counter() - began:.0f} s"
          + (f"; kept in {work}" if args.keep else ""))
    if survived:
        print(f"SURVIVED: {', '.join(survived)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
