"""The window-unit kernel kind without a simulator: params validation, refusals with their
reasons, regions and layouts, and its programs run on a value-level model of the ISA
(``tests/helpers/window_model.py``: the window unit as :func:`hwgen.reference.window_tile`
defines it, loads landing early and WINDOWs computing late), bit-exact against an independent
direct depthwise convolution (plain loops over the padded input) and max pool."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fusion.kernels.program import compile_kernel
from fusion.kernels.window.features import WindowFeatures
from fusion.kernels.window.kind import WINDOW, window_problem
from fusion.kernels.window.params import WindowLayout, WindowParams
from fusion.kernels.window.program import chunk_tiles
from hwgen.config import VariantConfig
from hwgen.isa import Instr, Op, Unit, decode, encode
from hwgen.presets import ALL_STAGES
from hwgen.reference import EpilogueParams, epilogue, output_dtype, to_dtype
from tests.helpers import window_model

V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, window_unit=True)
V4 = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES, window_unit=True)
#: A small A scratchpad, so that planes are cut into chunks.
V8_SMALL_A = dataclasses.replace(V8, spad_a_depth=128)


def params(**kw) -> WindowParams:
    base = dict(N=1, H=8, W=8, C=8, kh=3, kw=3, stride=1, pads=(1, 1, 1, 1))
    return WindowParams(**{**base, **kw})


# -- params and refusals ----------------------------------------------------------------------

@pytest.mark.parametrize("kw, message", [
    (dict(C=0), "C must be a positive integer, not 0"),
    (dict(stride=0), "stride must be a positive integer, not 0"),
    (dict(pads=(1, 1, 1)), "pads must be 4 integers"),
    (dict(fill=128), "fill is an int8 lane value, not 128"),
    (dict(mode="avg"), "mode must be one of mac, max, sum, not 'avg'"),
    (dict(H=1, pads=(0, 0, 0, 0)), "a 3x3 window does not fit the 1x8 input"),
])
def test_bad_params_are_refused_naming_the_value(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        params(**kw)


@pytest.mark.parametrize("config, kw, reason", [
    (VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES), {}, "no_window_unit"),
    (V8, dict(kh=5, kw=5, pads=(2, 2, 2, 2)), "kernel"),
    (V8, dict(stride=4, H=16, W=16), "stride"),
    (V8, dict(pads=(3, 1, 1, 1), H=9), "pads"),
    (V8, dict(W=5000, H=3), "size"),
    (V8, dict(stages=("bias", "requant", "residual")), "residual"),
    (V8, dict(N=2, H=3, W=3), "image_tiles"),
    (dataclasses.replace(V8, spad_a_depth=16), dict(H=8, W=64), "a_scratchpad"),
    (dataclasses.replace(V8, spad_e_depth=16), dict(C=64, stages=("bias",)), "e_scratchpad"),
    (V8, dict(kmajor_out=True, stages=("bias",)), "kmajor_out"),
    (dataclasses.replace(V8, imem_depth=16), dict(H=32, W=32), "program_too_long"),
    (V8, dict(stages=("bias", "relu", "requant")), "stage_order"),
])
def test_refusals_name_the_reason(config, kw, reason):
    refusal = WINDOW.legality(config, params(**kw))
    assert refusal is not None and refusal.reason == reason, refusal
    assert refusal.kind == "window"


def test_legal_counterparts_of_the_refusals():
    for kw in (dict(), dict(kh=1, kw=1, pads=(0, 0, 0, 0)), dict(stride=3, H=16, W=16),
               dict(N=2, H=4, W=4), dict(kmajor_out=True, stages=("bias", "requant")),
               dict(mode="max", fill=-128)):
        assert window_problem(V8, params(**kw)) is None, kw


def test_regions_and_layouts():
    p = params(C=12, stages=("bias", "requant"), kmajor_out=True,
               epilogue=EpilogueParams(mult=1 << 30, shift=33))
    sizes = WINDOW.regions(V8, p)
    # x: 64 pixels x 2 channel blocks of 8 bytes; w: 2 blocks of 9 tap rows; out like x
    assert sizes == {"x": 64 * 16, "w": 2 * 9 * 8, "bias": 2 * 8 * 4, "out": 64 * 16}
    assert WINDOW.region_layout(V8, p, "x") == "tiles"
    assert WINDOW.region_layout(V8, p, "out") == "kmajor/16"
    assert WINDOW.region_layout(V8, dataclasses.replace(p, kmajor_out=False), "out") == "tiles"
    assert WINDOW.inputs_in_place(p) == {"x": 0}
    assert set(WINDOW.operands(V8, p)) == {"x", "w", "bias"}
    assert "w" not in WINDOW.operands(V8, params(mode="max"))


def test_features_round_trip_through_json():
    f = WINDOW.features(V8, params(stages=("bias",), pads=(1, 0, 1, 0)))
    back = WindowFeatures.from_dict(f.to_dict())
    assert back == f and back.macs == 8 * 6 * 9 * 8  # OH x OW x taps x C


def test_chunks_cover_a_plane_larger_than_half_the_a_scratchpad():
    lay = WindowLayout(V8_SMALL_A, params(H=20, W=16))
    size = chunk_tiles(lay)
    assert 1 <= size < 40  # 320 output pixels, 40 tiles: several chunks of 64 input rows


# -- programs on the value-level model --------------------------------------------------------

def direct(x: np.ndarray, p: WindowParams, w: np.ndarray | None) -> np.ndarray:
    """``[N*OH*OW, C]`` accumulators, written independently of the kind: loops over output
    pixels and taps, reading ``fill`` outside the input."""
    xs = x.reshape(p.N, p.H, p.W, p.C).astype(np.int64)
    out = np.zeros((p.N, p.OH, p.OW, p.C), np.int64)
    for n in range(p.N):
        for oy in range(p.OH):
            for ox in range(p.OW):
                vals = []
                for ky in range(p.kh):
                    for kx in range(p.kw):
                        iy = oy * p.stride + ky - p.pads[0]
                        ix = ox * p.stride + kx - p.pads[1]
                        inside = 0 <= iy < p.H and 0 <= ix < p.W
                        v = xs[n, iy, ix] if inside else np.full(p.C, p.fill, np.int64)
                        vals.append(v * w[ky * p.kw + kx] if p.mode == "mac" else v)
                out[n, oy, ox] = np.sum(vals, axis=0) if p.mode == "mac" else np.max(vals, 0)
    return out.reshape(p.M, p.C)


def operands(p: WindowParams, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    vals = {"x": rng.integers(-128, 128, (p.N * p.H * p.W, p.C)).astype(np.int8)}
    if p.mode == "mac":
        vals["w"] = rng.integers(-128, 128, (p.taps, p.C)).astype(np.int8)
    if "bias" in p.stages:
        vals["bias"] = rng.integers(-5000, 5000, p.C).astype(np.int32)
    if p.epilogue.per_channel:
        vals["mult"] = rng.integers(1 << 29, 1 << 30, p.C).astype(np.int32)
        vals["shift"] = rng.integers(36, 40, p.C).astype(np.int32)
    return vals


def run_on_model(config: VariantConfig, p: WindowParams, seed: int = 0):
    kernel = compile_kernel(WINDOW, config, p)
    vals = operands(p, seed)
    memory = bytearray(config.mem_words * config.port_bytes)
    for addr, data in kernel.memory(**vals):
        memory[addr * config.port_bytes: addr * config.port_bytes + len(data)] = data
    window_model.run(config, kernel.program, memory, p.epilogue)
    addr, nbytes = kernel.reads["out"]
    got = kernel.decode(bytes(memory[addr * config.port_bytes:
                                     addr * config.port_bytes + nbytes]))
    extra = {k: v for k, v in vals.items() if k not in ("x", "w")}
    want = to_dtype(epilogue(direct(vals["x"], p, vals.get("w")), p.stages, p.epilogue,
                             **extra), output_dtype(p.stages))
    return kernel, vals, got, want


BR = ("bias", "requant")
Q = EpilogueParams(mult=1 << 30, shift=36, zp=3)
MODEL_CASES = [
    (V8, params(fill=-3, stages=BR, epilogue=Q)),
    (V8, params(H=9, W=11, C=24, stride=2, fill=5, stages=BR + ("relu",), epilogue=Q)),
    (V8, params(H=7, W=5, kh=1, kw=1, pads=(0, 0, 0, 0))),
    (V8, params(N=2, H=8, W=4, C=8, stages=BR, epilogue=Q, kmajor_out=True)),
    (V8, params(H=9, W=9, C=16, stride=3, pads=(0, 2, 2, 0), fill=-128)),
    (V8, params(H=6, W=6, stages=("bias", "requant"),
                epilogue=EpilogueParams(per_channel=True))),
    (V8_SMALL_A, params(H=20, W=16, C=16, fill=1, stages=BR, epilogue=Q)),
    (V8_SMALL_A, params(N=2, H=13, W=16, C=16, stride=2, stages=("bias",))),
    (V4, params(H=7, W=9, C=6, stages=BR, epilogue=Q)),
    (V4, params(N=2, H=8, W=8, C=8, stride=2, pads=(0, 0, 1, 1), kmajor_out=True,
                stages=BR, epilogue=Q)),
    (V8, params(H=9, W=7, C=12, mode="max", fill=-128, stride=2)),
]


@pytest.mark.parametrize("config, p", MODEL_CASES, ids=lambda v: getattr(v, "key", lambda: "")()
                         [:4] if isinstance(v, VariantConfig) else WINDOW.describe(v))
def test_program_on_the_isa_model_matches_a_direct_convolution(config, p):
    kernel, vals, got, want = run_on_model(config, p)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(kernel.result_of(vals), want)  # the kind's own reference


def test_the_model_catches_a_program_without_its_waits():
    """The double buffer depends on the chunk-start waits: without them the model sees
    a WINDOW read rows of a LOAD not waited for (the check can fail)."""
    p = params(H=20, W=16, C=16, fill=1)
    kernel = compile_kernel(WINDOW, V8_SMALL_A, p)
    words = [w for w in kernel.program if decode(w).op is not Op.WAIT]
    # but the final wait before the halt
    words = words[:-1] + [encode(Instr(Op.WAIT, {"units": 7})), words[-1]]
    memory = bytearray(V8_SMALL_A.mem_words * V8_SMALL_A.port_bytes)
    with pytest.raises(window_model.HazardError, match="not waited for"):
        window_model.run(V8_SMALL_A, words, memory, p.epilogue)


def test_a_large_plane_runs_its_tiles_in_hardware_loops():
    p = params(H=48, W=48, C=8, stages=BR, epilogue=Q)
    kernel = compile_kernel(WINDOW, V8, p)
    assert len(kernel.program) < 150, len(kernel.program)  # 288 tiles: 870 unrolled
    assert "bnzd" in kernel.source


def test_the_model_catches_a_load_over_rows_queued_windows_still_read():
    """Chunk-start waits without the compute unit's bit let the next chunk's LOAD overwrite
    the half the last chunk's queued WINDOWs read: the model computes them late, and the
    result differs (the check can fail)."""
    p = params(H=20, W=16, C=16, fill=1)
    kernel, vals, got, want = run_on_model(V8_SMALL_A, p, seed=1)
    np.testing.assert_array_equal(got, want)  # as compiled: right
    words = [encode(Instr(Op.WAIT, {"units": int(Unit.LOAD)}))
             if decode(w).op is Op.WAIT and decode(w).get("units") == Unit.LOAD | Unit.FEED
             else w for w in kernel.program]
    memory = bytearray(V8_SMALL_A.mem_words * V8_SMALL_A.port_bytes)
    for addr, data in kernel.memory(**vals):
        memory[addr * 8: addr * 8 + len(data)] = data
    window_model.run(V8_SMALL_A, words, memory, p.epilogue)
    addr, nbytes = kernel.reads["out"]
    got = kernel.decode(bytes(memory[addr * 8: addr * 8 + nbytes]))
    assert not np.array_equal(got, want)


def test_chunk_sizes_are_variants_the_cost_model_chooses_between():
    p = params(H=48, W=48, C=8, stages=BR, epilogue=Q)
    variants = WINDOW.variants(V8, p)
    sizes = [v.chunk for v in variants]
    assert sizes[0] == chunk_tiles(WindowLayout(V8, p)) == 114 and sizes == sorted(sizes)[::-1]
    assert len(sizes) >= 3 and all(WINDOW.legality(V8, v) is None for v in variants)
    assert WINDOW.variant_label(variants[1]) == f"chunk={sizes[1]} tiles"
    cycles = [WINDOW.features(V8, v).analytical_cycles() for v in variants]
    assert min(cycles) < cycles[0]  # the largest chunk waits longest for its first load
    with pytest.raises(ValueError, match="chunk must be an integer >= 0"):
        params(chunk=-1)
    too_big = dataclasses.replace(p, chunk=200)  # 200 tiles' rows do not fit half of A
    assert WINDOW.legality(V8, too_big).reason == "a_scratchpad"


@pytest.mark.parametrize("chunk", [1, 3])
def test_programs_of_other_chunk_sizes_run_right_on_the_isa_model(chunk):
    p = params(H=20, W=16, C=16, fill=1, stages=BR, epilogue=Q, chunk=chunk)
    _, _, got, want = run_on_model(V8_SMALL_A, p)
    np.testing.assert_array_equal(got, want)
