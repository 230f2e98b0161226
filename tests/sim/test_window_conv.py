"""The window convolution kernel kind (:mod:`fusion.kernels.conv`) on Verilator: every case
bit-exact against an independent direct convolution (numpy, kernel position by kernel position
over the padded input) followed by :func:`hwgen.reference.epilogue`; the kind's own reference
agrees; the analytical cycles equal the measured ones; and the counters' invariants hold (a run
that skipped work fails them).

Cases: 3x3 pad 1 stride 1 and 2, 1x1 stride 2, a vertical stride alone, a batch, asymmetric
pads with non-zero fills, input channels not a multiple of the columns, weights in several
column chunks (with and without a residual), the residual add and scaled add, per-channel
requantize, int32 output, the K-major store, output rows that are not whole blocks of
the array's rows (OW 5, 10, 28: a block spans output rows or images; one input channel, whose
kernel rows load together), and windows too large for half the A scratchpad (single
buffered). All cases of a variant run in one simulator launch, on the 8x8
array and on the 4x4 array with 4-byte words (both have window loads)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusion.kernels.conv.kind import CONV
from fusion.kernels.conv.params import ConvGeometry, ConvParams
from fusion.kernels.conv.program import chunks, column_chunk, geometry
from fusion.runtime.invariants import check_counters, timing_floor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from hwgen.reference import EpilogueParams, epilogue, output_dtype, quantize_multiplier
from tests.helpers import kernel_runs
from tests.helpers.kernel_runs import Run

pytestmark = pytest.mark.slow

V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)
#: The smallest array whose A row is one memory word.
#: With the window unit, which these programs do not use, to share the build of
#: test_window_kind.py and test_window_unit.py.
V4P4 = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES, window_unit=True)

BRR = ("bias", "requant", "relu")
SCALED = dict(residual_op="scaled", res_x_mult=1 << 30, res_r_mult=1 << 29, res_shift=31,
              res_x_zp=-3, res_r_zp=5, res_zp=7, res_lo=-100, res_hi=90)


def _requant(k: int, zp: int = 0, **more) -> EpilogueParams:
    """A per-tensor requantize mapping three standard deviations of a ``k``-long int8 dot
    product (about ``5500 * sqrt(k)``) onto int8, so that outputs spread rather than
    saturate."""
    shift = 30 + round(math.log2(3 * 5500 * math.sqrt(k) / 127))
    return EpilogueParams(mult=1 << 30, shift=shift, zp=zp, **more)


def case(name: str, *, stages=(), quant=None, per_channel=False, **shape) -> tuple:
    """``(name, ConvParams)``; ``quant`` are further epilogue fields (zp, residual's...)."""
    base = dict(N=1, kh=3, kw=3, pads=(1, 1, 1, 1))
    shape = {**base, **shape}
    k = shape["kh"] * shape["kw"] * shape["Cin"]
    quant = dict(quant or {})
    if per_channel:
        params = EpilogueParams(per_channel=True, **quant)
    elif "requant" in stages:
        params = _requant(k, **quant)
    else:
        params = EpilogueParams(**quant)
    return name, ConvParams(stages=stages, epilogue=params, **shape)


V8_CASES = [
    case("3x3 pad 1", H=16, W=16, Cin=16, Cout=16, fill=-3, stages=BRR, quant={"zp": 1}),
    case("3x3 stride 2", H=16, W=32, Cin=8, Cout=16, stride=(2, 2), stages=BRR),
    case("1x1 stride 2 pad 0", H=16, W=16, Cin=8, Cout=8, kh=1, kw=1, stride=(2, 2),
         pads=(0, 0, 0, 0), stages=("bias", "requant")),
    case("vertical stride 2", H=12, W=16, Cin=8, Cout=8, stride=(2, 1), fill=5,
         stages=("requant",)),
    case("batch 2, Cin 5", N=2, H=8, W=8, Cin=5, Cout=12, fill=7, stages=BRR),
    case("asymmetric pads, Cin 3", H=10, W=16, Cin=3, Cout=9, pads=(0, 1, 0, 1), fill=-128,
         stages=BRR),
    case("asymmetric pads 2/1/0/1", H=9, W=16, Cin=5, Cout=8, pads=(2, 1, 0, 1), fill=100,
         stages=("bias", "requant", "clamp"), quant={"clamp_lo": -50, "clamp_hi": 60}),
    case("3 column chunks", H=8, W=8, Cin=64, Cout=64, stages=("bias", "requant")),
    case("residual add", H=8, W=16, Cin=8, Cout=16, fill=-2,
         stages=("bias", "requant", "residual")),
    case("residual in 3 chunks", H=4, W=16, Cin=8, Cout=128,
         stages=("bias", "requant", "residual")),
    case("scaled residual", H=8, W=16, Cin=8, Cout=12, stages=("requant", "residual"),
         quant=SCALED),
    case("per-channel requantize", H=8, W=16, Cin=16, Cout=20, fill=3, stages=BRR,
         per_channel=True, quant={"zp": -4}),
    case("int32 out", H=8, W=8, Cin=8, Cout=8, fill=-1, stages=("bias",)),
    case("K-major out", H=8, W=16, Cin=16, Cout=24, fill=-3, stages=("bias", "requant"),
         kmajor_out=True),
    # output rows that are not whole blocks: a block spans output rows (two LOADWs, the
    # second with keep, per kernel position and row), images, or ends past the last pixel
    # 64 output channels: 8 matmuls a block fill the job queue between window loads
    case("OW 5: 10x4 stride 2, Cin 1 (DS-CNN conv0)", H=49, W=10, Cin=1, Cout=64, kh=10,
         kw=4, stride=(2, 2), pads=(4, 1, 5, 1), fill=-5, stages=BRR),
    case("OW 28: 5x5, Cin 3 (LeNet conv1), channel-major", H=12, W=32, Cin=3, Cout=6, kh=5, kw=5,
         pads=(0, 0, 0, 0), stages=BRR),
    case("OW 10: 5x5, Cin 16 (LeNet conv2)", H=14, W=14, Cin=16, Cout=16, kh=5, kw=5,
         pads=(0, 0, 0, 0), stages=("bias", "requant")),
    case("OW 5: 3x3 stride 2 pad 1, Cin 3", H=9, W=10, Cin=3, Cout=8, stride=(2, 2),
         fill=11, stages=BRR),
    case("OW 10, batch 2: blocks span images", N=2, H=10, W=10, Cin=5, Cout=8, fill=-9,
         stages=BRR),
    case("OW 5, residual", H=5, W=5, Cin=8, Cout=16, stages=("bias", "requant", "residual")),
    case("OW 10, K-major out", H=3, W=10, Cin=8, Cout=16, stages=("requant",),
         kmajor_out=True),
    # DenseNet's 3x3 of 128 channels: 1,152 window rows a block, single buffered; the
    # first 896 load while the step before computes, in four column chunks
    case("single buffered, Cin 128 (DenseNet)", H=8, W=8, Cin=128, Cout=32, fill=-2,
         stages=BRR),
    # channel-major window loads (a channel's rows of a kernel column in one LOADW): the
    # 7x7 stride-2 stem of ResNet-50 and Inception on 3 channels, and 2 channels whose
    # kernel rows fall in two classes (W = 12: rows two apart share their lanes' bytes)
    case("channel-major: 7x7 stride 2 stem, Cin 3", H=20, W=16, Cin=3, Cout=16, kh=7, kw=7,
         stride=(2, 2), pads=(3, 3, 3, 3), fill=-7, stages=BRR, per_channel=True),
    case("channel-major: 7x7, two row classes, Cin 2", H=9, W=12, Cin=2, Cout=8, kh=7, kw=3,
         pads=(3, 1, 3, 1), fill=4, stages=BRR),
]

V4P4_CASES = [
    case("3x3 pad 1", H=8, W=8, Cin=4, Cout=8, fill=-3, stages=BRR, quant={"zp": 1}),
    case("3x3 stride 2, Cin 3", H=8, W=16, Cin=3, Cout=4, stride=(2, 2), fill=9, stages=BRR),
    case("1x1 stride 2 pad 0", H=8, W=8, Cin=4, Cout=4, kh=1, kw=1, stride=(2, 2),
         pads=(0, 0, 0, 0), stages=("requant",)),
    case("batch 2, Cin 5, asymmetric", N=2, H=6, W=8, Cin=5, Cout=6, pads=(1, 0, 0, 2),
         fill=-100, stages=BRR),
    case("residual add", H=4, W=8, Cin=4, Cout=8, stages=("bias", "requant", "residual")),
    case("per-channel requantize", H=4, W=8, Cin=8, Cout=12, stages=BRR, per_channel=True,
         quant={"zp": 2}),
    case("K-major out", H=4, W=8, Cin=4, Cout=8, stages=("requant",), kmajor_out=True),
    case("OW 5: 3x3 pad 1, Cin 3", H=6, W=5, Cin=3, Cout=8, fill=-3, stages=BRR),
    case("OW 10: 5x5 stride 2 pad 2, Cin 1", H=9, W=20, Cin=1, Cout=4, kh=5, kw=5,
         stride=(2, 2), pads=(2, 2, 2, 1), fill=4, stages=BRR),
    case("OW 5: 10x4 stride 2, Cin 1 (DS-CNN conv0)", H=21, W=10, Cin=1, Cout=8, kh=10,
         kw=4, stride=(2, 2), pads=(4, 1, 5, 1), stages=BRR),
    case("OW 28: 5x5, Cin 1", H=7, W=32, Cin=1, Cout=4, kh=5, kw=5, pads=(0, 0, 0, 0),
         stages=BRR),
    case("OW 10, Cin 16, residual", H=4, W=10, Cin=16, Cout=8,
         stages=("bias", "requant", "residual")),
    # windows of 1,080 rows a block: more than half the A scratchpad, single buffered
    case("single buffered, Cin 120", H=5, W=4, Cin=120, Cout=8, fill=-6, stages=BRR),
    case("single buffered, OW 5, residual", H=5, W=5, Cin=120, Cout=8, stride=(1, 1),
         stages=("bias", "requant", "residual")),
]


def values(p: ConvParams, seed: int) -> dict[str, np.ndarray]:
    """Full-range int8 input and weights, and what the stages read."""
    rng = np.random.default_rng(seed)
    spread = 5500 * math.sqrt(p.K)
    ops = {"x": rng.integers(-128, 128, (p.N * p.H * p.W, p.Cin), dtype=np.int8),
           "b": rng.integers(-128, 128, (p.K, p.Cout), dtype=np.int8)}
    if "bias" in p.stages:
        ops["bias"] = rng.integers(-int(spread), int(spread), p.Cout).astype(np.int32)
    if "residual" in p.stages:
        ops["residual"] = rng.integers(-128, 128, (p.M, p.Cout), dtype=np.int8)
    if p.epilogue.per_channel:
        # channel scales spread over a factor of 16, one negative
        scales = 127.0 / (3.0 * spread) * 2.0 ** rng.uniform(-2, 2, p.Cout)
        scales[p.Cout // 2] *= -1
        mult, shift = np.array([quantize_multiplier(s) for s in scales], np.int64).T
        ops["mult"], ops["shift"] = mult.astype(np.int32), shift.astype(np.int32)
    return ops


def direct_conv(p: ConvParams, ops: dict[str, np.ndarray]) -> np.ndarray:
    """The stages applied to the convolution computed directly: the input padded with the
    fill, then per kernel position its strided window times that position's weights."""
    x = ops["x"].reshape(p.N, p.H, p.W, p.Cin).astype(np.int64)
    top, left, bottom, right = p.pads
    padded = np.full((p.N, p.H + top + bottom, p.W + left + right, p.Cin), p.fill, np.int64)
    padded[:, top:top + p.H, left:left + p.W] = x
    w = ops["b"].reshape(p.kh, p.kw, p.Cin, p.Cout).astype(np.int64)
    sy, sx = p.stride
    acc = np.zeros((p.N, p.OH, p.OW, p.Cout), np.int64)
    for ky in range(p.kh):
        for kx in range(p.kw):
            window = padded[:, ky:ky + sy * p.OH:sy, kx:kx + sx * p.OW:sx]
            acc += np.einsum("nhwc,co->nhwo", window, w[ky, kx])
    extra = {k: v for k, v in ops.items() if k not in ("x", "b")}
    return epilogue(acc.reshape(p.M, p.Cout), p.stages, p.epilogue, **extra)


def run_cases(config: VariantConfig, cases: list[tuple[str, ConvParams]]) -> list[Run]:
    return kernel_runs.run_cases(CONV, config, cases, values)


@pytest.fixture(scope="module", params=["8x8", "4x4p4"])
def runs(request) -> tuple[VariantConfig, list[Run]]:
    config, cases = {"8x8": (V8, V8_CASES), "4x4p4": (V4P4, V4P4_CASES)}[request.param]
    return config, run_cases(config, cases)


def test_convolutions_are_bit_exact_against_a_direct_convolution(runs):
    _, found = runs
    for run in found:
        p = run.params
        want = direct_conv(p, run.ops).astype(output_dtype(p.stages))
        got = run.kernel.decode(run.result.outputs)
        assert got.shape == (p.M, p.Cout) and got.dtype == want.dtype, run.name
        np.testing.assert_array_equal(got, want, err_msg=run.name)
        # the kind's own reference (windows, then the GEMM epilogue) agrees
        np.testing.assert_array_equal(run.kernel.expected(**run.ops), want, err_msg=run.name)
        # the data spread: a constant or saturated output would hide wrong windows
        assert len(np.unique(want)) > min(20, want.size // 4), run.name


def test_the_cases_cover_what_they_claim():
    assert any(len(chunks(geometry(V8, p), column_chunk(geometry(V8, p), False))) == 3
               for _, p in V8_CASES if "residual" not in p.stages)
    assert any(len(chunks(geometry(V8, p), column_chunk(geometry(V8, p), True))) >= 3
               for _, p in V8_CASES if "residual" in p.stages)
    # single buffered, with the first part of each block's windows double buffered
    for cfg, cases in ((V4P4, V4P4_CASES), (V8, V8_CASES)):
        single = [geometry(cfg, p) for _, p in cases if geometry(cfg, p).single_buffered]
        assert len(single) == 2 if cfg is V4P4 else 1
        assert all(0 < g.split_rows < g.Kp for g in single)
    # a split inside a kernel position's channels: that window load is cut in two
    assert any(geometry(V4P4, p).split_rows % p.Cin for _, p in V4P4_CASES
               if geometry(V4P4, p).single_buffered)
    for cases, cfg in ((V8_CASES, V8), (V4P4_CASES, V4P4)):
        ps = [p for _, p in cases]
        assert any(p.Cin % cfg.cols for p in ps) and any(p.N > 1 for p in ps)
        assert any(p.kmajor_out for p in ps) and any(p.epilogue.per_channel for p in ps)
        assert any(p.stride == (2, 2) for p in ps) and any(p.fill for p in ps)
        partial = [p for p in ps if p.OW % cfg.rows]
        assert {5, 10} <= {p.OW for p in partial} and any(p.Cin == 1 for p in partial)
        assert any(p.Cin == 3 for p in partial) and any(p.stride == (2, 2) for p in partial)
        assert any((p.kh, p.kw) == (10, 4) for p in partial)
        assert any((p.kh, p.kw) == (5, 5) for p in partial)
        # some block spans two output rows
        assert any(ConvGeometry(cfg, p).period > 1 for p in partial)
    assert any(p.OW == 28 and p.OW % V8.rows for _, p in V8_CASES)
    for cfg, cases in ((V4P4, V4P4_CASES), (V8, V8_CASES)):
        major = {name for name, p in cases if p.Cin > 1 and ConvGeometry(cfg, p).channel_major}
        assert major == {name for name, _ in cases if "channel-major" in name}, major
    assert {ConvGeometry(V8, p).row_class for name, p in V8_CASES if "channel-major" in name} \
        == {1, 2}


def test_analytical_cycles_equal_the_measured_cycles(runs):
    config, found = runs
    for run in found:
        predicted = CONV.features(config, run.params).analytical_cycles()
        assert predicted == run.result.counters["cycles"], run.name


def test_counter_invariants_hold(runs):
    config, found = runs
    for run in found:
        features = CONV.features(config, run.params)
        ideal = -(-features.macs // (config.rows * config.cols))
        floor = timing_floor(config, run.kernel.program, features.analytical_cycles())
        violations = check_counters(config, run.kernel.program, run.result.counters,
                                    ideal_cycles=ideal, floor_cycles=floor)
        assert not violations, (run.name, [str(v) for v in violations])
