"""Accumulator banks on Verilator: GEMMs whose super tiles of several tiles take their K in
chunks, and window convolutions whose steps take their windows in k chunks for several column
blocks, each tile summing in its own bank (MATMUL ``bank``), bit for bit against independent
references (numpy's GEMM; a direct convolution) and with the analytical model's prediction
equal to the measured cycles; and the same banked program on a variant without banks, which
mixes the tiles' sums, is caught."""

import dataclasses

import numpy as np
import pytest

from fusion.kernels.conv.kind import CONV
from fusion.kernels.conv.program import banked_plan
from fusion.kernels.tiling import Tiling
from hwgen.reference import output_dtype
from sim.gemm_check import GemmCase, grouped_problem, report, run_gemms
from sim.run import Job, MemoryImage, run_programs
from tests.sim.test_window_conv import BRR, V4P4, direct_conv, run_cases
from tests.sim.test_window_conv import case as conv_case

pytestmark = pytest.mark.slow

FUSED = ("bias", "requant", "relu")
#: The 4x4 with 4-byte words of the window-convolution tests (its A row is one memory word,
#: so it has window loads), with four accumulator banks and without the window unit.
BANKED = dataclasses.replace(V4P4, window_unit=False, acc_banks=4)

CONV_CASES = [
    conv_case("Cin 128: 4 column blocks of 1,152 rows", H=4, W=4, Cin=128, Cout=16, fill=-2,
         stages=BRR),
    conv_case("OW 5, Cin 120: blocks span output rows", H=5, W=5, Cin=120, Cout=12, fill=3,
         stages=("bias", "requant")),
    conv_case("stride 2, batch 2, K-major out", N=2, H=8, W=8, Cin=128, Cout=16, stride=(2, 2),
         fill=-7, stages=("bias", "requant"), kmajor_out=True),
    conv_case("per-channel, two column chunks", H=4, W=4, Cin=128, Cout=24, stages=BRR,
         per_channel=True, quant={"zp": 2}),
    conv_case("5x5 pad 0, OW 10", H=6, W=14, Cin=48, Cout=12, kh=5, kw=5, pads=(0, 0, 0, 0),
         stages=BRR),
    conv_case("int32 out", H=4, W=4, Cin=128, Cout=8, stages=("bias",)),
]


@pytest.fixture(scope="module")
def banked():
    from sim.build import build_variant

    build_variant(BANKED)
    return BANKED


@pytest.fixture(scope="module")
def without_banks():
    from sim.build import build_variant

    build_variant(V4P4)
    return V4P4


def cases(config):
    c = config.cols
    out = [
        # 2 x 2 tiles over 3 k chunks, both loop orders, ragged M and N
        GemmCase(13, 96, 15, stages=FUSED, tiling=Tiling(tm=2, tn=2, kt=32), seed=1),
        GemmCase(16, 100, 16, tiling=Tiling(tm=2, tn=2, kt=24, order="nm"), seed=2),
        # a row and a column of four tiles; single buffered; the residual stage
        GemmCase(4, 64, 4 * c, stages=FUSED, tiling=Tiling(tm=1, tn=4, kt=16), seed=3),
        GemmCase(4 * c, 64, 4, tiling=Tiling(tm=4, tn=1, kt=16, double_buffer=False), seed=4),
        GemmCase(8, 48, 8, stages=("requant", "clamp", "residual"),
                 tiling=Tiling(tm=2, tn=2, kt=16), seed=5),
        # fewer tiles than banks, many super tiles (hardware loops around the unrolled grids)
        GemmCase(40, 72, 40, stages=FUSED, tiling=Tiling(tm=1, tn=2, kt=24), seed=6),
        # loops over m, n and k with the residual double buffered: eight loop registers
        GemmCase(16, 96, 16, stages=("bias", "requant", "residual"),
                 tiling=Tiling(tm=2, tn=2, kt=32), seed=10),
    ]
    # grouped: a group of two column blocks in one super tile, its slice of K chunked
    problem = grouped_problem(config, 9, 72, 4 * c, 36, FUSED, seed=7, kblocks=2)
    out.append(GemmCase(9, 72, 4 * c, stages=FUSED, problem=problem, kgroup=36, kblocks=2,
                        tiling=Tiling(tn=2, kt=12)))
    return out


def test_banked_k_chunks_are_bit_exact_and_predicted_exactly(banked):
    todo = cases(banked)
    for case in todo:
        kernel = case.kernel(banked)
        assert kernel.tiling.kt < kernel.dims.Kp and kernel.tiling.tm * kernel.tiling.tn > 1
    for case, r in zip(todo, run_gemms(banked, todo), strict=True):
        assert r.ok, r.summary()
        kernel = case.kernel(banked)
        predicted = kernel.kind.features(banked, kernel.signature).analytical_cycles()
        assert predicted == r.cycles, f"{r.summary()}: predicted {predicted}"


def test_banks_load_a_deep_k_once_per_super_tile(banked, without_banks):
    """The tiler's own choice for a deep K and few rows: several tiles a chunk, so fewer bytes
    and cycles than the one-tile chunks the same 4x4 without banks must use."""
    deep = GemmCase(8, 1536, 32, stages=FUSED, seed=8)
    chosen, alone = deep.kernel(banked).tiling, deep.kernel(without_banks).tiling
    assert chosen.kt < 1536 and chosen.tm * chosen.tn > 1
    assert alone.kt < 1536 and alone.tm * alone.tn == 1
    (with_banks,), (without,) = run_gemms(banked, [deep]), run_gemms(without_banks, [deep])
    assert with_banks.ok and without.ok, (with_banks.summary(), without.summary())
    np.testing.assert_array_equal(with_banks.got, without.got)
    assert with_banks.counters["bytes_read"] < without.counters["bytes_read"]
    assert with_banks.cycles < without.cycles


def test_a_banked_program_on_a_variant_without_banks_is_wrong(banked, without_banks):
    """Without banks the tiles of a super tile share one accumulator: the sums mix, and the
    check sees it (the banks, not the test, make the results right)."""
    case = GemmCase(8, 48, 8, tiling=Tiling(tm=2, tn=2, kt=16), seed=9)
    kernel = case.kernel(banked)
    job = Job(program=kernel.program, memory=MemoryImage(writes=tuple(case.memory(kernel)),
                                                         reads=kernel.reads))
    (right,) = run_programs(banked, [job])
    (wrong,) = run_programs(without_banks, [job])
    assert report(banked, case, kernel, right).ok
    bad = report(banked, case, kernel, wrong)
    assert not bad.ok and bad.mismatches > 0
    assert not np.array_equal(bad.got, report(banked, case, kernel, right).got)


def test_banked_window_convolutions_are_bit_exact_and_predicted_exactly(banked, without_banks):
    """Each case is one the banked program is chosen for (faster by the analytical model);
    a direct convolution is the reference; and each is faster than on the same variant
    without banks."""
    for name, p in CONV_CASES:
        assert banked_plan(banked, p) is not None, name
        assert banked_plan(without_banks, p) is None, name
    # whole output rows several to a step (the step's windows serve fewer column blocks,
    # each chunk's weights more blocks), and steps of one block
    steps = {name: banked_plan(banked, p)[0] for name, p in CONV_CASES}
    assert steps["Cin 128: 4 column blocks of 1,152 rows"] == 2
    assert steps["OW 5, Cin 120: blocks span output rows"] == 1
    runs = run_cases(banked, CONV_CASES)
    plain = {run.name: run for run in run_cases(without_banks, CONV_CASES)}
    for run in runs:
        p = run.params
        want = direct_conv(p, run.ops).astype(output_dtype(p.stages))
        np.testing.assert_array_equal(run.kernel.decode(run.result.outputs), want,
                                      err_msg=run.name)
        assert len(np.unique(want)) > min(20, want.size // 4), run.name
        predicted = CONV.features(banked, p).analytical_cycles()
        assert predicted == run.result.counters["cycles"], run.name
        assert run.result.counters["cycles"] < plain[run.name].result.counters["cycles"]
