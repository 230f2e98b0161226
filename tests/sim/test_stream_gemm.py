"""Streamed GEMMs (tiling ``stream``: B through a ring of slots behind counted WAITs) on
Verilator: bit-exact against the numpy reference, with the analytical model's cycles exactly,
and faster than the best super tiling on a weight-bound GEMV, measured."""

import numpy as np
import pytest

from fusion.kernels.gemm.kind import compiled_gemm
from fusion.kernels.tiling import Tiling
from hwgen.reference import EpilogueParams, gemm_epilogue
from sim.gemm_check import GemmCase, run_gemms
from sim.run import Job, MemoryImage, run_programs
from tests.sim.test_per_channel_gemm import per_channel_problem

pytestmark = pytest.mark.slow


def test_streamed_gemms_are_bit_exact_and_predicted_exactly(variant):
    """Every chunk count, one to several column blocks (ragged N), M from 1 to a full row
    block, fused and unfused, with and without a residual, K-major stores on square
    arrays."""
    ka, R, C = variant.k_align, variant.rows, variant.cols
    shapes = [(1, 4 * ka, C, 2, ("bias", "requant", "relu")),
              (R, 6 * ka, 3 * C - 1, 3, ("requant",)),
              (1, 8 * ka, 5 * C, 4, ("bias", "requant", "relu", "clamp")),
              (R - 1 or 1, 16 * ka, 2 * C, 8, ()),
              (1, 12 * ka, 7, 4, ("bias",)),
              (1, 4 * ka, 3 * C, 2, ("bias", "requant", "relu", "residual")),
              (R, 8 * ka, 2 * C - 1, 4, ("requant", "residual"))]
    cases = [GemmCase(m, k, n, stages=st, fused=fused, tiling=Tiling(stream=q),
                      seed=80 + i, kmajor_out=tr)
             for i, (m, k, n, q, st) in enumerate(shapes) for fused in (True, False)
             for tr in ((False, True) if R == C and fused and "requant" in st else (False,))]
    for case, r in zip(cases, run_gemms(variant, cases), strict=True):
        assert r.ok, r.summary()
        kernel = case.kernel(variant)
        assert kernel.tiling.stream == case.tiling.stream
        predicted = kernel.kind.features(variant, kernel.signature).analytical_cycles()
        if case.fused or not case.stages:
            assert predicted == r.cycles, f"{r.summary()}: predicted {predicted}"
        else:  # chained passes: an li the program drops by coincidence of values
            # (fusion.cost.analytical's docstring: up to three cycles a pass over)
            over = predicted - r.cycles
            assert 0 <= over <= 3 * len(case.stages), f"{r.summary()}: predicted {predicted}"


def test_a_streamed_gemv_beats_every_super_tiling_on_the_hardware(v4x4):
    """A GEMV with per-channel requantize, as a quantized fully connected layer at batch 1
    has it: the streamed kernels take fewer measured cycles than the tiler's best, and the
    port is busy for most of them."""
    params = EpilogueParams(zp=3, per_channel=True)
    m, k, n = 1, 256, 64
    ops = per_channel_problem(m, k, n, seed=4)
    stages = ("bias", "requant", "relu")
    kernels = [compiled_gemm(v4x4, m, k, n, stages=stages, params=params, tiling=t)
               for t in (None, Tiling(stream=2), Tiling(stream=4), Tiling(stream=8))]
    assert not kernels[0].tiling.stream
    results = run_programs(v4x4, [
        Job(kn.program, MemoryImage(writes=tuple(kn.memory(**ops)), reads=kn.reads),
            name=f"gemv stream={kn.tiling.stream}") for kn in kernels])
    want = gemm_epilogue(ops["a"], ops["b"], stages, params, bias=ops["bias"],
                         mult=ops["mult"], shift=ops["shift"])
    for kernel, result in zip(kernels, results, strict=True):
        np.testing.assert_array_equal(kernel.decode(result.outputs), want)
    tiled, *streamed = [r.cycles for r in results]
    assert max(streamed[1:]) < tiled, (tiled, streamed)
    # the load engine's own bound: A and B a row a cycle (a word holds several), the bias
    # groups a word a cycle; streamed, the kernel takes barely more
    d, w = kernels[2].dims, v4x4.port_bytes
    bound = (d.Kp * d.R // min(w, d.R) + d.Nb * d.Kp * d.C // min(w, d.C)
             + 3 * d.Nb * v4x4.e_row_bytes // w)
    assert results[2].counters["bytes_read"] == (d.Kp * d.R + d.Nb * d.Kp * d.C
                                                 + 3 * d.Nb * v4x4.e_row_bytes)
    assert results[2].cycles < 1.05 * bound, (results[2].cycles, bound)
