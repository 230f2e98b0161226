"""The ONNX node-test conformance runner (:mod:`sim.conformance`).

The slow test runs every selected case on the 4x4 simulation preset's Verilator build (one
launch per case, about 0.3 s each); the others check the selection and the not-applicable
table without a simulator.
"""

import numpy as np
import pytest

from sim import conformance


@pytest.fixture(scope="module")
def cases():
    return conformance.collect()


def test_not_applicable_names_selected_cases(cases):
    """Every listed case exists and is selected, so the table cannot go stale silently."""
    names = {c.name for c in cases}
    assert set(conformance.NOT_APPLICABLE) <= names


def test_selection_covers_the_issue_ops(cases):
    ops = {conformance.node_tests.main_op(c) for c in cases}
    assert ops >= set(conformance.QUANTIZED_OPS) | {"Clip", "MaxPool", "Add", "Max", "Min"}
    # the float cases of the element-wise ops are float models: not selected
    assert "test_clip" not in {c.name for c in cases}
    assert "test_maxpool_2d_uint8" in {c.name for c in cases}


def test_compare_is_exact_for_integers_and_relative_for_floats():
    want = np.array([1, 2], np.int8)
    assert conformance._compare("y", want.copy(), want) == ""
    assert "expects int8" in conformance._compare("y", want.astype(np.uint8), want)
    assert "expects" in conformance._compare("y", np.array([1, 3], np.int8), want)
    f = np.array([1.0, 0.0], np.float32)
    assert conformance._compare("y", f * (1 + 5e-7), f) == ""
    assert "rel. 1e-6" in conformance._compare("y", f * (1 + 5e-6), f)
    assert "rel. 1e-6" in conformance._compare("y", np.array([1.0, 1e-30], np.float32), f)


@pytest.mark.slow
def test_every_selected_case_passes_or_is_listed(v4x4, cases, capsys):
    outcomes = conformance.run_all(v4x4, cases=cases)
    with capsys.disabled():
        print("\n" + conformance.report(outcomes))
    failed = [f"{o.case}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failed, "\n".join(failed)
    assert {o.case for o in outcomes if o.status == "n/a"} == set(conformance.NOT_APPLICABLE)
    for o in outcomes:
        if o.status == "pass" and o.op not in conformance.BOUNDARY_OPS:
            assert o.kernels and not o.host_ops, o
