"""The bad-input campaign (``python -m bench.bad_inputs``), its cases that need no simulator:
models, JSON graphs, options and input files each end in one ``hwgen: error:`` line."""

import pytest

from bench.bad_inputs import campaign

#: Cases that run no simulation: what the compiler and the command line's edge refuse.
EDGE = ("json:", "inspect", "compile", "--input", "generate", "onnx", "unknown", "missing",
        "option", "workload", "report", "store:", "probe:")


@pytest.mark.slow
def test_bad_inputs_at_the_edge_are_clean_one_line_errors():
    outcomes = campaign(select=lambda c: not c.process and c.name.startswith(EDGE))
    assert len(outcomes) >= 100
    bad = [f"{o.case.name}: {o.kind}: {o.line}" for o in outcomes
           if o.kind not in ("clean", "healed")]
    assert not bad, "\n".join(bad)
