"""The compiler's depthwise convolutions on the window unit: an ``im2col`` and the grouped
GEMM reading it become one window-unit kernel (:mod:`fusion.kernels.window`) on a variant
with the unit, reading its input where the producer stored it, with no host im2col; without
the unit (or with ``--without window_unit``) the grouped GEMM of host-gathered windows runs,
and the plan says why."""

from pathlib import Path

import numpy as np
import pytest

from fusion.compiler.kernels import depthwise_taps
from fusion.compiler.options import CompileOptions
from fusion.compiler.plan import HostStep, compile_model
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from fusion.passes.conv_legalize import gemm_weights
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES

ROOT = Path(__file__).resolve().parents[3]
MOBILENET = ROOT / "examples/real/mobilenet_v1_025_qdq.onnx"
V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)
V8W = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24, window_unit=True)


def _compile(path, config, **options):
    return compile_model(load_model(path), config, cache=KernelCache(disk=False), **options)


def _dw_im2cols(compiled):
    return [s for s in compiled.steps if isinstance(s, HostStep) and s.node.op == "im2col"
            and "_dw" in s.node.name]


def test_mobilenet_runs_every_depthwise_convolution_on_the_window_unit():
    compiled = _compile(MOBILENET, V8W)
    windows = [k for k in compiled.kernels if k.spec.kind.name == "window"
               and k.spec.params.mode == "mac"]
    assert len(windows) == 13  # b1_dw .. b13_dw
    assert not _dw_im2cols(compiled)
    kernels = list(compiled.kernels)
    for k in windows:
        assert k.spec.params.mode == "mac" and k.spec.params.kh == k.spec.params.kw == 3
        # it reads the tiles its producer stored, where they lie ...
        assert "x" in compiled.memory.in_place(k.name)
        producer = next(p for p in kernels if p.spec.output == k.spec.inputs[0])
        assert producer.compiled.regions["out"].addr == k.compiled.regions["x"].addr
        assert not getattr(producer.spec.params, "kmajor_out", False)
        # ... and stores K-major for the pointwise GEMM reading it
        assert k.spec.params.kmajor_out


@pytest.mark.parametrize("config, options, reason", [
    (V8, CompileOptions(), "the variant has no window unit"),
    (V8W, CompileOptions.without("window_unit"), "the window unit is turned off"),
])
def test_otherwise_the_grouped_gemm_runs_and_the_plan_says_why(config, options, reason):
    compiled = _compile(MOBILENET, config, options=options)
    assert not any(k.spec.kind.name == "window" for k in compiled.kernels)
    im2cols = _dw_im2cols(compiled)
    assert len(im2cols) == 13
    for step in im2cols:
        assert step.reason.startswith("the depthwise convolution on the window unit is "
                                      "refused: "), step.reason
        assert reason in step.reason


def test_depthwise_taps_come_from_the_diagonal_blocks():
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (5, 1, 3, 2)).astype(np.int8)  # [C, 1, kh, kw]
    gemm = gemm_weights(w, 5, 5)  # [C*kh*kw, C], im2col's (c, ky, kx) rows
    taps = depthwise_taps(gemm, 5, 6)
    np.testing.assert_array_equal(taps, w.reshape(5, 6).T)
    gemm[0, 1] = 1  # a weight off the diagonal blocks: not depthwise
    assert depthwise_taps(gemm, 5, 6) is None
    assert depthwise_taps(gemm[:, :4], 5, 6) is None


LENET = ROOT / "examples/real/lenet5_qdq.onnx"


def test_max_pools_run_on_the_window_unit_when_the_variant_has_it():
    on_unit = [k for k in _compile(LENET, V8W).kernels if k.spec.kind.name == "window"]
    assert [k.spec.params.mode for k in on_unit] == ["max", "max"]
    for k in on_unit:
        p = k.spec.params
        assert p.fill == -128 and p.stages == () and p.out_dtype == np.int8
    for config, options, note in ((V8, CompileOptions(), ""),
                                  (V8W, CompileOptions.without("window_unit"),
                                   "the window unit is turned off")):
        pools = [k for k in _compile(LENET, config, options=options).kernels
                 if "maxpool" in k.name]
        assert [k.spec.kind.name for k in pools] == ["max", "max"]
        assert all(k.spec.note.startswith(note) and bool(k.spec.note) == bool(note)
                   for k in pools)


def test_a_pool_tensor_comes_back_nchw():
    from fusion.kernels.window.kind import WINDOW
    from fusion.kernels.window.params import WindowParams

    p = WindowParams(N=2, H=4, W=6, C=3, kh=2, kw=2, stride=2, mode="max", fill=-128)
    rows = np.arange(p.M * p.C).reshape(p.M, p.C)  # pixel (n, oy, ox) x channel
    nchw = WINDOW.tensor_of(p, rows, (2, 3, 2, 3))
    assert nchw[1, 2, 0, 1] == rows[(1 * 2 + 0) * 3 + 1, 2]
    assert WINDOW.tensor_of(p, rows, (2, 6, 3)).shape == (2, 6, 3)  # GEMM-form rows


def test_the_global_pool_sums_on_the_window_unit_and_no_layout_step_is_left():
    """On a variant with the unit, MobileNet's global average pool sums each channel's 3x3
    plane where the last pointwise GEMM stored it (fusion.passes.global_pool_window), and the
    FC reads the pooled tiles through the reshapes: the model's only host steps are its
    boundary's quantize and dequantize. Without the unit the pool stays a GEMM."""
    compiled = _compile(MOBILENET, V8W)
    (pool,) = [k for k in compiled.kernels if k.spec.kind.name == "window"
               and k.spec.params.mode == "sum"]
    assert (pool.spec.params.H, pool.spec.params.W, pool.spec.params.C) == (3, 3, 256)
    assert "x" in compiled.memory.in_place(pool.name)
    assert sorted(s.node.op for s in compiled.steps if isinstance(s, HostStep)) == [
        "dequantize", "quantize"]
    fc = compiled.kernels[-1]
    assert fc.spec.inputs[0] == pool.spec.output and "a" in compiled.memory.in_place(fc.name)
    without = _compile(MOBILENET, V8)
    assert not any(k.spec.kind.name == "window" for k in without.kernels)


QDQ_CNN = ROOT / "examples/qdq_cnn.onnx"


def _in_place_reads(compiled):
    """``(reader, region, producer, tensor)`` for every input region a kernel reads where its
    producer stored it."""
    by_output = {k.spec.output: k for k in compiled.kernels}
    for k in compiled.kernels:
        for region in sorted(compiled.memory.in_place(k.name)):
            tensor = k.spec.inputs[k.spec.kind.inputs_in_place(k.spec.params)[region]]
            yield k, region, by_output[tensor], tensor


@pytest.mark.parametrize("path", [QDQ_CNN, LENET], ids=lambda p: p.stem)
def test_a_region_read_in_place_holds_the_matrix_its_kind_makes_of_the_tensor(path):
    """What a producer stored (its output matrix, as its kind maps it to the graph tensor:
    ``tensor_of``) is, element for element, the operand the reader's kind makes of that tensor
    (``host_operands``). qdq_cnn's max pool is gathered on the host (its 36 output pixels an
    image are not whole tiles) and stores the NCHW tensor's elements in rows of 8; its 8
    channels made that ``72 x 8`` matrix look like the ``N*H*W x C`` pixel rows the depthwise
    window kernel reads, which it read in place (a shadow-check failure on the simulator)."""
    compiled = _compile(path, V8W)
    graph = compiled.graph
    for reader, region, producer, tensor in _in_place_reads(compiled):
        out = producer.spec.kind.output(producer.spec.params)
        stored = np.arange(np.prod(out.shape)).reshape(out.shape)
        shape = graph.tensors[tensor].shape
        value = producer.spec.kind.tensor_of(producer.spec.params,
                                             stored.reshape(-1)[:np.prod(shape)], shape)
        inputs = [value if t == tensor else np.zeros(graph.tensors[t].shape, np.int64)
                  for t in reader.spec.inputs]
        read = reader.spec.kind.host_operands(compiled.config, reader.spec.params, inputs)
        np.testing.assert_array_equal(read[region], stored,
                                      err_msg=f"{reader.name}.{region} <- {producer.name}")
