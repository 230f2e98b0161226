"""The grouped GEMM (``kgroup``: a block-diagonal B, each column block over its own rows of K)
without Verilator: its layouts, the loads of its program, its tiling, its cost features and
the compiler's choice of it. The simulator runs it in ``tests/sim/test_grouped_gemm.py``."""

import dataclasses
import json

import numpy as np
import pytest

from fusion.compiler.kernels import grouping
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.kernels import layout
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.gemm.kind import GEMM, compiled_gemm, gemm_key_parts, gemm_params
from fusion.kernels.gemm.loops import gemm_context
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.tiling import Tiling, ranked_tilings, resolve, tiling_problem, traffic
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES, SIM_VARIANTS
from hwgen.reference import EpilogueParams
from tests.fusion.kernels.gemm.test_build import assert_sound
from tests.fusion.test_real_models import REAL

CFG = SIM_VARIANTS["4x4"]  # 4 x 4 array, 8-byte words, k_align 2
V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)


def block_diagonal(k, n, kgroup, cols, seed=0):
    """Random int8 ``[K, N]`` weights zero outside the diagonal blocks, and a random A."""
    rng = np.random.default_rng(seed)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    b[np.arange(k)[:, None] // kgroup != np.arange(n)[None, :] // cols] = 0
    return b


def tiles_from_layout(dims, a_bytes, b_bytes):
    """The M x N int64 product that the packed bytes encode: tile (i, j) sums, over the Kp
    rows of its column block's slice, A's packed rows times B's packed block j."""
    R, C, Kp = dims.R, dims.C, dims.Kp  # noqa: N806
    a = np.frombuffer(a_bytes, np.int8).reshape(dims.Mb, dims.a_Kp, R).astype(np.int64)
    b = np.frombuffer(b_bytes, np.int8).reshape(dims.Nb, Kp, C).astype(np.int64)
    out = np.zeros((dims.Mb * R, dims.Nb * C), np.int64)
    for i in range(dims.Mb):
        for j in range(dims.Nb):
            lo = j * Kp if dims.grouped else 0
            out[i * R:(i + 1) * R, j * C:(j + 1) * C] = a[i, lo:lo + Kp].T @ b[j]
    return out[:dims.M, :dims.N]


@pytest.mark.parametrize("m, k, n, kgroup", [
    (9, 9 * 12, 12, 36),   # depthwise 3x3, 12 channels: 3 column blocks of 4
    (5, 9 * 10, 10, 36),   # N not a multiple of the columns: the last block reads 18 rows
    (7, 5 * 8, 8, 20),     # a group of 2 channels (2 per group, 2 groups a column block)
    (3, 3 * 9, 9, 12),     # kgroup a multiple of k_align, last block of one channel
])
def test_packed_layout_computes_the_block_diagonal_product(m, k, n, kgroup):
    dims = GemmDims(CFG, m, k, n, kgroup=kgroup)
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = block_diagonal(k, n, kgroup, CFG.cols)
    a_bytes, b_bytes = layout.pack_a(dims, a), layout.pack_b(dims, b)
    assert len(a_bytes) == dims.Mb * dims.Nb * dims.Kp * dims.R
    assert len(b_bytes) == dims.Nb * dims.Kp * dims.C
    np.testing.assert_array_equal(tiles_from_layout(dims, a_bytes, b_bytes),
                                  a.astype(np.int64) @ b.astype(np.int64))
    # each tile reduces over Kp = kgroup rounded up to k_align, not K
    assert dims.Kp == -(-kgroup // CFG.k_align) * CFG.k_align < k


def test_dense_layout_is_unchanged_by_the_grouped_code():
    dims = GemmDims(CFG, 5, 13, 7)
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (5, 13), dtype=np.int8)
    b = rng.integers(-128, 128, (13, 7), dtype=np.int8)
    assert dims.a_Kp == dims.Kp == 14
    np.testing.assert_array_equal(
        tiles_from_layout(dims, layout.pack_a(dims, a), layout.pack_b(dims, b)),
        a.astype(np.int64) @ b.astype(np.int64))


def test_weights_outside_the_blocks_are_refused_by_name():
    dims = GemmDims(CFG, 4, 9 * 8, 8, kgroup=36)
    b = block_diagonal(72, 8, 36, CFG.cols)
    b[40, 1] = 3  # row 40 belongs to column block 1, column 1 to block 0
    with pytest.raises(ValueError, match=r"b\[40, 1\] = 3 lies outside the diagonal blocks"):
        layout.pack_b(dims, b)


@pytest.mark.parametrize("k, n, kgroup, why", [
    (72, 8, 36, None),
    (72, 8, 72, "at least two column blocks"),   # 2 blocks, but the first reads all of K
    (72, 4, 36, "at least two column blocks"),   # one column block
    (72, 8, 20, r"\(Nb-1\)\*kgroup < K <= Nb\*kgroup"),
    (72, 8, -1, "non-negative integer"),
])
def test_kgroup_must_split_k_over_the_column_blocks(k, n, kgroup, why):
    problem = layout.kgroup_problem(CFG, k, n, kgroup)
    if why is None:
        assert problem is None
        return
    assert problem is not None
    with pytest.raises(ValueError, match=why):
        GemmDims(CFG, 4, k, n, kgroup=kgroup)
    if kgroup >= 0:  # the params take it; the kind refuses it on the variant, by name
        refusal = GEMM.legality(CFG, gemm_params(4, k, n, kgroup=kgroup))
        assert refusal is not None and refusal.reason == "kgroup"
        assert "use kgroup=0 (dense)" in refusal.text
    else:
        with pytest.raises(ValueError, match="kgroup must be a non-negative integer"):
            gemm_params(4, k, n, kgroup=kgroup)


def test_grouped_super_tiles_hold_column_blocks_of_one_group():
    dims = GemmDims(CFG, 40, 9 * 16, 16, kgroup=36)  # a group a column block
    assert {t.tn for t in ranked_tilings(dims)} == {1}
    assert "tn must divide its kblocks=1, not tn=2" in tiling_problem(dims, (),
                                                                     Tiling(tm=1, tn=2))
    # ShuffleNet's grouped 1x1 at M = 4: 3 groups of 10 column blocks. Its A is K-major as
    # the producer stored it (a_direct), and the kernel is a part per group, a dense GEMM
    # over the group's 320 rows: A's rows stay resident across the group's column blocks
    # whatever the super tile, so each row of A is loaded once (a slice per super tile, as
    # the layout of a slice per column block loads it, took 19,320 and 14,520 cycles)
    wide = GemmDims(V8, 4, 960, 240, kgroup=320, kblocks=10)
    assert wide.a_direct
    tns = {t.tn for t in ranked_tilings(wide, ("bias", "requant"))}
    assert tns <= {1, 2, 5, 10} and max(tns) > 1
    assert "not tn=3" in tiling_problem(wide, (), Tiling(tm=1, tn=3))
    one, group = Tiling(tm=1, tn=1, kt=320), Tiling(tm=1, tn=2, kt=320)
    assert traffic(wide, group) < traffic(wide, one)
    kernels = [compiled_gemm(V8, 4, 960, 240, stages=("bias", "requant"), kgroup=320,
                             kblocks=10, tiling=t) for t in (one, group)]
    b_bytes = wide.Nb * wide.Kp * wide.C
    for kernel in kernels:
        assert_sound(kernel)
        bias = kernel.regions["bias"].nbytes
        assert kernel.bytes_loaded == wide.Mb * wide.K * wide.R + b_bytes + bias
        assert kernel.ideal_cycles < 0.8 * 14_520


def walk_loads(ctx):
    """Every operand load of a GEMM program in execution order, as ``(dst, address, count,
    len, stride)``: the registers start as the setup leaves them and move by each load's
    ``set_ext`` (the ``addi`` before it); loops run their bodies ``count`` times."""
    regs = dict(ctx["setup"])
    loads = []

    def load(ld):
        if ld["dst"] not in ("a", "b"):
            return
        if ld["set_ext"]:
            regs[ld["ext"]] = regs[ld["set_ext"]["rs"]] + ld["set_ext"]["imm"]
        loads.append((ld["dst"], regs[ld["ext"]], ld["count"], ld["len"], ld["stride"]))

    def nest(nodes):
        for node in nodes:
            if node["kind"] == "loop":
                for _ in range(node["count"]):
                    nest(node["body"])
            else:
                for ld in node["loads"]:
                    load(ld)

    for ld in ctx["prologue_loads"]:
        load(ld)
    nest(ctx["supertiles"])
    return loads


@pytest.mark.parametrize("m, chans, tiling", [
    (40, 12, Tiling(tm=2, order="mn")),
    (40, 12, Tiling(tm=2, order="nm")),
    (40, 12, Tiling(tm=3, order="nm", double_buffer=False)),   # ragged M (Mb 10)
    (17, 10, Tiling(kt=8, order="mn")),                        # k chunks, ragged N
    (17, 10, Tiling(kt=8, order="nm", double_buffer=False)),
])
def test_program_loads_each_column_blocks_own_slice_of_a(m, chans, tiling):
    k, n = 9 * chans, chans
    dims = GemmDims(CFG, m, k, n, kgroup=9 * CFG.cols)
    t = resolve(dims, ("bias", "requant"), tiling)
    regions = {"a": Region("a", 1000, 1), "b": Region("b", 50000, 1),
               "bias": Region("bias", 90000, 1)}
    ctx = gemm_context(dims, t, ("bias", "requant"), regions, params=EpilogueParams(),
                       out=Region("out", 70000, 1), out_dt="i8")
    R, C, W, Kp, kt = dims.R, dims.C, dims.W, dims.Kp, t.kt  # noqa: N806
    cm, cn, ck = -(-dims.Mb // t.tm), dims.Nb, -(-Kp // kt)
    order = [(i, j) for i in range(cm) for j in range(cn)] if t.order == "mn" else [
        (i, j) for j in range(cn) for i in range(cm)]
    want, last = [], {}
    for i, j in order:
        for c in range(ck):
            tme, kte = min(t.tm, dims.Mb - i * t.tm), min(kt, Kp - c * kt)
            a = ("a", 1000 + (i * t.tm * dims.a_Kp + j * Kp + c * kt) * R // W, tme,
                 kte * R // W, dims.a_Kp * R // W)
            b = ("b", 50000 + (j * Kp + c * kt) * C // W, 1, kte * C // W, Kp * C // W)
            for q, ld in (("a", a), ("b", b)):  # a block that stays resident is not reloaded
                if last.get(q) != ld[1]:
                    want.append(ld)
                    last[q] = ld[1]
    got = walk_loads(ctx)
    # count 1 loads ignore the stride: compare it only where there are several segments
    norm = [(d, addr, cnt, ln, st if cnt > 1 else None) for d, addr, cnt, ln, st in got]
    assert norm == [(d, addr, cnt, ln, st if cnt > 1 else None)
                    for d, addr, cnt, ln, st in want]


def test_features_round_trip_and_price_the_grouped_kernel():
    f = GemmFeatures.for_gemm(CFG, 125, 9 * 16, 16, stages=("bias", "requant"), kgroup=36)
    assert f.kgroup == 36 and f.dims.grouped
    assert GemmFeatures.from_dict(json.loads(json.dumps(f.to_dict()))) == f
    dense = dataclasses.replace(f, kgroup=0, tiling=Tiling.for_problem(
        CFG, 125, 144, 16, stages=("bias", "requant")))
    # the array works over Kp = 36 rows per tile instead of 144, and the MACs are the blocks'
    assert f.k_slices * 4 == dense.k_slices
    assert f.macs == 125 * 36 * 16  # its column blocks' 36 x 4 blocks of B, not all of K
    assert f.analytical_cycles() < dense.analytical_cycles() / 2
    # a grouped and a dense kernel of one shape are different programs: different cache keys
    key = gemm_key_parts(CFG, 125, 144, 16, stages=("bias", "requant"))
    grouped_key = GEMM.key_params(gemm_params(125, 144, 16, kgroup=36))
    assert "kgroup" not in key["params"] and grouped_key["kgroup"] == 36


def test_a_built_grouped_kernel_knows_its_grouping():
    kernel = compiled_gemm(CFG, 9, 9 * 12, 12, stages=("bias", "requant"), kgroup=36)
    assert kernel.dims.kgroup == 36
    assert kernel.regions["a"].nbytes == kernel.dims.Mb * 3 * 36 * CFG.rows
    f = GemmFeatures.from_kernel(kernel)
    assert f.kgroup == 36 and f.bytes_loaded == kernel.bytes_loaded


@pytest.mark.parametrize("group, n, cols, expect", [
    (16, 16, 4, (36, 1, "grouped GEMM, each column block of 4 reduce over their group's 36")),
    (8, 16, 4, (36, 1, "grouped GEMM")),  # 2 channels a group, 2 groups a column block
    (4, 16, 8, (72, 1, "grouped GEMM")),  # 4 channels a group, 2 groups a column block
    # 8 channels a group, 2 column blocks of 4 each: both read their group's 72 rows
    (2, 16, 4, (72, 2, "grouped GEMM, its 2 column blocks of 4 reduce over their group's 72")),
    (2, 12, 8, (0, 1, "a group's 6 output channels neither divide the array's 8 columns nor "
                      "are a multiple of them")),
    (16, 16, 16, (0, 1, "all 16 output channels fit one column block of 16")),
    (1, 16, 4, (0, 1, "")),
])
def test_grouping_of_a_convolutions_weights(group, n, cols, expect):
    config = VariantConfig(rows=4, cols=cols, epilogue=ALL_STAGES)
    k = 9 * 16  # 16 input channels, 3x3
    kg_conv = k // group  # rows of one group
    w = np.zeros((k, n), np.int8)
    for o in range(n):
        g = o // (n // group)
        w[g * kg_conv:(g + 1) * kg_conv, o] = (o % 7) + 1
    kgroup, kblocks, note = grouping(config, w, group)
    assert (kgroup, kblocks) == expect[:2]
    assert expect[2] in note
    if kgroup:  # not block-diagonal after all: dense, and why
        w[0, n - 1] = 1
        assert grouping(config, w, group) == (0, 1, f"group {group} as a dense GEMM of "
                                                 f"block-diagonal weights: the weights are not "
                                                 f"zero outside the diagonal {kgroup}-row "
                                                 f"blocks")
        assert grouping(config, w, group, split=True)[0] == 0


def test_column_blocks_of_one_group_read_its_rows():
    """``kblocks``: the 4 column blocks of a 16-channel group (4 columns) all read that
    group's 24 rows; A is K-major as a producer stores it (a group's rows are whole k steps:
    ``a_direct``), B holds the diagonal blocks. A group of 21 rows (not whole k steps of 2)
    reads a slice of A per column block."""
    dims = GemmDims(CFG, 5, 48, 32, kgroup=24, kblocks=4)  # 2 groups of 16 channels
    assert [dims.k_rows(nb) for nb in range(dims.Nb)] == [(0, 24)] * 4 + [(24, 48)] * 4
    assert dims.a_direct and dims.a_Kp == dims.K == 48
    assert [dims.a_rows_at(nb) for nb in range(dims.Nb)] == [0] * 4 + [24] * 4
    odd = GemmDims(CFG, 5, 42, 32, kgroup=21, kblocks=4)
    assert not odd.a_direct and odd.a_Kp == odd.Nb * odd.Kp == 8 * 22
    assert [odd.a_rows_at(nb) for nb in range(odd.Nb)] == [22 * nb for nb in range(8)]
    with pytest.raises(ValueError, match="kblocks must be a positive integer"):
        GemmDims(CFG, 5, 48, 32, kgroup=24, kblocks=0)
    with pytest.raises(ValueError, match="in groups of 8"):  # one group: dense
        GemmDims(CFG, 5, 48, 32, kgroup=24, kblocks=8)


def test_ds_cnn_depthwise_layers_compile_to_grouped_gemms():
    config = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)
    compiled = compile_model(load_model(REAL / "ds_cnn_qdq.onnx"), config)
    dw = [k.spec for k in compiled.kernels if "_dw/" in k.name]
    assert len(dw) == 4
    for spec in dw:
        assert (spec.params.K, spec.params.N, spec.params.kgroup) == (576, 64, 72)
        assert "group 64: grouped GEMM" in spec.describe()
    # the others are dense: GEMMs, or the window convolution of conv0 (no groups)
    assert all(getattr(k.spec.params, "kgroup", 0) == 0 for k in compiled.kernels
               if "_dw/" not in k.name)
    assert any(k.spec.kind.name == "conv" for k in compiled.kernels if "conv0" in k.name)
