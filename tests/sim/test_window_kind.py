"""The window-unit kernel kind (:mod:`fusion.kernels.window`) on Verilator: depthwise
convolutions and max pools bit-exact against an independent direct computation (plain numpy
loops over output pixels and taps, ``fill`` outside the input) followed by
:func:`hwgen.reference.epilogue`; the kind's own reference agrees; the analytical cycles equal
the measured ones; and the counters' invariants hold.

Cases: 3x3 pad 1 stride 1, 3x3 stride 2 and 3, 1x1, odd heights and widths, C = 8 and 24
(a partial channel block), a batch of 2, asymmetric pads with non-zero fills, per-channel
requantize, int32 output, the K-major store, planes in several chunks of the A scratchpad,
and max pools, one cropping its input's last columns (a negative end pad). All cases of a
variant run in one simulator launch, on the 8x8 array and on the 4x4 array with 4-byte
words, both with the window unit.

The chunked cases ask for the chunk size (``chunk``) that an A scratchpad of 128 rows
forces (:data:`V8_SMALL_A`, the size its capacity rule picks: checked below), so that they
run the same programs on the 8x8 build the other tests share instead of a build of their
own (a Verilator build of an 8x8 variant is a minute of ``make test``)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fusion.kernels.window.kind import WINDOW
from fusion.kernels.window.params import WindowLayout, WindowParams
from fusion.kernels.window.program import chunk_tiles, chunks
from fusion.runtime.invariants import check_counters, timing_floor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from hwgen.reference import EpilogueParams, epilogue, quantize_multiplier
from tests.helpers import kernel_runs
from tests.helpers.kernel_runs import Run

pytestmark = pytest.mark.slow

V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24, window_unit=True)
V4P4 = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES, window_unit=True)
#: Planes of more than 64 pixels take several chunks here (not built: see the module's
#: docstring).
V8_SMALL_A = dataclasses.replace(V8, spad_a_depth=128)

BRR = ("bias", "requant", "relu")


def case(name: str, *, stages=(), quant=None, per_channel=False, **shape) -> tuple:
    """``(name, WindowParams)``; a per-tensor requantize spreads the outputs over int8."""
    base = dict(N=1, kh=3, kw=3, pads=(1, 1, 1, 1))
    shape = {**base, **shape}
    quant = dict(quant or {})
    if per_channel:
        params = EpilogueParams(per_channel=True, **quant)
    elif "requant" in stages:
        k = shape["kh"] * shape["kw"]
        shift = 30 + round(math.log2(3 * 5500 * math.sqrt(k) / 127))
        params = EpilogueParams(mult=1 << 30, shift=shift, **quant)
    else:
        params = EpilogueParams(**quant)
    return name, WindowParams(stages=stages, epilogue=params, **shape)


V8_CASES = [
    case("3x3 s1 p1", H=16, W=16, C=8, fill=-3, stages=BRR, quant={"zp": 1}),
    case("3x3 s2, C 24", H=15, W=17, C=24, stride=2, pads=(0, 0, 1, 1), fill=5, stages=BRR),
    case("3x3 s3, odd", H=13, W=11, C=16, stride=3, pads=(1, 2, 2, 0), fill=-100,
         stages=("bias", "requant", "clamp"), quant={"clamp_lo": -50, "clamp_hi": 60}),
    case("1x1", H=7, W=9, C=8, kh=1, kw=1, pads=(0, 0, 0, 0), stages=("requant",)),
    case("batch 2", N=2, H=8, W=6, C=16, fill=7, stages=BRR),
    case("per-channel requantize", H=9, W=7, C=24, fill=3, stages=BRR, per_channel=True,
         quant={"zp": -4}),
    case("int32 out, C 12", H=6, W=10, C=12, fill=-1, stages=("bias",)),
    case("K-major out", H=8, W=8, C=24, fill=-3, stages=("bias", "requant"), kmajor_out=True),
    case("2x3 window", H=10, W=9, C=8, kh=2, kw=3, pads=(1, 1, 0, 1), stages=BRR),
    case("max pool 3x3 s2", H=11, W=11, C=16, stride=2, fill=-128, mode="max"),
    # the last 3 of 16 columns cropped (a convolution's whole blocks of columns): they hold
    # 127, which any window reading them would return
    case("max pool cropping 3 columns", H=9, W=16, C=16, stride=2, pads=(0, 0, 0, -3),
         fill=-128, mode="max"),
]
#: On V8, in the chunks :data:`V8_SMALL_A`'s capacity forces.
CHUNKED_CASES = [
    case("chunks, 3x3 s1", H=20, W=16, C=16, fill=2, stages=BRR, chunk=4),
    case("chunks, s2, batch 2", N=2, H=13, W=16, C=8, stride=2, stages=BRR, chunk=1),
]
V4P4_CASES = [
    case("3x3 s1 p1", H=8, W=8, C=4, fill=-3, stages=BRR, quant={"zp": 1}),
    case("3x3 s2, C 6, odd", H=9, W=7, C=6, stride=2, fill=9, stages=BRR),
    case("1x1", H=5, W=4, C=8, kh=1, kw=1, pads=(0, 0, 0, 0), stages=("requant",)),
    case("batch 2, asymmetric", N=2, H=6, W=8, C=5, pads=(1, 0, 0, 2), fill=-100,
         stages=BRR),
    case("per-channel requantize, C 12", H=5, W=8, C=12, stages=BRR, per_channel=True,
         quant={"zp": 2}),
    case("K-major out", H=4, W=8, C=8, stages=("requant",), kmajor_out=True),
    case("max pool 2x2 s2", H=8, W=8, C=4, kh=2, kw=2, stride=2, pads=(0, 0, 0, 0),
         fill=-128, mode="max"),
]


def values(p: WindowParams, seed: int) -> dict[str, np.ndarray]:
    """Full-range int8 input and weights, and what the stages read."""
    rng = np.random.default_rng(seed)
    spread = 5500 * math.sqrt(p.taps)
    x = rng.integers(-128, 128, (p.N, p.H, p.W, p.C), dtype=np.int8)
    x[:, p.H + min(p.pads[2], 0):] = x[:, :, p.W + min(p.pads[3], 0):] = 127  # cropped
    ops = {"x": x.reshape(-1, p.C)}
    if p.mode == "mac":
        ops["w"] = rng.integers(-128, 128, (p.taps, p.C), dtype=np.int8)
    if "bias" in p.stages:
        ops["bias"] = rng.integers(-int(spread), int(spread), p.C).astype(np.int32)
    if p.epilogue.per_channel:
        scales = 127.0 / (3.0 * spread) * 2.0 ** rng.uniform(-2, 2, p.C)
        scales[p.C // 2] *= -1
        mult, shift = np.array([quantize_multiplier(s) for s in scales], np.int64).T
        ops["mult"], ops["shift"] = mult.astype(np.int32), shift.astype(np.int32)
    return ops


def direct(p: WindowParams, ops: dict[str, np.ndarray]) -> np.ndarray:
    """The stages applied to the window computed directly: per output pixel and tap, the
    input pixel (or the fill outside the input) times the tap's weight, summed; or the max."""
    x = ops["x"].reshape(p.N, p.H, p.W, p.C).astype(np.int64)
    acc = np.zeros((p.N, p.OH, p.OW, p.C), np.int64)
    h, w = p.H + min(p.pads[2], 0), p.W + min(p.pads[3], 0)  # a negative end pad crops
    for n in range(p.N):
        for oy in range(p.OH):
            for ox in range(p.OW):
                taps = []
                for ky in range(p.kh):
                    for kx in range(p.kw):
                        iy, ix = oy * p.stride + ky - p.pads[0], ox * p.stride + kx - p.pads[1]
                        v = x[n, iy, ix] if 0 <= iy < h and 0 <= ix < w else \
                            np.full(p.C, p.fill, np.int64)
                        taps.append(v * ops["w"][ky * p.kw + kx] if p.mode == "mac" else v)
                acc[n, oy, ox] = np.sum(taps, axis=0) if p.mode == "mac" else np.max(taps, 0)
    extra = {k: v for k, v in ops.items() if k not in ("x", "w")}
    return epilogue(acc.reshape(p.M, p.C), p.stages, p.epilogue, **extra)


def run_cases(config: VariantConfig, cases: list[tuple[str, WindowParams]]) -> list[Run]:
    return kernel_runs.run_cases(WINDOW, config, cases, values)


VARIANTS = {"8x8": (V8, V8_CASES + CHUNKED_CASES), "4x4p4": (V4P4, V4P4_CASES)}


@pytest.fixture(scope="module", params=list(VARIANTS))
def runs(request) -> tuple[VariantConfig, list[Run]]:
    config, cases = VARIANTS[request.param]
    return config, run_cases(config, cases)


def test_windows_are_bit_exact_against_a_direct_computation(runs):
    _, found = runs
    for run in found:
        p = run.params
        want = direct(p, run.ops).astype(p.out_dtype)
        got = run.kernel.decode(run.result.outputs)
        assert got.shape == (p.M, p.C) and got.dtype == want.dtype, run.name
        np.testing.assert_array_equal(got, want, err_msg=run.name)
        np.testing.assert_array_equal(run.kernel.expected(**run.ops), want, err_msg=run.name)
        # the data spread: a constant or saturated output would hide wrong windows
        assert len(np.unique(want)) > min(20, want.size // 4), run.name


def test_the_cases_cover_what_they_claim():
    for cases, cfg in ((V8_CASES, V8), (V4P4_CASES, V4P4)):
        ps = [p for _, p in cases]
        assert any(p.C % cfg.cols for p in ps) and any(p.C > 2 * cfg.cols for p in ps)
        assert any(p.N > 1 for p in ps)
        assert any(p.kmajor_out for p in ps) and any(p.epilogue.per_channel for p in ps)
        assert any(p.stride == 2 for p in ps) and any(p.fill for p in ps)
        assert any(p.mode == "max" for p in ps) and any(p.kh == 1 for p in ps)
    assert any(min(p.pads) < 0 for _, p in V8_CASES)
    for _, p in CHUNKED_CASES:
        small = WindowLayout(V8_SMALL_A, dataclasses.replace(p, chunk=0))
        assert chunk_tiles(small) == p.chunk  # what the small scratchpad would force
        lay = WindowLayout(V8, p)
        assert len(chunks(lay, chunk_tiles(lay))) >= 3 * p.N


def test_analytical_cycles_equal_the_measured_cycles(runs):
    config, found = runs
    for run in found:
        predicted = WINDOW.features(config, run.params).analytical_cycles()
        assert predicted == run.result.counters["cycles"], run.name


def test_counter_invariants_hold(runs):
    config, found = runs
    for run in found:
        features = WINDOW.features(config, run.params)
        floor = timing_floor(config, run.kernel.program, features.analytical_cycles())
        violations = check_counters(config, run.kernel.program, run.result.counters,
                                    floor_cycles=floor)
        assert not violations, (run.name, [str(v) for v in violations])
