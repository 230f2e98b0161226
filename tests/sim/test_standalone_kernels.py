"""Placed GEMMs, standalone epilogue passes and element-wise max kernels on Verilator,
checked bit for bit against the numpy reference. Every test batches its kernels into one
simulator launch."""

import numpy as np
import pytest

from fusion.kernels.eltmax.kind import compiled_max
from fusion.kernels.epipass.kind import compiled_pass
from fusion.kernels.gemm.kind import compiled_gemm, gemm_regions
from hwgen.reference import EpilogueParams, output_dtype
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow


def job(kernel, writes, name):
    return Job(program=kernel.program, memory=MemoryImage(writes=tuple(writes),
                                                          reads=kernel.reads), name=name)


def check_counters(kernel, result):
    assert result.counters["bytes_read"] == kernel.bytes_loaded
    assert result.counters["bytes_written"] == kernel.bytes_stored
    assert result.cycles >= kernel.ideal_cycles


def test_a_gemm_at_two_placements_gives_the_same_bit_exact_result(v4x4):
    cfg, (m, k, n) = v4x4, (13, 40, 19)
    rng = np.random.default_rng(21)
    ops = {"a": rng.integers(-128, 128, (m, k)), "b": rng.integers(-128, 128, (k, n)),
           "bias": rng.integers(-20000, 20000, n), "residual": rng.integers(-128, 128, (m, n))}
    params = EpilogueParams.from_scale(1 / 300, zp=3, clamp_lo=-100, clamp_hi=110)
    kernels = []
    for stages, fused in [(("bias", "requant", "residual"), True), (cfg.epilogue, False)]:
        sizes = gemm_regions(cfg, m, k, n, stages=stages, fused=fused, params=params)
        # reordered (out lowest, a highest), with gaps, and the top region ending at the last
        # word of memory: the program's address immediates are all different
        top, placement = cfg.mem_words, {}
        for name in sizes:
            top -= -(-sizes[name] // cfg.port_bytes) + 7
            placement[name] = top
        placement["out"] = 3
        for where in (None, placement):
            kernels.append(compiled_gemm(cfg, m, k, n, stages=stages, fused=fused,
                                         params=params, placement=where))
        assert kernels[-1].regions["out"].addr < kernels[-1].regions["a"].addr
        assert kernels[-1].program != kernels[-2].program
    results = run_programs(cfg, [job(kern, kern.memory(**ops), f"gemm {n}") for n, kern in
                                 enumerate(kernels)])
    got = [kern.decode(r.outputs) for kern, r in zip(kernels, results, strict=True)]
    for kern, g, r in zip(kernels, got, results, strict=True):
        np.testing.assert_array_equal(g, kern.expected(**ops))
        check_counters(kern, r)
    for default, placed in zip(got[::2], got[1::2], strict=True):
        np.testing.assert_array_equal(default, placed)


def _pass_values(m, n, src_dtype, seed):
    rng = np.random.default_rng(seed)
    lim = 1 << 19 if src_dtype == "int32" else 128
    return {"src": rng.integers(-lim, lim, (m, n)), "bias": rng.integers(-4000, 4000, n),
            "residual": rng.integers(-128, 128, (m, n)),
            "mult": rng.integers(-(1 << 30), 1 << 30, n), "shift": rng.integers(8, 40, n)}


def test_every_single_stage_pass_is_bit_exact_from_int32_and_int8(variant):
    cfg, (m, n) = variant, (13, 19)
    cases = []
    for src_dtype in ("int32", "int8"):
        # a requantize scale that spreads the int8 outputs over the source's range
        scale = 127 / (3 << 19) if src_dtype == "int32" else 0.7
        params = EpilogueParams.from_scale(scale, zp=-4, clamp_lo=-70, clamp_hi=1000)
        for stage in cfg.epilogue:
            cases.append(((stage,), params, src_dtype, output_dtype((stage,)).name))
        # int8 stores of int32 lanes (the low byte), the residual in max mode, and
        # per-channel requantize
        cases.append((("relu",), params, src_dtype, "int8"))
        cases.append((("residual",), EpilogueParams(residual_op="max"), src_dtype, "int8"))
        cases.append((("requant",), EpilogueParams(per_channel=True, zp=5), src_dtype, "int8"))
        cases.append((("bias", "requant"), EpilogueParams(per_channel=True), src_dtype, "int8"))
        # rounding halves to even: x / 8 puts one int8 source in eight on a half
        cases.append((("requant",), EpilogueParams.from_scale(0.125, zp=3, round_even=True),
                      src_dtype, "int8"))
        cases.append((("requant",), EpilogueParams(per_channel=True, round_even=True),
                      src_dtype, "int8"))
    # the scaled add (its x is int8: hwgen.stages.check_inputs): exact halves (x/2 + r/4),
    # bounds and zero points; and 31-bit multipliers of no particular ratio
    cases.append((("residual",), EpilogueParams(
        residual_op="scaled", res_x_mult=1 << 30, res_r_mult=1 << 29, res_shift=31,
        res_x_zp=-3, res_r_zp=5, res_zp=7, res_lo=-100, res_hi=90), "int8", "int8"))
    cases.append((("residual",), EpilogueParams(
        residual_op="scaled", res_x_mult=1_999_999_999, res_r_mult=-1_234_567_891,
        res_shift=30, res_x_zp=255, res_r_zp=-256, res_zp=-256), "int8", "int8"))
    kernels, jobs, values = [], [], []
    for i, (stages, params, src_dtype, out_dtype) in enumerate(cases):
        kern = compiled_pass(cfg, m, n, stages=stages, params=params, src_dtype=src_dtype,
                             out_dtype=out_dtype)
        v = _pass_values(m, n, src_dtype, seed=i)
        kernels.append(kern)
        values.append(v)
        jobs.append(job(kern, kern.memory(**v), f"pass {','.join(stages)} {src_dtype}"))
    results = run_programs(cfg, jobs)
    for case, kern, v, r in zip(cases, kernels, values, results, strict=True):
        want = kern.expected(**v)
        assert kern.decode(r.outputs).dtype == want.dtype
        np.testing.assert_array_equal(kern.decode(r.outputs), want, err_msg=str(case))
        check_counters(kern, r)
        assert not np.array_equal(want, v["src"]), case  # the data exercises the stage


def test_element_wise_max_of_2_4_and_9_inputs_is_bit_exact(variant):
    cfg = variant
    rng = np.random.default_rng(5)
    cases = [(2, 13, 19), (4, 5, 3), (9, 17, 22), (9, 1, 1)]
    kernels, inputs, jobs = [], [], []
    for n_inputs, m, n in cases:
        xs = [rng.integers(-128, 128, (m, n)) for _ in range(n_inputs)]
        xs[0][0, 0], xs[-1][-1, -1] = 127, -128  # the extremes pass through
        kern = compiled_max(cfg, m, n, n_inputs)
        kernels.append(kern)
        inputs.append(xs)
        jobs.append(job(kern, kern.memory(xs), f"max {n_inputs} {m}x{n}"))
    # and one placed elsewhere: inputs high, the output and intermediates below them
    kern = compiled_max(cfg, 17, 22, 9)
    words = kern.regions["out"].nbytes // cfg.port_bytes
    placed = compiled_max(cfg, 17, 22, 9, placement={
        name: 100 + (len(kern.regions) - i) * (words + 5)
        for i, name in enumerate(kern.regions)})
    kernels.append(placed)
    inputs.append(inputs[2])
    jobs.append(job(placed, placed.memory(inputs[2]), "max 9 placed"))
    results = run_programs(cfg, jobs)
    for kern, xs, r in zip(kernels, inputs, results, strict=True):
        got = kern.decode(r.outputs)
        np.testing.assert_array_equal(got, np.maximum.reduce(xs).astype(np.int8))
        check_counters(kern, r)


def test_a_pass_too_wide_for_its_bias_groups_streams_them_per_column_block(v4x4):
    """Per-channel requantize of 400 channels on a 4x4 variant: 300 rows of bias groups, more
    than the 256-row epilogue scratchpad, so the pass walks column block by column block
    (fusion.kernels.epipass.columns); bit exact, and the analytical model prices its program
    to the cycle."""
    from fusion.kernels.epipass.features import PassFeatures

    cfg, (m, n) = v4x4, (13, 400)
    cases = [(("requant",), EpilogueParams(per_channel=True, zp=5), "int32"),
             (("bias", "requant"), EpilogueParams(per_channel=True, round_even=True), "int8"),
             (("requant", "residual"), EpilogueParams(per_channel=True, residual_op="max"),
              "int32")]
    kernels, jobs, values = [], [], []
    for i, (stages, params, src_dtype) in enumerate(cases):
        kern = compiled_pass(cfg, m, n, stages=stages, params=params, src_dtype=src_dtype,
                             out_dtype="int8")
        assert "column block" in kern.source  # the column form
        v = _pass_values(m, n, src_dtype, seed=50 + i)
        kernels.append(kern)
        values.append(v)
        jobs.append(job(kern, kern.memory(**v), f"wide pass {','.join(stages)}"))
    results = run_programs(cfg, jobs)
    for (stages, params, src_dtype), kern, v, r in zip(cases, kernels, values, results,
                                                       strict=True):
        np.testing.assert_array_equal(kern.decode(r.outputs), kern.expected(**v))
        check_counters(kern, r)
        predicted = PassFeatures(config=cfg, M=m, N=n, stages=stages, epilogue=params,
                                 src_dtype=src_dtype, out_dtype="int8").analytical_cycles()
        assert predicted == r.cycles
