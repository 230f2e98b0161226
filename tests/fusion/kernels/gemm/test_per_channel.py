"""Per-channel requantize and the residual max mode in the kernel builders, checked without
hardware: the bias-group packing, the CSR writes, the pass and GEMM contexts, and every
program traced by ``kernel_trace`` (which checks that each output row's requantize reads the
multiplier and shift rows of its own column block's group). The Verilator runs are in
``tests/sim/test_per_channel_gemm.py``."""

import dataclasses

import numpy as np
import pytest

from fusion.kernels import layout
from fusion.kernels.epilogue import csr_writes, pass_context, pass_dtypes
from fusion.kernels.gemm.kind import GEMM, compiled_gemm, gemm_key_parts, gemm_params
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.tiling import Tiling
from hwgen.asm import assemble
from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.presets import SIM_VARIANTS
from hwgen.reference import EpilogueParams, gemm_epilogue
from tests.helpers.kernel_trace import check_gemm, trace

ALL = EPILOGUE_STAGES
PC = EpilogueParams(zp=-3, clamp_lo=-50, clamp_hi=90, per_channel=True)
V4, V2 = SIM_VARIANTS["4x4"], SIM_VARIANTS["2x2"]
#: Few epilogue rows: the passes must cut a block row into chunks (bias step n * 3).
TIGHT = VariantConfig(rows=2, cols=2, port_bytes=4, epilogue=ALL, spad_e_depth=32)


def problem(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.integers(-128, 128, (m, k), dtype=np.int8),
            "b": rng.integers(-128, 128, (k, n), dtype=np.int8),
            "bias": rng.integers(-5000, 5000, n).astype(np.int32),
            "residual": rng.integers(-128, 128, (m, n), dtype=np.int8),
            "mult": rng.integers(1 << 29, 1 << 31, n).astype(np.int32),
            "shift": rng.integers(28, 40, n).astype(np.int32)}


def dims_of(cfg, m, n):
    return GemmDims(cfg, m, 8, n)


# -- packing -------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg, n", [(V4, 4), (V4, 11), (V2, 5), (TIGHT, 1)])
def test_bias_group_packing(cfg, n):
    d = dims_of(cfg, 3, n)
    ops = problem(3, 8, n)
    blob = layout.pack_bias_group(d, ops["bias"], ops["mult"], ops["shift"])
    assert len(blob) == d.bias_region_rows(True) * cfg.e_row_bytes
    # the memory planner's size of the region agrees with the packing
    assert len(blob) == layout.bias_region_bytes(d, PC)
    assert len(blob) % cfg.port_bytes == 0
    rows = np.frombuffer(blob, "<i4").reshape(-1, d.C)
    assert len(rows) >= 3 * d.Nb
    for j in range(d.Nb):
        cols = slice(j * d.C, min((j + 1) * d.C, n))
        width = cols.stop - cols.start
        for r, name in enumerate(("bias", "mult", "shift")):
            np.testing.assert_array_equal(rows[3 * j + r, :width], ops[name][cols])
            assert not rows[3 * j + r, width:].any()  # padded columns are zeros
    assert not rows[3 * d.Nb:].any()  # padded rows too
    # without the bias stage, the bias row of every group is zeros
    no_bias = np.frombuffer(layout.pack_bias_group(d, None, ops["mult"], ops["shift"]),
                            "<i4").reshape(-1, d.C)
    assert not no_bias[0:3 * d.Nb:3].any()
    np.testing.assert_array_equal(no_bias[1::3], rows[1::3])


def test_bias_region_rows():
    d = GemmDims(VariantConfig(rows=8, cols=1, port_bytes=8), 1, 1, 3)  # 4-byte rows
    assert d.bias_rows == d.bias_region_rows(False) == 4  # 3, padded to whole 8-byte words
    assert d.bias_region_rows(True) == 10  # 9, padded
    assert dims_of(V4, 4, 9).bias_region_rows(True) == 9


@pytest.mark.parametrize("kwargs, match", [
    ({"mult": np.zeros(3)}, r"mult must have shape \(5,\)"),
    ({"mult": np.full(5, 1 << 31)}, "mult has values outside int32"),
    ({"shift": np.full(5, 64)}, r"shift has values outside 0\.\.63"),
    ({"shift": np.full(5, -1)}, r"shift has values outside 0\.\.63"),
    ({"bias": np.zeros(4, np.int32)}, r"bias must have shape \(5,\)"),
])
def test_bias_group_packing_errors(kwargs, match):
    args = {"bias": None, "mult": np.ones(5, np.int32), "shift": np.ones(5, np.int32),
            **kwargs}
    with pytest.raises(ValueError, match=match):
        layout.pack_bias_group(dims_of(V4, 1, 5), **args)


# -- CSR writes ------------------------------------------------------------------------------


def test_csr_writes_set_the_modes_whenever_their_stage_runs():
    per_tensor = EpilogueParams(mult=5, shift=3, zp=1)
    assert dict(csr_writes(("requant",), per_tensor)) == {
        "req_mult": 5, "req_shift": 3, "req_zp": 1, "req_mode": 0}
    # per channel the multipliers and shifts are rows, not CSRs
    assert dict(csr_writes(("requant",), PC)) == {"req_zp": -3, "req_mode": 1}
    assert dict(csr_writes(("residual",), per_tensor)) == {"res_mode": 0}
    assert dict(csr_writes(("residual",), EpilogueParams(residual_op="max"))) == {"res_mode": 1}
    assert csr_writes(("bias", "relu"), PC) == []


# -- the epilogue passes ------------------------------------------------------------------


def region(name):
    return Region(name, 0, 1)


def test_requant_pass_loads_the_groups_and_steps_by_three():
    d = dims_of(V4, 8, 13)  # Nb = 4
    ctx = pass_context(d, stages=("requant",), params=PC, src=region("src"), src_dt="i32",
                       out=region("out"), out_dt="i8", bias=region("bias"))
    assert ctx["bias_load"]["len"] * d.W == 12 * V4.e_row_bytes
    assert ("r13", 12) in ctx["setup"]  # the chunks start after the groups
    bias_reg = next(r for r in ctx["grid"]["regs"] if r["reg"] == "r9")
    assert bias_reg["inner"] == 3
    assert dict(ctx["csrs"])["req_mode"] == 1
    with pytest.raises(ValueError, match="bias region is needed exactly when the pass reads "
                                         "it.*per_channel=True, bias region missing"):
        pass_context(d, stages=("requant",), params=PC, src=region("src"), src_dt="i32",
                     out=region("out"), out_dt="i8")
    # per tensor, the requant pass reads no bias region
    with pytest.raises(ValueError, match="per_channel=False, bias region given"):
        pass_context(d, stages=("requant",), params=EpilogueParams(), src=region("src"),
                     src_dt="i32", out=region("out"), out_dt="i8", bias=region("bias"))


def test_pass_chunks_within_a_block_row_step_whole_groups():
    d = GemmDims(TIGHT, 6, 8, 15)  # Nb = 8: 24 group rows, 8 rows left for the chunks
    ctx = pass_context(d, stages=("bias",), params=PC, src=region("src"), src_dt="i32",
                       out=region("out"), out_dt="i32", bias=region("bias"))
    n = ctx["chunk_tiles"]
    assert n < d.Nb and ctx["n_outer"] == d.Mb
    assert ctx["bias_step"] == 3 * n and ctx["bias_adjust"] == -3 * d.Nb


def test_pass_capacity_error_names_the_group_rows():
    d = GemmDims(TIGHT, 2, 8, 21)  # Nb = 11: 33 group rows
    with pytest.raises(ValueError, match=r"needs 35 epilogue scratchpad rows for one tile "
                                         r"\(33 bias group rows \+ 2\) but the variant has 32"):
        pass_context(d, stages=("requant",), params=PC, src=region("src"), src_dt="i32",
                     out=region("out"), out_dt="i8", bias=region("bias"))


def test_max_mode_keeps_int8_intermediates():
    params = EpilogueParams(residual_op="max")
    assert pass_dtypes(("requant", "residual", "relu"), params, "i8") == ["i8", "i8", "i8"]


# -- whole kernels --------------------------------------------------------------------------

CASES = [(V4, 8, 16, 8), (V4, 5, 12, 11), (V4, 9, 40, 23), (V2, 5, 12, 11), (V2, 9, 24, 23),
         (TIGHT, 5, 8, 15)]
STAGES = [("bias", "requant", "relu"), ("requant",), ("requant", "clamp", "residual"), ALL]


def build(cfg, m, k, n, stages, fused, params=PC, tiling=None, seed=0):
    return compiled_gemm(cfg, m, k, n, stages=stages, fused=fused, params=params,
                         tiling=tiling), problem(m, k, n, seed)


@pytest.mark.parametrize("cfg, m, k, n", CASES)
@pytest.mark.parametrize("stages", STAGES, ids=lambda s: ",".join(s))
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_per_channel_kernels_read_their_own_groups(cfg, m, k, n, stages, fused):
    kernel, ops = build(cfg, m, k, n, stages, fused)
    t = check_gemm(kernel)
    assert t.bytes_loaded == kernel.bytes_loaded
    assert t.csrs["req_mode"] == 1
    np.testing.assert_array_equal(kernel.expected(**ops), gemm_epilogue(
        ops["a"], ops["b"], stages, PC, bias=ops["bias"] if "bias" in stages else None,
        residual=ops["residual"] if "residual" in stages else None, mult=ops["mult"],
        shift=ops["shift"]))
    group = dict(kernel.memory(**ops))[kernel.regions["bias"].addr]
    assert group == layout.pack_bias_group(kernel.dims, ops["bias"] if "bias" in stages
                                           else None, ops["mult"], ops["shift"])


@pytest.mark.parametrize("tiling", [Tiling(tm=1, tn=1, kt=8), Tiling(tm=2, tn=3, order="nm"),
                                    Tiling(tm=3, tn=2, double_buffer=False)])
def test_per_channel_with_every_loop_shape(tiling):
    kernel, _ = build(V4, 9, 16, 23, ("bias", "requant", "relu", "residual"), True,
                      tiling=tiling)
    check_gemm(kernel)


@pytest.mark.parametrize("stages", [("requant",), ("requant", "residual")])
def test_per_tensor_kernel_resets_modes_an_earlier_kernel_left(stages):
    kernel, _ = build(V4, 5, 12, 11, stages, True, params=EpilogueParams(mult=3, shift=2))
    left = assemble("csrwi csr=req_mode, imm=1\ncsrwi csr=res_mode, imm=1\n" + kernel.source)
    t = check_gemm(kernel.with_program(left))  # no row reads group rows
    assert t.csrs["req_mode"] == 0
    if "residual" in stages:
        assert t.csrs["res_mode"] == 0


def test_per_channel_refusals():
    ops = problem(4, 8, 4)
    with pytest.raises(ValueError, match="per-channel requantize .* needs the requant stage, "
                                         r"but the stages are \(bias, relu\)"):
        compiled_gemm(V4, 4, 8, 4, stages=("bias", "relu"), params=PC)
    kernel = compiled_gemm(V4, 4, 8, 4, stages=("requant",), params=PC)
    for missing in ("mult", "shift"):
        with pytest.raises(ValueError, match=f"needs a {missing} operand: int32 of shape "
                                             r"\(4,\)"):
            kernel.memory(**{**ops, missing: None})
    # per tensor, the vectors are ignored, like any operand no stage uses
    compiled_gemm(V4, 4, 8, 4, stages=("requant",), params=EpilogueParams()).memory(**ops)


def test_tiling_counts_the_group_rows():
    cfg = VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=ALL, spad_e_depth=16)
    kernel = compiled_gemm(cfg, 3, 3, 6, stages=("bias", "requant"))  # 6 bias rows fit
    assert kernel.meta["chosen"]["bias_windows"] == 1
    # 18 group rows: windows of 5 column blocks (15 rows) and 1
    kernel = compiled_gemm(cfg, 3, 3, 6, stages=("requant",), params=PC)
    assert kernel.meta["chosen"]["bias_windows"] == 2
    # beside 2 residual rows, 3 blocks (9 rows) a window
    kernel = compiled_gemm(dataclasses.replace(cfg, spad_e_depth=13), 3, 3, 4,
                           stages=("requant", "residual"), params=PC, tiling=Tiling(tm=1, tn=1))
    assert kernel.meta["chosen"]["bias_windows"] == 2
    with pytest.raises(ValueError, match=r"needs 5 rows \(3 bias group rows for the 1 column "
                                         r"block\(s\) of a super tile and 2 for residual "
                                         r"tiles\) but has 4"):
        compiled_gemm(dataclasses.replace(cfg, spad_e_depth=4), 3, 3, 4,
                      stages=("requant", "residual"), params=PC, tiling=Tiling(tm=1, tn=1))


# -- the kernel store ----------------------------------------------------------------------


@pytest.mark.parametrize("stages, fused", [(("bias", "requant", "relu"), True),
                                           (("requant",), False)])
def test_cached_per_channel_gemm_equals_the_uncached_one(tmp_path, stages, fused):
    m, k, n = 9, 16, 23
    from fusion.kernels.cache import KernelCache

    cache = KernelCache(tmp_path)
    compiled = compiled_gemm(V4, m, k, n, stages=stages, fused=fused, params=PC, cache=cache)
    kernel, ops = build(V4, m, k, n, stages, fused)
    assert compiled.program == kernel.program
    assert set(compiled.meta["operands"]) == {"a", "b", "mult", "shift"} | (
        {"bias"} & set(stages))
    used = {name: ops[name] for name in compiled.meta["operands"]}
    assert compiled.memory(**used) == kernel.memory(**ops)
    np.testing.assert_array_equal(compiled.expected(**used), kernel.expected(**ops))
    assert compiled.params.per_channel
    with pytest.raises(ValueError, match="needs a mult operand: int32 of shape"):
        compiled.memory(**{**used, "mult": None})
    # per_channel is part of the key; a hit gives the same program
    assert gemm_key_parts(V4, m, k, n, stages=stages, fused=fused, params=PC) != \
        gemm_key_parts(V4, m, k, n, stages=stages, fused=fused,
                       params=dataclasses.replace(PC, per_channel=False))
    again = compiled_gemm(V4, m, k, n, stages=stages, fused=fused, params=PC, cache=cache)
    assert again.program == compiled.program
    ops_of = GEMM.operands(V4, gemm_params(m, k, n, stages=stages, fused=fused, params=PC))
    assert ops_of["mult"] == ops_of["shift"] == ("int32", (n,))


def test_trace_of_a_residual_max_kernel():
    kernel, _ = build(V4, 5, 12, 11, ("requant", "residual"), False,
                      params=EpilogueParams(mult=3, shift=2, residual_op="max"))
    t = trace(kernel.config, kernel.program, kernel.regions)
    assert t.csrs["res_mode"] == 1
