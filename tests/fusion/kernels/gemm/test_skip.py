"""The zero-skipping GEMM without the simulator: its tile flags, its bias, what it refuses,
how the engine offers it, how the machine and the counter interpreter follow its branches,
and how a compile learns which tiles of an input are zero."""

import dataclasses

import numpy as np
import pytest

from fusion.compiler.data_hints import ZeroHints
from fusion.cost.analytical import estimate_program
from fusion.kernels.gemm.kind import GEMM
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.skip import (
    flags_consumed,
    skip_problems,
    skipped_tiles,
    tile_flags,
    tiles,
    unfolded_bias,
)
from fusion.kernels.layout import GemmDims
from fusion.kernels.program import compile_kernel
from fusion.runtime.invariants import MemoryWords, UnfinishedProgram, count_program
from hwgen.config import VariantConfig
from hwgen.isa import decode
from hwgen.reference import EpilogueParams

V4 = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant", "relu", "clamp", "residual"))
STAGES = ("bias", "requant", "relu")
EPILOGUE = EpilogueParams(mult=1 << 14, shift=20, zp=0)


def test_a_tile_is_flagged_only_when_all_its_elements_are_the_zero_point():
    dims = GemmDims(V4, 6, 10, 4)  # 2 row blocks (the second padded), 3 K blocks (padded)
    a = np.full((6, 10), 3, np.int8)
    a[0, 5] = 4  # row block 0, K block 1 holds one other value
    a[4:, :4] = 9  # row block 1, K block 0
    flags = tile_flags(dims, a, 3)
    assert flags.tolist() == [[True, False, True], [False, True, True]]  # padding counts as zp
    assert tiles(dims) == (2, 3)


def test_the_bias_loses_the_zero_point_share_and_refuses_to_leave_int32():
    b = np.array([[1, -2], [3, 4]], np.int8)
    assert unfolded_bias(np.array([10, 20], np.int32), b, -5).tolist() == [10 - 20, 20 - 10]
    with pytest.raises(ValueError, match="leaves int32"):
        unfolded_bias(np.array([2**31 - 1, 0], np.int32), b, 1)


def test_what_the_program_refuses_is_named():
    dims = GemmDims(V4, 8, 32, 8)
    assert skip_problems(dims, STAGES, fused=True, per_channel=False, a_zp=0,
                         out_flags=True) == []
    reasons = skip_problems(dims, ("requant", "residual"), fused=True, per_channel=False,
                            a_zp=300, out_flags=False)
    assert any("needs the bias stage" in r for r in reasons)
    assert any("residual" in r for r in reasons)
    assert any("outside the a_zp register" in r for r in reasons)
    assert any("instruction memory" in r for r in skip_problems(
        GemmDims(V4, 8, 4096, 8), STAGES, fused=True, per_channel=False, a_zp=0,
        out_flags=False))
    with pytest.raises(ValueError, match="needs A's zero point"):
        GemmParams(M=8, K=32, N=8, stages=STAGES, skip=True)


def test_the_engine_offers_it_only_for_flags_and_plans_read_it_back():
    flags = ((True, False),) * 2
    base = GemmParams(M=8, K=8, N=8, stages=STAGES, epilogue=EPILOGUE, skip_zp=-3)
    assert not any(p.skip for p in GEMM.variants(V4, base))
    assert not any(p.skip for p in GEMM.variants(V4, dataclasses.replace(
        base, flags=((False, False),) * 2)))
    offered = [p for p in GEMM.variants(V4, dataclasses.replace(base, flags=flags)) if p.skip]
    assert len(offered) == 1
    (read_back,) = GEMM.data_variants(V4, base)
    assert read_back.skip and GEMM.key_params(read_back)["skip_zp"] == -3
    assert "skip_zp" not in GEMM.key_params(base)  # dense cache keys are unchanged


def test_the_machine_follows_the_flags_and_refuses_a_branch_without_one():
    p = GemmParams(M=16, K=64, N=16, stages=STAGES, epilogue=EPILOGUE, skip_zp=0, skip=True)
    kernel = compile_kernel(GEMM, V4, p)
    dims = kernel.dims
    none = np.zeros(tiles(dims), bool)
    half = none.copy()
    half[1:] = True
    instrs = [decode(w) for w in kernel.program]
    cycles = [estimate_program(V4, instrs, flags=flags_consumed(dims, f)) for f in (none, half)]
    assert cycles[1] < cycles[0]
    with pytest.raises(ValueError, match="more tile flags than were given"):
        estimate_program(V4, instrs, flags=[])
    assert skipped_tiles(dims, half) == 3 * (tiles(dims)[1] - 1) * (1 + dims.Nb)


def test_the_counter_interpreter_reads_the_flags_from_memory():
    p = GemmParams(M=8, K=32, N=8, stages=STAGES, epilogue=EPILOGUE, skip_zp=0, skip=True)
    kernel = compile_kernel(GEMM, V4, p)
    a = np.ones((8, 32), np.int8)
    a[:4, :8] = 0  # the first two tiles of row block 0
    writes = kernel.write({"a": a, "b": np.ones((32, 8), np.int8),
                           "bias": np.zeros(8, np.int32)})
    words = kernel.program
    skipping = count_program(V4, words, max_instructions=10**6,
                             memory=MemoryWords(writes, V4.port_bytes))
    dense_writes = kernel.write({"a": np.ones((8, 32), np.int8), "b": np.ones((32, 8), np.int8),
                                 "bias": np.zeros(8, np.int32)})
    dense = count_program(V4, words, max_instructions=10**6,
                          memory=MemoryWords(dense_writes, V4.port_bytes))
    # two tiles fewer: their loads once, their MATMULs once per column block (2)
    assert dense.k_slices - skipping.k_slices == 2 * 4 * 2
    assert dense.bytes_read - skipping.bytes_read == 2 * 4 * 4
    with pytest.raises(UnfinishedProgram, match="with the memory it reads"):
        count_program(V4, words, max_instructions=10**6)


def test_a_compile_knows_the_tiles_of_an_input_the_host_quantizes():
    from fusion.compiler.options import CompileOptions
    from fusion.compiler.plan import after_passes
    from fusion.frontend.load import load_model

    # x (2, 4, 32) is reshaped to 8 x 32 and quantized by the host: mm1's A
    graph = after_passes(load_model("examples/qdq_mlp_residual.onnx"), V4, CompileOptions())
    x = np.ones((2, 4, 32), np.float32)
    x[1] = 0  # rows 4..7
    x[0, :, 8:12] = 0  # the third K block of row block 0
    hints = ZeroHints.of({"x": x})
    assert hints.a_flags(graph, V4, "xa_q", 8, 32) == (
        (False, False, True, False, False, False, False, False), (True,) * 8)
    assert hints.a_flags(graph, V4, "mm1/qmatmul", 8, 32) is None  # not the host's
