"""Bias windows (:mod:`fusion.kernels.bias_window`): GEMMs whose bias region (per-channel
groups: three rows a column block) does not fit the epilogue scratchpad, checked without
hardware. Every program is traced by ``kernel_trace`` (each output row's bias, multiplier and
shift rows are its own column block's, and no window's load overwrites rows a job still
reads), and the cost model's walk of the parts is the instruction-by-instruction walk of the
program. The Verilator runs are in ``tests/sim/test_per_channel_gemm.py``."""

import dataclasses

import pytest

from fusion.cost.analytical import estimate, estimate_program
from fusion.kernels.bias_window import window_blocks, windows
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.gemm.kind import compiled_gemm
from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import Tiling
from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.isa import Op, Unit, decode
from hwgen.reference import EpilogueParams
from tests.fusion.kernels.gemm.test_build import assert_sound

PC = EpilogueParams(zp=-3, clamp_lo=-50, clamp_hi=90, per_channel=True)
#: 16 epilogue rows: five column blocks' groups (15 rows) a window.
NARROW = VariantConfig(rows=2, cols=2, port_bytes=4, epilogue=EPILOGUE_STAGES, spad_e_depth=16)


def test_a_window_is_whole_words_and_whole_super_tiles():
    cfg = VariantConfig(rows=8, cols=1, port_bytes=8, epilogue=EPILOGUE_STAGES,
                        spad_e_depth=40)
    dims = GemmDims(cfg, 1, 8, 100)  # a group is 3 rows of 4 bytes: 2 blocks a whole word
    assert window_blocks(dims, 40, True) == 12  # 13 blocks fit, 12 are whole words
    assert window_blocks(dims, 40, True, tn=5) == 10
    assert window_blocks(dims, 40, False) == 40
    assert window_blocks(dims, 2, True) == 0
    assert window_blocks(GemmDims(cfg, 1, 8, 13), 40, True) == 13  # it all fits
    assert windows(30, 12) == [(0, 12), (12, 12), (24, 6)]


CASES = [
    # (M, K, N, stages, tiling)
    (3, 8, 21, ("requant",), None),
    (3, 8, 21, ("bias", "requant", "relu"), Tiling(tm=1, tn=2)),
    (5, 8, 21, ("bias", "requant", "clamp"), Tiling(tm=2, tn=1, order="nm",
                                                    double_buffer=False)),
    (3, 12, 23, ("bias", "requant"), Tiling(kt=4, double_buffer=False)),  # k chunks
    (3, 8, 21, ("bias", "requant", "relu", "residual"), Tiling(tm=1, tn=2)),
    (5, 8, 23, ("requant", "residual"), Tiling(tm=2, tn=1, order="nm")),
    (1, 16, 21, ("bias", "requant", "relu"), Tiling(stream=2)),  # a streamed GEMV
    (1, 16, 23, ("requant",), Tiling(stream=4)),
    # streamed with a residual: its tile's rows follow each window's bias rows
    (1, 16, 21, ("bias", "requant", "relu", "residual"), Tiling(stream=2)),
    (2, 16, 23, ("requant", "residual"), Tiling(stream=4)),
]


@pytest.mark.parametrize("m, k, n, stages, tiling", CASES, ids=str)
def test_windowed_gemms_are_sound_and_priced_as_they_run(m, k, n, stages, tiling):
    kernel = compiled_gemm(NARROW, m, k, n, stages=stages, params=PC, tiling=tiling)
    n_windows = kernel.meta["chosen"]["bias_windows"]
    assert n_windows > 1
    assert_sound(kernel)
    instrs = [decode(w) for w in kernel.program]
    # each window after the first waits for the jobs of the one before, once
    refills = [i for i in instrs if i.op is Op.WAIT and i.get("units") == Unit.FEED | Unit.EPI]
    assert len(refills) == n_windows - 1
    # the analytical walk of the parts is the walk of the program they make
    assert estimate(GemmFeatures.from_kernel(kernel)).cycles == estimate_program(NARROW,
                                                                                 instrs)


def test_transposed_output_in_windows():
    kernel = compiled_gemm(NARROW, 4, 8, 20, stages=("bias", "requant"), params=PC,
                           kmajor_out=True)
    assert kernel.meta["chosen"]["bias_windows"] == 2
    assert_sound(kernel)


def test_one_window_is_the_program_it_always_was():
    wide = dataclasses.replace(NARROW, spad_e_depth=256)
    kernel = compiled_gemm(wide, 3, 8, 21, stages=("bias", "requant"), params=PC)
    assert kernel.meta["chosen"]["bias_windows"] == 1
    assert not any(i.op is Op.WAIT and i.get("units") == Unit.FEED | Unit.EPI
                   for i in map(decode, kernel.program))


GROUPED = [
    # (M, K, N, kgroup, kblocks, tiling): windows of 5 blocks (15 group rows of 16)
    (3, 44, 22, 4, 1, None),  # 11 groups of one block: windows of 5, 5 and 1 (dense)
    (5, 44, 22, 4, 1, Tiling(order="nm", double_buffer=False)),
    (3, 20, 20, 4, 2, None),  # 5 groups of two blocks: windows of 4, 4 and 2 (dense)
    (3, 12, 24, 4, 4, None),  # 3 groups of four blocks: windows of one group (dense)
]


@pytest.mark.parametrize("m, k, n, kgroup, kblocks, tiling", GROUPED, ids=str)
def test_grouped_gemms_load_bias_in_windows_of_whole_groups(m, k, n, kgroup, kblocks,
                                                            tiling):
    kernel = compiled_gemm(NARROW, m, k, n, stages=("bias", "requant"), params=PC,
                           kgroup=kgroup, kblocks=kblocks, tiling=tiling)
    assert kernel.meta["chosen"]["bias_windows"] > 1
    assert_sound(kernel)
    instrs = [decode(w) for w in kernel.program]
    assert estimate(GemmFeatures.from_kernel(kernel)).cycles == estimate_program(NARROW,
                                                                                 instrs)


def test_a_group_wider_than_the_scratchpad_is_refused():
    with pytest.raises(ValueError, match=r"needs 18 rows \(18 bias group rows for the 6 "
                                         r"column block\(s\) of a group\) but has 16"):
        compiled_gemm(NARROW, 3, 8, 24, stages=("requant",), params=PC, kgroup=4, kblocks=6)
