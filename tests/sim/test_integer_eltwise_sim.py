"""Standalone int8/uint8 Add (wrapping), Clip, Relu, Max and Min on the 4x4 simulator,
against ONNX.

Full-range values, so that about a quarter of the sums wrap: the accelerator's bias stage adds
in int32 lanes and its int8 store keeps the low byte (:mod:`fusion.passes.integer_eltwise`).
"""

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from fusion.compiler.plan import compile_model
from fusion.frontend import import_onnx
from fusion.runtime.run import run_compiled
from tests.fusion.passes.test_integer_eltwise import full_range, one_node


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_integer_eltwise_on_the_simulator(v4x4, dtype):
    rng = np.random.default_rng(7)
    models = [
        one_node("Add", dtype, (3, 4, 5), {"c": full_range(rng, dtype, (3, 4, 5))}, ["c"]),
        one_node("Add", dtype, (6, 5), {"c": full_range(rng, dtype, (5,))}, ["c"]),
        one_node("Clip", dtype, (3, 5), {"lo": np.array(-5 if dtype == "int8" else 100, dtype),
                                          "hi": np.array(90, dtype)}, ["lo", "hi"]),
    ]
    if dtype == "int8":
        models.append(one_node("Relu", dtype, (4, 6), {}, []))
    models += [one_node(op, dtype, (5, 7), {"c": full_range(rng, dtype, (5, 7))}, ["c"])
               for op in ("Max", "Min")]
    wrapped = 0
    for proto in models:
        shape = tuple(d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim)
        x = full_range(rng, dtype, shape)
        compiled = compile_model(import_onnx(proto), v4x4, host_fallback=False)
        report = run_compiled(compiled, {"x": x})
        want = ReferenceEvaluator(proto).run(None, {"x": x})[0]
        got = report.outputs["y"]
        assert got.dtype == want.dtype and np.array_equal(got, want)
        kinds = {"Max": ["max"], "Min": ["pass", "max", "pass"]}
        assert [k.describe.split()[0] for k in report.kernels] == kinds.get(
            proto.graph.node[0].op_type, ["pass"])
        if proto.graph.node[0].op_type == "Add":  # c is the model's output for x = 0
            c = ReferenceEvaluator(proto).run(None, {"x": np.zeros_like(x)})[0]
            wrapped += int(np.count_nonzero(x.astype(np.int64) + c != got))
    assert wrapped > 10  # the case that matters was exercised
