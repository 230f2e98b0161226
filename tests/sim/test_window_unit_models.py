"""Real models with their depthwise convolutions and max pools on the window unit, on
Verilator: every kernel shadow-checked (outputs against the reference executor, counters
against the program, cycles against the timing floor); the very outputs the models have
without the unit, each equal to the exact reference's bundled one (``examples/real``); fewer
cycles, and
fewer layout host steps than the grouped GEMMs of host-gathered windows (and, for a global
pool, than its GEMM over the host's transpose)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from examples.real_check import REAL, lsb_errors, output_scale
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from fusion.runtime.run import run_compiled
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES

pytestmark = pytest.mark.slow

V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)
V8W = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24, window_unit=True)


def _run(name: str, config: VariantConfig):
    compiled = compile_model(load_model(REAL / f"{name}.onnx"), config,
                             cache=KernelCache(disk=False))
    with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
        x, want = data["x"], data["y"]
    return compiled, run_compiled(compiled, {"x": x}), want


@pytest.mark.parametrize("name, dw, pools, ratio", [
    ("ds_cnn_qdq", 4, 0, 0.65), ("mobilenet_v1_025_qdq", 13, 0, 0.7), ("lenet5_qdq", 0, 2, 0.98)])
def test_depthwise_convolutions_and_max_pools_on_the_window_unit(name, dw, pools, ratio):
    compiled, report, want = _run(name, V8W)
    modes = [k.spec.params.mode for k in compiled.kernels if k.spec.kind.name == "window"]
    assert modes.count("mac") == dw and modes.count("max") == pools
    base_compiled, base, _ = _run(name, V8)
    assert not any(k.spec.kind.name == "window" for k in base_compiled.kernels)
    np.testing.assert_array_equal(report.outputs["y"], base.outputs["y"])
    errors = lsb_errors(report.outputs["y"], want,
                        output_scale(onnx.load(str(REAL / f"{name}.onnx")), "y"))
    assert not errors.any()
    layout = [h for h in report.host if h.role == "layout"]
    base_layout = [h for h in base.host if h.role == "layout"]
    # no im2col for a depthwise convolution; and where the model ends in a global pool, no
    # transposes or reshapes around it either (it sums the rows where they lie)
    assert not any(h.op == "im2col" and "_dw" in h.name for h in layout)
    assert len(layout) <= len(base_layout) - dw
    if name != "lenet5_qdq":
        assert not any(h.op in ("transpose", "reshape", "flatten") for h in layout)
    assert report.total_cycles < ratio * base.total_cycles
    # one launch simulated the model and its directed sets: at least the model's cycles
    assert report.simulated_cycles > report.total_cycles
    assert 0 < report.sim_seconds < report.wall_seconds
    for k in report.kernels:
        assert k.cycles == pytest.approx(k.predicted_cycles, rel=0.02), k.name


def test_qdq_cnn_depthwise_after_a_host_gathered_pool_runs_bit_exact():
    """qdq_cnn's max pool runs as planes gathered on the host (an image's 36 output pixels
    are not whole tiles of 8) and stores its NCHW tensor's elements in rows of 8; the
    depthwise convolution after it on the window unit reads pixel rows. It read the pool's
    buffer in place as if it held them (122 of 256 outputs wrong); now it is given its pixel
    rows, and the model's outputs are those of the variant without the unit."""
    from examples.build_models import sample_input
    from fusion.reference import executor

    path = Path(__file__).resolve().parents[2] / "examples/qdq_cnn.onnx"
    runs = {}
    for config in (V8W, V8):
        compiled = compile_model(load_model(path), config, cache=KernelCache(disk=False))
        x = sample_input("qdq_cnn", 1)
        runs[config.window_unit] = report = run_compiled(compiled, {"x": x})
        want = executor.run(compiled.graph, {"x": x})["y"]
        np.testing.assert_array_equal(report.outputs["y"], want)
    dw = next(k for k in runs[True].kernels if k.name == "conv2/qconv2d/im2col")
    assert dw.describe.startswith("window depthwise conv")
    np.testing.assert_array_equal(runs[True].outputs["y"], runs[False].outputs["y"])
