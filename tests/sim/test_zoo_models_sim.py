"""The model-zoo classics (``examples/zoo``, small sizes) on Verilator, on the 8x8 all-stage
variant with the window unit: every kernel shadow-checked, and the output equal to the exact
reference's checked-in one. The four cover what issue 32 added: DenseNet's quantized
BatchNormalization as a per-channel affine kernel, ResNet-50's ``Sum`` residuals as qadd,
Inception-v1's LRN on the host (the second over its convolution's rows) with its max pool
on the accelerator, the QOperator ShuffleNet's ``QLinearSoftmax`` and channel shuffle, and
SqueezeNet's Concats (QDQ and ``QLinearConcat``) as joins on the accelerator, each input
copied or rescaled into its slice of the output, stored K-major for the next convolution,
its ceil-mode max pools on the window unit, the first cropping the columns its stem
computes for whole blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from examples.real_check import lsb_errors, output_scale
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from fusion.runtime.run import run_compiled
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES

pytestmark = pytest.mark.slow

ZOO = Path(__file__).resolve().parents[2] / "examples" / "zoo"
V8W = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24, window_unit=True)


@pytest.mark.parametrize("name", ["densenet121_qdq", "resnet50_qdq", "inception_v1_qdq",
                                  "shufflenet_qop", "squeezenet_qdq", "squeezenet_qop"])
def test_zoo_model_runs_exactly(name):
    path = ZOO / f"{name}.onnx"
    compiled = compile_model(load_model(path), V8W, cache=KernelCache(disk=False))
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
        x, want = data["x"], data["y"]
    report = run_compiled(compiled, {"x": x})
    errors = lsb_errors(report.outputs["y"], want, output_scale(onnx.load(str(path)), "y"))
    assert not errors.any(), f"{name}: {np.abs(errors).max()} LSB off the exact reference"
    # what the host rewrote between kernels is what the plan lists, each tensor once at most:
    # a store serves the readers of more bytes (Inception's joins: three convolutions K-major,
    # the max pool repacked)
    assert report.repacks == [r.to_dict() for r in compiled.repacks]
    assert len({r.tensor for r in compiled.repacks}) == len(compiled.repacks)
    if name == "densenet121_qdq":
        affine = [k for k in report.kernels if "_bn1" in k.name or "norm5" in k.name]
        assert affine, "no batch-norm affine ran on the accelerator"
    if name == "inception_v1_qdq":  # lrn2 reads conv2's rows as they lie: no transpose
        ops = [h.node.op for h in compiled.host]
        assert "lrn" in ops and "transpose" not in ops, ops
        # the max pools before inc3a and inc4a store tiles for the branch's max pool, and
        # a 1x1 max pool on the window unit copies them K-major for the three convolutions
        copies = [c for c in compiled.relayouts if c.by == "window"]
        assert len(copies) == 2 and all(len(c.readers) == 3 for c in copies)
    if name.startswith("squeezenet"):
        joins = [k for k in compiled.steps if getattr(k, "spec", None) is not None
                 and k.spec.kind.name == "concat"]
        assert len(joins) == 8 and not report.host_ops[1:], report.host_ops
        pools = [k for k in compiled.kernels if k.spec.kind.name == "window"
                 and k.spec.params.mode == "max"]
        assert len(pools) == 3  # ceil-mode 3x3/2 max pools, as more end padding
        assert any(p.spec.params.pads[2] > p.spec.params.pads[0] for p in pools)
        assert pools[0].spec.params.pads[3] < 0  # the stem's extra columns, cropped
        assert compiled.kernels[0].spec.kind.name == "conv"  # the stem, whole rows
        mixes = [j.spec.params.rescaled for j in joins]
        assert any(any(m) and not all(m) for m in mixes)  # a copy beside a rescale
        assert any(j.spec.params.kmajor_out for j in joins)
    assert report.total_cycles > 0
