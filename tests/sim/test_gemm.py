"""GEMM kernels on Verilator, checked bit for bit against the numpy reference.

Cases are batched per test into one simulator launch (``run_gemms``); every variant is built
once per session.
"""

import dataclasses

import numpy as np
import pytest

from fusion.kernels.tiling import Tiling, supertiles
from hwgen.reference import INT32_MAX, INT32_MIN, EpilogueParams
from sim.gemm_check import GemmCase, Problem, report, run_gemms
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow

SHAPES = [(1, 1, 1), (7, 13, 5), (33, 64, 17), (16, 16, 16)]


def assert_ok(reports):
    for r in reports:
        assert r.ok, r.summary()


def test_gemm_is_bit_exact_on_every_array_shape(variant):
    cases = [GemmCase(m, k, n, seed=i) for i, (m, k, n) in enumerate(SHAPES)]
    cases.append(GemmCase(33, 64, 17, stages=variant.epilogue, seed=9))
    assert_ok(run_gemms(variant, cases))


STAGE_SETS = [(), ("bias",), ("requant",), ("relu",), ("clamp",), ("residual",),
              ("bias", "requant"), ("requant", "relu"), ("bias", "requant", "relu"),
              ("requant", "clamp", "residual"), ("bias", "requant", "relu", "clamp", "residual")]


def test_every_stage_alone_and_chained_fused_and_unfused_agree(v4x4):
    cases = []
    for i, stages in enumerate(STAGE_SETS):
        for fused in (True, False):
            cases.append(GemmCase(9, 20, 11, stages=stages, fused=fused, seed=100 + i))
    reports = run_gemms(v4x4, cases)
    assert_ok(reports)
    for fused, unfused in zip(reports[::2], reports[1::2], strict=True):
        np.testing.assert_array_equal(fused.got, unfused.got)
        # separate passes move the intermediates through memory: they must cost cycles
        if fused.stages:
            assert unfused.cycles > fused.cycles


def test_saturation_at_the_int8_and_int32_extremes(v4x4):
    m, k, n = 8, 64, 8
    a = np.full((m, k), -128, np.int8)
    a[1::2] = 127
    b = np.full((k, n), -128, np.int8)
    bias = np.array([INT32_MAX, INT32_MIN] * (n // 2), np.int32)
    residual = np.full((m, n), 127, np.int8)
    residual[::2] = -128
    params = EpilogueParams(mult=INT32_MAX, shift=20, zp=-128, clamp_lo=INT32_MIN,
                            clamp_hi=INT32_MAX)
    problem = Problem(a=a, b=b, bias=bias, residual=residual, params=params)
    stage_sets = [("bias",), ("bias", "requant"), ("requant", "residual"), v4x4.epilogue]
    cases = [GemmCase(m, k, n, stages=s, fused=f, problem=problem)
             for s in stage_sets for f in (True, False)]
    reports = run_gemms(v4x4, cases)
    assert_ok(reports)
    # the extremes were reached, so the saturating paths were exercised
    assert {INT32_MAX, INT32_MIN} <= set(reports[0].got.ravel().tolist())
    assert {127, -128} <= set(reports[2].got.ravel().tolist())


def test_counters_agree_with_the_program(variant):
    cases = [GemmCase(33, 64, 17, seed=3), GemmCase(33, 64, 17, stages=("bias", "requant"),
                                                     seed=4)]
    for r in run_gemms(variant, cases):
        assert r.ok, r.summary()
        c = r.counters
        assert c["bytes_read"] == r.bytes_loaded
        out_bytes = 4 if r.stages == () else 1
        mb, nb = -(-r.M // variant.rows), -(-r.N // variant.cols)
        assert c["bytes_written"] == mb * nb * variant.rows * variant.cols * out_bytes
        assert c["cycles"] >= r.ideal_cycles
        kp = -(-r.K // variant.k_align) * variant.k_align
        assert c["array_busy"] == mb * nb * kp  # one k-slice a cycle per output tile
        assert c["instret"] >= 2 and c["cycles"] > c["array_busy"]


@pytest.mark.parametrize("tiling", [
    Tiling(tm=1, tn=1, double_buffer=False),
    Tiling(tm=2, tn=1, order="nm"),
    Tiling(tm=1, tn=1, kt=8),  # K split over several MATMULs
])
def test_tilings_loop_orders_and_k_chunks_are_bit_exact(v4x4, tiling):
    cases = [GemmCase(33, 64, 17, stages=("bias", "requant", "relu"), tiling=tiling, seed=5),
             GemmCase(12, 40, 20, tiling=tiling, seed=6)]
    assert_ok(run_gemms(v4x4, cases))


def test_gemms_of_hundreds_of_super_tiles_run_in_loops(variant):
    """Unrolled at ten or more instructions a super tile, none of these programs would fit the
    2048 words of instruction memory; in hardware loops each takes a few hundred at most."""
    cases = [
        GemmCase(132, 24, 100, stages=variant.epilogue, tiling=Tiling(tm=1, tn=1), seed=11),
        # ragged on both sides: the last row and column of super tiles are peeled
        GemmCase(244, 16, 188, stages=("bias", "requant", "relu"),
                 tiling=Tiling(tm=2, tn=3, order="nm"), seed=12),
        GemmCase(40, 100, 44, stages=("requant", "clamp", "residual"),
                 tiling=Tiling(tm=1, tn=1, kt=8), seed=13),  # 13 k chunks, the last ragged
        GemmCase(60, 100, 36, tiling=Tiling(tm=1, tn=1, kt=8, double_buffer=False), seed=14),
    ]
    for case in cases:
        kernel = case.kernel(variant)
        assert supertiles(kernel.dims, kernel.tiling) >= 200
        assert len(kernel.program) < 320
    assert_ok(run_gemms(variant, cases))


def test_a_wrong_expected_output_is_detected(v4x4):
    case = GemmCase(8, 16, 8, stages=("bias", "requant"), seed=7)
    kernel = case.kernel(v4x4)
    job = Job(program=kernel.program, memory=MemoryImage(writes=tuple(case.memory(kernel)),
                                                         reads=kernel.reads))
    (result,) = run_programs(v4x4, [job])
    assert report(v4x4, case, kernel, result).ok
    wrong = case.expected(kernel).copy()
    wrong[3, 5] ^= 1
    bad = report(v4x4, case, kernel, result, expected=wrong)
    assert not bad.ok and bad.mismatches == 1 and bad.first_mismatch[:2] == (3, 5)


def test_output_the_program_never_writes_is_detected(v4x4):
    # Drop every MATMUL: the output region keeps the harness's poison pattern.
    from hwgen.isa import Instr, Op, decode, encode

    case = GemmCase(8, 16, 8, seed=8)
    kernel = case.kernel(v4x4)
    program = [encode(Instr(Op.NOP)) if decode(w).op == Op.MATMUL else w for w in kernel.program]
    (result,) = run_programs(v4x4, [Job(program=program, memory=MemoryImage(
        writes=tuple(case.memory(kernel)), reads=kernel.reads))])
    assert not report(v4x4, case, kernel, result).ok


def test_a_hung_program_times_out_naming_program_and_cycles(v4x4):
    from hwgen.asm import assemble
    from sim.run import SimTimeout

    program = assemble("spin:\n li rd=r1, imm=2\n bnzd rc=r1, target=spin\n halt\n")
    with pytest.raises(SimTimeout, match=r"spinner.*\d+ cycles"):
        run_programs(v4x4, [Job(program=program, memory=MemoryImage(writes=(), reads={}),
                                name="spinner", timeout_cycles=5000)])


def test_a_tile_that_cannot_fit_is_refused(v4x4):
    big = dataclasses.replace(Tiling(), tm=64, tn=64)
    with pytest.raises(ValueError, match="does not fit"):
        GemmCase(256, 256, 256, tiling=big).kernel(v4x4)
