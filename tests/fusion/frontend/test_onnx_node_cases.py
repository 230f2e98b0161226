"""ONNX's backend node tests for the imported ops pass through import_onnx + executor.run.

The cases are generated in memory by onnx (no download) once per session; the harness and the
explicit skip list live in ``onnx_node_cases.py``, which also runs as a script.
"""

import pytest

from tests.helpers.onnx_node_cases import OPS, SKIP, check, collect, table


@pytest.fixture(scope="session")
def outcomes():
    return [check(case) for case in collect()]


def test_node_cases_pass(outcomes, capsys):
    with capsys.disabled():
        print("\nONNX backend node tests through import_onnx + executor.run:\n" + table(outcomes))
    failed = [f"{o.case}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failed, "\n".join(failed)


def test_every_op_has_passing_cases(outcomes):
    passed = {o.op for o in outcomes if o.status == "pass"}
    assert passed == set(OPS)


def test_skip_list_is_exact(outcomes):
    """Every skip is a case that exists, so the list cannot go stale silently."""
    assert {o.case for o in outcomes if o.status == "skip"} == set(SKIP)
