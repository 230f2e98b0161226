"""ONNX's node tests of the quantized and integer ops, run on the simulated accelerator.

The cases are ONNX's own backend node tests (``collect_testcases``, built in memory:
:mod:`fusion.frontend.onnx_node_tests`): every case of ``QLinearMatMul``, ``QLinearConv``,
``MatMulInteger``, ``ConvInteger``, ``QuantizeLinear`` and ``DequantizeLinear``, and the
integer cases of ``Relu``, ``Clip``, ``MaxPool``, ``Add``, ``Max`` and ``Min`` (their float
cases are float models, which hwgen does not quantize for the user).

Each case is made a deployed model: every graph input but the first (the activation) becomes
an initializer (weights, scales, zero points, constant operands). Then it goes the way
``hwgen run`` takes a model: ``import_onnx``, ``compile_model`` with the host fallback on (as
``hwgen run`` without ``--no-host-fallback``), and :func:`fusion.runtime.run.run_compiled` on
the variant's Verilator build, with the shadow checks. Its outputs are compared with ONNX's
expected ones: integers exactly (and in the same dtype), floats exactly or within ``1e-6``
relative.

Every selected case either passes or is listed in :data:`NOT_APPLICABLE` with the reason;
a listed case must be refused by hwgen with an error (never crash, never run), so the list
cannot go stale. A case of an op the accelerator computes (all but ``QuantizeLinear`` and
``DequantizeLinear``, which are the model's boundary conversions and run on the host by
design) must also run at least one kernel on the accelerator and no compute op on the host.

Run it (prints one line per case, then ``N passed, M not applicable``)::

    .venv/bin/python -m sim.conformance [--variant 4x4]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.frontend import onnx_node_tests as node_tests
from hwgen.config import VariantConfig
from hwgen.presets import SIM_VARIANTS

#: Ops whose every node test is selected.
QUANTIZED_OPS = ("QLinearMatMul", "QLinearConv", "MatMulInteger", "ConvInteger",
                 "QuantizeLinear", "DequantizeLinear")
#: Ops whose integer node tests are selected.
INTEGER_OPS = ("Relu", "Clip", "MaxPool", "Add", "Max", "Min")
#: Ops that run on the host by design: the model's boundary conversions.
BOUNDARY_OPS = ("QuantizeLinear", "DequantizeLinear")

_NARROW = ("element type {} is outside hwgen's integer types (int8 and uint8 tensors, int32 "
           "accumulators): hwgen refuses it by design")
_LANES = ("{} elements: the accelerator's element-wise lanes are int8 (uint8 as int8 x - 128); "
          "hwgen refuses the type for this op")

#: The selected cases that do not apply, and why. Every other selected case must pass.
NOT_APPLICABLE: dict[str, str] = {
    **{f"test_quantizelinear_{t}": _NARROW.format(t) for t in (
        "e4m3fn", "e5m2", "uint16", "int16", "uint4", "int4", "uint2", "int2",
        "float4e2m1")},
    **{f"test_dequantizelinear_{t}": _NARROW.format(t.split("_")[0]) for t in (
        "e4m3fn", "e4m3fn_float16", "e4m3fn_zero_point", "e5m2", "uint16", "int16", "uint4",
        "int4", "uint2", "int2", "float4e2m1")},
    "test_quantizelinear_blocked_asymmetric": "blocked quantization (block_size): hwgen "
                                              "quantizes per tensor or per channel",
    "test_quantizelinear_blocked_symmetric": _NARROW.format("int16 (output_dtype)"),
    "test_dequantizelinear_blocked": "blocked quantization (block_size): hwgen dequantizes "
                                     "per tensor or per channel",
    **{f"test_add_{t}": _NARROW.format(t) for t in ("int16", "uint16", "uint32", "uint64")},
    **{f"test_{op}_{t}": _LANES.format(t) for op in ("max", "min")
       for t in ("int16", "uint16", "int32", "uint32", "int64", "uint64")},
}


def selected(case: Any) -> bool:
    """Whether the conformance run covers ``case`` (see the module docstring)."""
    op = node_tests.main_op(case)
    if op in QUANTIZED_OPS:
        return True
    dtype = node_tests.first_input_dtype(case)
    return op in INTEGER_OPS and dtype != "?" and np.issubdtype(np.dtype(dtype), np.integer)


@dataclass
class Outcome:
    """One case's result: ``status`` is ``"pass"``, ``"n/a"`` or ``"fail"``."""

    case: str
    op: str
    status: str
    detail: str = ""
    kernels: list[str] = field(default_factory=list)
    host_ops: list[str] = field(default_factory=list)


def _compare(name: str, have: np.ndarray, want: np.ndarray) -> str:
    """Why ``have`` is not ONNX's ``want`` (integers exact, floats within 1e-6 relative),
    or ``""``."""
    have, want = np.asarray(have), np.asarray(want)
    if have.shape != want.shape:
        return f"{name}: shape {have.shape}, ONNX expects {want.shape}"
    if np.issubdtype(want.dtype, np.integer):
        if have.dtype != want.dtype or not np.array_equal(have, want):
            return f"{name}: {have.dtype} {have.ravel()[:8]}..., ONNX expects {want.dtype} " \
                   f"{want.ravel()[:8]}..."
        return ""
    w = want.astype(np.float64)
    h = have.astype(np.float64)
    if not np.all((h == w) | (np.abs(h - w) <= 1e-6 * np.abs(w))):
        return f"{name}: {h.ravel()[:8]}..., ONNX expects {w.ravel()[:8]}... (rel. 1e-6)"
    return ""


def compile_case(case: Any, inputs: list[np.ndarray], config: VariantConfig):
    """The case as a deployed model, compiled as ``hwgen run`` compiles: ``(compiled,
    feeds)``. Raises hwgen's refusal (a ``ValueError``) for a model it cannot run."""
    from fusion.compiler.plan import compile_model
    from fusion.frontend.onnx_import import import_onnx

    model, feeds = node_tests.promote_all_but_first(case.model, node_tests.feeds_of(case, inputs))
    graph = import_onnx(model)
    return compile_model(graph, config, host_fallback=True), feeds


def run_case(case: Any, config: VariantConfig, build: Any) -> Outcome:
    """Compile and run one case on ``build`` and compare with ONNX; never raises for a
    case's own failure (it is the outcome)."""
    from fusion.runtime.run import run_compiled

    op = node_tests.main_op(case)
    listed = NOT_APPLICABLE.get(case.name)
    kernels: list[str] = []
    host_ops: list[str] = []
    try:
        for inputs, expected in case.data_sets:
            try:
                compiled, feeds = compile_case(case, list(inputs), config)
            except ValueError as exc:  # hwgen's refusals: GraphError, CompileError...
                if listed:
                    return Outcome(case.name, op, "n/a", listed)
                return Outcome(case.name, op, "fail", f"refused: {exc}")
            if listed:
                return Outcome(case.name, op, "fail", f"listed as not applicable ({listed}) "
                                                      f"but hwgen compiles it: update the list")
            report = run_compiled(compiled, feeds, build=build)
            kernels += [k.describe for k in report.kernels]
            host_ops += [f"{h.name} ({h.op})" for h in report.host_ops]
            for name, want in zip(compiled.graph.outputs, expected, strict=True):
                problem = _compare(name, report.outputs[name], want)
                if problem:
                    return Outcome(case.name, op, "fail", problem, kernels, host_ops)
    except Exception as exc:  # a crash is a failure of that case, reported, not the sweep's
        return Outcome(case.name, op, "fail", f"{type(exc).__name__}: {exc}", kernels,
                       host_ops)
    if op not in BOUNDARY_OPS and (not kernels or host_ops):
        return Outcome(case.name, op, "fail",
                       f"ran {len(kernels)} accelerator kernel(s) and host op(s) "
                       f"{', '.join(host_ops) or 'none'}; {op} must run on the accelerator",
                       kernels, host_ops)
    return Outcome(case.name, op, "pass", "", kernels, host_ops)


def run_all(config: VariantConfig | None = None, build: Any = None,
            cases: list | None = None) -> list[Outcome]:
    """Every selected case on ``config`` (the ``4x4`` simulation preset by default), in
    collection order.

    Parameters
    ----------
    config : VariantConfig, optional
    build : sim.build.BuildInfo, optional
        The variant's Verilator build (built or found in the cache otherwise).
    cases : list, optional
        The cases (default: :func:`collect`).
    """
    from sim.build import build_variant

    config = config or SIM_VARIANTS["4x4"]
    build = build or build_variant(config)
    return [run_case(c, config, build) for c in (cases if cases is not None else collect())]


def collect() -> list:
    """The selected node test cases."""
    return node_tests.collect(selected)


def count_line(outcomes: list[Outcome]) -> str:
    """``N passed, M not applicable`` (and ``, F failed`` when some did)."""
    n = {s: sum(o.status == s for o in outcomes) for s in ("pass", "n/a", "fail")}
    failed = f", {n['fail']} failed" if n["fail"] else ""
    return f"{n['pass']} passed, {n['n/a']} not applicable{failed}"


def report(outcomes: list[Outcome]) -> str:
    """One line per case (status, case, what ran or why not), then the count line."""
    lines = []
    for o in outcomes:
        if o.status == "pass":
            where = (f"{len(o.kernels)} kernel(s): {'; '.join(o.kernels)}" if o.kernels
                     else "host (boundary conversion)")
            lines.append(f"pass  {o.case}: {where}")
        else:
            lines.append(f"{o.status:<5} {o.case}: {o.detail}")
    lines.append(count_line(outcomes))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.conformance``: run every selected case; exit 1 if any failed."""
    parser = argparse.ArgumentParser(prog="python -m sim.conformance", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("--variant", default="4x4", choices=sorted(SIM_VARIANTS),
                        help="the simulation preset to run on (hwgen.presets.SIM_VARIANTS)")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    outcomes = run_all(SIM_VARIANTS[args.variant])
    print(report(outcomes))
    print(f"({time.perf_counter() - began:.1f} s on the {args.variant} preset)", file=sys.stderr)
    return int(any(o.status == "fail" for o in outcomes))


if __name__ == "__main__":
    sys.exit(main())
