"""onnxruntime's quantized ops and the pools, folded, compiled and run on the simulated
accelerator (Verilator), against the exact reference (not onnxruntime, whose QGemm saturates
without VNNI)."""

import numpy as np
import onnx
import pytest

from fusion.ir import ops
from hwgen.cli import main
from tests.fusion.frontend import qlinear_pool_cases as cases

ALL = "bias,requant,relu,clamp,residual"


@pytest.mark.slow
def test_qoperator_chain_runs_on_the_accelerator_within_one_lsb_of_the_reference(tmp_path,
                                                                                  capsys):
    model, feeds = cases.qoperator_chain(1)
    path = tmp_path / "chain.onnx"
    onnx.save(model, str(path))
    np.save(tmp_path / "x.npy", feeds["x"])
    _, graph = cases.hwgen_run(model, feeds, fold=True)
    assert not [n.op for n in graph.nodes if n.op in ops.ONNX_OPS]
    variant = tmp_path / "v4x4"
    assert main(["generate", "--rows", "4", "--cols", "4", "--epilogue", ALL,
                 "-o", str(variant)]) == 0
    assert main(["run", str(path), "--variant", str(variant), "--shadow-inputs", "0",
                 "--cache", str(tmp_path / "cache"), "--input", f"x={tmp_path / 'x.npy'}",
                 "--output", f"y={tmp_path / 'y.npy'}"]) == 0
    out = capsys.readouterr().out
    assert "each bit-exact against the reference" in out
    want = cases.exact_run(model, feeds)
    worst, _ = cases.lsb_diff(want, np.load(tmp_path / "y.npy"))
    assert worst <= 1
