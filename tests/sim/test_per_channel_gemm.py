"""GEMM kernels with per-channel requantize (the builders' bias groups and req_mode) on
Verilator, bit-exact against the reference, on data that a per-tensor requantize would get
wrong."""

import math

import numpy as np
import pytest

from fusion.kernels.gemm.kind import compiled_gemm
from fusion.kernels.tiling import Tiling
from hwgen.reference import EpilogueParams, gemm_epilogue, quantize_multiplier
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow

#: Ragged N (not a multiple of cols) and several column blocks on both variants.
SHAPES = [(8, 16, 8), (9, 20, 11), (5, 24, 23), (13, 40, 6)]
STAGE_SETS = [("bias", "requant", "relu"), ("requant",)]


def per_channel_problem(m, k, n, seed):
    """Full-range int8 operands; channel scales spread over a factor of 16 around one that
    maps three standard deviations of the accumulators onto int8, and one negative."""
    rng = np.random.default_rng(seed)
    spread = math.sqrt(k) * 5500.0
    scales = 127.0 / (3.0 * spread) * 2.0 ** rng.uniform(-2, 2, n)
    scales[n // 2] *= -1
    mult, shift = np.array([quantize_multiplier(s) for s in scales], np.int64).T
    return {"a": rng.integers(-128, 128, (m, k), dtype=np.int8),
            "b": rng.integers(-128, 128, (k, n), dtype=np.int8),
            "bias": rng.integers(-int(spread), int(spread), n).astype(np.int32),
            "mult": mult.astype(np.int32), "shift": shift.astype(np.int32)}


@pytest.mark.parametrize("variant", ["2x2", "4x4"], indirect=True)
def test_per_channel_gemms_are_bit_exact(variant):
    params = EpilogueParams(zp=-4, per_channel=True)
    cases = []
    for i, (m, k, n) in enumerate(SHAPES):
        for stages in STAGE_SETS:
            for fused in (True, False):
                ops = per_channel_problem(m, k, n, seed=10 * i + len(stages))
                kernel = compiled_gemm(variant, m, k, n, stages=stages, fused=fused,
                                       params=params)
                assert kernel.dims.Nb > 1
                cases.append((kernel, ops))
    results = run_programs(variant, [
        Job(kn.program, MemoryImage(writes=tuple(kn.memory(**ops)), reads=kn.reads),
            name=f"pc_{kn.dims.M}x{kn.dims.K}x{kn.dims.N}_{'_'.join(kn.stages)}_"
                 f"{'fused' if kn.fused else 'unfused'}")
        for kn, ops in cases])
    for (kernel, ops), result in zip(cases, results, strict=True):
        got = kernel.decode(result.outputs)
        stages = kernel.stages
        bias = ops["bias"] if "bias" in stages else None
        want = gemm_epilogue(ops["a"], ops["b"], stages, params, bias=bias, mult=ops["mult"],
                             shift=ops["shift"])
        np.testing.assert_array_equal(got, want, err_msg=f"{kernel.dims} {stages} "
                                                          f"fused={kernel.fused}")
        np.testing.assert_array_equal(want, kernel.expected(**ops))
        # mostly in range: the per-channel arithmetic, not the saturation, is checked
        assert (np.abs(want.astype(int)) < 127).mean() > 0.5
        # the data separates per channel from per tensor: channel 0's multiplier and shift
        # for every column (what a kernel that left req_mode at 0 computes) are wrong
        wrong = gemm_epilogue(ops["a"], ops["b"], stages, EpilogueParams(
            zp=-4, mult=int(ops["mult"][0]), shift=int(ops["shift"][0])), bias=bias)
        assert (got != wrong).mean() > 0.3


#: Per-channel GEMMs wider than the epilogue scratchpad's bias groups (128 rows on 2x2: 42
#: column blocks; 256 on 4x4: 85), so their bias loads in windows: super tiles, a fused
#: residual beside the window, a streamed GEMV, K-major stores, grouped GEMMs (windows of
#: whole groups).
WINDOWED = {
    "2x2": [(5, 16, 100, ("bias", "requant", "relu"), {}),
            (6, 16, 90, ("bias", "requant", "residual"), {}),
            (1, 32, 100, ("bias", "requant"), {"tiling": Tiling(stream=2)}),
            (4, 16, 90, ("requant",), {"kmajor_out": True}),
            (3, 100, 100, ("bias", "requant"), {"kgroup": 2}),  # a depthwise-like affine
            (4, 96, 96, ("requant",), {"kgroup": 4, "kblocks": 2})],  # 2 blocks a group
    "4x4": [(3, 16, 360, ("bias", "requant", "relu"), {})],
}


@pytest.mark.parametrize("variant", ["2x2", "4x4"], indirect=True)
def test_per_channel_gemms_with_bias_windows_are_bit_exact(variant):
    params = EpilogueParams(zp=-4, per_channel=True)
    name = f"{variant.rows}x{variant.cols}"
    cases = []
    for i, (m, k, n, stages, kw) in enumerate(WINDOWED[name]):
        ops = per_channel_problem(m, k, n, seed=100 + i)
        ops["residual"] = np.random.default_rng(i).integers(-128, 128, (m, n), dtype=np.int8)
        if kw.get("kgroup"):  # B block-diagonal: each column block reads its group's rows
            groups = np.arange(n) // variant.cols // kw.get("kblocks", 1)
            ops["b"][np.arange(k)[:, None] // kw["kgroup"] != groups[None, :]] = 0
        kernel = compiled_gemm(variant, m, k, n, stages=stages, params=params, **kw)
        assert kernel.meta["chosen"]["bias_windows"] > 1
        cases.append((kernel, ops))
    results = run_programs(variant, [
        Job(kn.program, MemoryImage(writes=tuple(kn.memory(**ops)), reads=kn.reads),
            name=f"pcw_{kn.dims.M}x{kn.dims.K}x{kn.dims.N}_{'_'.join(kn.stages)}")
        for kn, ops in cases])
    for (kernel, ops), result in zip(cases, results, strict=True):
        got = kernel.decode(result.outputs)
        stages = kernel.stages
        want = gemm_epilogue(ops["a"], ops["b"], stages, params,
                             bias=ops["bias"] if "bias" in stages else None,
                             residual=ops["residual"] if "residual" in stages else None,
                             mult=ops["mult"], shift=ops["shift"])
        np.testing.assert_array_equal(got, want, err_msg=f"{kernel.dims} {stages}")
        # the cost model walks the windows as the hardware runs them: exactly
        predicted = kernel.kind.features(variant, kernel.signature).analytical_cycles()
        assert predicted == result.cycles, f"{result.summary()}: predicted {predicted}"
