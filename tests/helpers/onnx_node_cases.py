"""ONNX's own backend node tests, run through ``import_onnx`` and ``fusion.reference.executor.run``.

``onnx.backend.test.case.node.collect_testcases`` builds every node test in memory (model,
inputs, expected outputs; nothing is downloaded; :mod:`fusion.frontend.onnx_node_tests`
collects them, shared with the simulator's conformance runner :mod:`sim.conformance`). We keep
the cases whose nodes all use ops of hwgen's catalog, import each model, run it, and compare:
integer outputs exactly, float outputs with the case's own tolerances (as ONNX's backend
runner does).

Scale, zero-point and shape inputs that the test feeds as graph inputs are stored as
initializers before import (same values, same meaning): hwgen needs them constant, and this
way the cases also exercise the Quant annotations.

Run it from the repository root to print the pass count by op::

    .venv/bin/python -m tests.helpers.onnx_node_cases
"""

from __future__ import annotations

import collections
import sys
from dataclasses import dataclass

import numpy as np

from fusion.frontend import onnx_node_tests as node_tests
from fusion.frontend.onnx_import import import_onnx
from fusion.frontend.onnx_node_tests import main_op, promote_constants
from fusion.reference import executor

#: The ONNX ops of the issue; a case qualifies when every node of its model is one of them.
OPS = ("QuantizeLinear", "DequantizeLinear", "MatMul", "Gemm", "Conv", "Add", "Relu", "Clip",
       "MaxPool", "Flatten", "Reshape", "Transpose", "QLinearMatMul", "QLinearConv",
       "MatMulInteger", "ConvInteger", "Identity", "AveragePool", "GlobalAveragePool",
       "Mul", "Sigmoid", "Softmax", "Concat", "Pad")

_NARROW = "element type outside hwgen's dtypes (int8, uint8, int32, int64, float32)"
#: The cases we skip, and why. Every other qualifying case must pass.
SKIP = {
    **{f"test_quantizelinear_{t}": _NARROW for t in (
        "e4m3fn", "e5m2", "uint16", "int16", "uint4", "int4", "uint2", "int2", "float4e2m1")},
    **{f"test_dequantizelinear_{t}": _NARROW for t in (
        "e4m3fn", "e4m3fn_float16", "e4m3fn_zero_point", "e5m2", "uint16", "int16", "uint4",
        "int4", "uint2", "int2", "float4e2m1")},
    **{f"test_{op}_{t}": _NARROW for op in ("add", "mul")
       for t in ("int16", "uint16", "uint32", "uint64")},
    "test_maxpool_with_argmax_2d_precomputed_pads": "MaxPool's Indices output",
    "test_maxpool_with_argmax_2d_precomputed_strides": "MaxPool's Indices output",
    "test_quantizelinear_blocked_symmetric": "int16 output (output_dtype=INT16)",
    "test_identity_sequence": "a sequence value, not a tensor",
    "test_identity_opt": "an optional value, not a tensor",
}


@dataclass
class Outcome:
    case: str
    op: str
    status: str  # "pass", "skip" or "fail"
    detail: str = ""


def collect() -> list:
    """The qualifying cases (about 10 s: onnx builds every node test in memory)."""
    return node_tests.collect(lambda c: {n.op_type for n in c.model.graph.node} <= set(OPS))


def check(case) -> Outcome:
    """Run one case; never raises."""
    op = main_op(case)
    if case.name in SKIP:
        return Outcome(case.name, op, "skip", SKIP[case.name])
    try:
        for inputs, expected in case.data_sets:
            model, feeds = promote_constants(case.model, node_tests.feeds_of(case, inputs))
            graph = import_onnx(model)
            got = executor.run(graph, feeds)
            for name, want in zip(graph.outputs, expected, strict=True):
                have = got[name]
                if have.shape != want.shape:
                    return Outcome(case.name, op, "fail", f"{name}: shape {have.shape} != "
                                                          f"{want.shape}")
                if np.issubdtype(want.dtype, np.integer):
                    if have.dtype != want.dtype or not np.array_equal(have, want):
                        return Outcome(case.name, op, "fail", f"{name}: {have} != {want}")
                elif not np.allclose(have, want, rtol=case.rtol, atol=case.atol):
                    return Outcome(case.name, op, "fail", f"{name}: {have} !~ {want}")
    except Exception as exc:  # report, don't crash the sweep
        return Outcome(case.name, op, "fail", f"{type(exc).__name__}: {exc}")
    return Outcome(case.name, op, "pass")


def table(outcomes: list[Outcome]) -> str:
    """Pass / skip / fail counts by op, as text."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        counts[o.op][o.status] += 1
    lines = [f"{'op':<18}{'pass':>6}{'skip':>6}{'fail':>6}"]
    for op in OPS:
        c = counts.get(op, collections.Counter())
        lines.append(f"{op:<18}{c['pass']:>6}{c['skip']:>6}{c['fail']:>6}")
    total = collections.Counter(o.status for o in outcomes)
    lines.append(f"{'total':<18}{total['pass']:>6}{total['skip']:>6}{total['fail']:>6}")
    return "\n".join(lines)


if __name__ == "__main__":
    results = [check(c) for c in collect()]
    print(table(results))
    for r in results:
        if r.status != "pass":
            print(f"{r.status}: {r.case}: {r.detail[:300]}")
    sys.exit(any(r.status == "fail" for r in results))
