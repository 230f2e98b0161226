"""Lowering of GEMMs whose weights had zero points: the split shows, the rest is unchanged."""

import numpy as np
import pytest

from fusion.compiler.lower import CompileError, classify
from fusion.compiler.plan import HostStep, compile_model
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.kernels.cache import KernelCache
from fusion.passes.report import inspect_model, render
from hwgen.presets import SMALL

QA = Quant(0.05, 3)


def model(w, qw):
    b = GraphBuilder("mm")
    x = b.input("x", (8, w.shape[0]), "int8", quant=QA)
    y = b.qmatmul(x, b.const("w", w, quant=qw), name="fc")
    y = b.requant(y, Quant(0.3, -2), name="rq")
    return b.build([y], validate=False)


def asymmetric():
    w = np.random.default_rng(1).integers(0, 256, (16, 8)).astype(np.uint8)
    w[3, 0] = 255  # column 0 has zero point 0: 255 needs three int8 parts
    return model(w, Quant((0.01,) * 8, (0, 4, 9, 0, 1, 2, 3, 7), axis=1))


def test_a_split_gemm_runs_k_times_the_parts_after_a_host_repeat():
    compiled = compile_model(asymmetric(), SMALL, cache=KernelCache(disk=False))
    host = [s.node.op for s in compiled.steps if isinstance(s, HostStep)]
    assert host == ["repeat"]
    (kernel,) = compiled.kernels
    assert (kernel.spec.params.M, kernel.spec.params.K, kernel.spec.params.N) == (8, 48, 8)
    assert kernel.spec.describe().endswith(
        "; weights split into 3 int8 parts along K (weight zero points), A repeated by "
        "fc/split_k")
    # the activation zero point's correction is -za * colsum of the folded weights
    graph = compiled.graph
    folded = graph.initializers["w"].astype(np.int64)
    np.testing.assert_array_equal(kernel.spec.consts["bias"], -3 * folded.sum(axis=0))


def test_explain_names_the_split():
    compiled = compile_model(asymmetric(), SMALL, cache=KernelCache(disk=False))
    assert ("  note: weights split into 3 int8 parts along K (weight zero points), A repeated "
            "by fc/split_k") in compiled.explain().splitlines()


def test_inspect_names_the_split():
    text = render(inspect_model(asymmetric()))
    assert ("weights split along K (weight zero points folded):\n  fc: 3 int8 parts, K 16 -> "
            "48 (input repeated by fc/split_k)") in text


def test_a_graph_that_skipped_the_passes_is_refused_with_the_fix():
    graph = asymmetric()
    with pytest.raises(CompileError, match=r"node 'fc' \(qmatmul\): weight 'w' is uint8 with "
                                           r"zero point\(s\) \[0, 4, 9, 0, 1, 2, 3, 7\]; .* run "
                                           r"the passes \(fusion.passes.driver.optimize\)"):
        classify(graph, graph.node("fc"))


def test_symmetric_weights_compile_to_the_same_programs_as_before():
    w = np.random.default_rng(2).integers(-128, 128, (16, 8)).astype(np.int8)
    graph = model(w, Quant(0.01, 0))
    compiled = compile_model(graph, SMALL, cache=KernelCache(disk=False))
    assert all(not isinstance(s, HostStep) for s in compiled.steps)
    (kernel,) = compiled.kernels
    assert kernel.spec.params.K == 16 and kernel.spec.note == ""
    np.testing.assert_array_equal(kernel.spec.consts["b"], w)
