"""The block-sparse GEMM (:mod:`fusion.kernels.gemm.sparse`), checked without the simulator:
which blocks it keeps (against a plain loop over the blocks), that its programs read exactly
the kept blocks' rows of A and compact B for every output row and honour every hazard duty
(the symbolic tracer), what it refuses and why, and how the GEMM kind offers it."""

import dataclasses

import numpy as np
import pytest

from fusion.kernels.gemm.kind import GEMM
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.sparse import (
    block_rows,
    busy_slices,
    sparse_problems,
    weight_blocks,
)
from fusion.kernels.layout import GemmDims
from fusion.kernels.program import compile_kernel
from hwgen.asm import assemble, disassemble
from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.presets import SIM_VARIANTS, SMALL
from hwgen.reference import EpilogueParams
from tests.helpers.kernel_trace import HazardError, check_gemm, trace

V8 = VariantConfig(rows=8, cols=8, epilogue=EPILOGUE_STAGES)
PARAMS = EpilogueParams(mult=1 << 22, shift=30, zp=-5, clamp_lo=-60, clamp_hi=90)


def pruned(cfg, k, n, fraction, seed=0, zero_column=True):
    """Random int8 ``k x n`` weights with about ``fraction`` of their blocks zero (and, with
    ``zero_column``, the first column block all zero when there are several)."""
    rng = np.random.default_rng(seed)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    kb, c = block_rows(cfg), cfg.cols
    for j in range(0, k, kb):
        for col in range(0, n, c):
            if rng.random() < fraction:
                b[j:j + kb, col:col + c] = 0
    if zero_column and n > c:
        b[:, :c] = 0
    return b


def blocks_by_loop(cfg, b):
    """What weight_blocks should say, block by block."""
    k, n = b.shape
    kb, c = block_rows(cfg), cfg.cols
    cols = []
    for col in range(0, n, c):
        keep = tuple(j // kb for j in range(0, k, kb) if b[j:j + kb, col:col + c].any())
        cols.append(keep or (0,))
    return tuple(cols)


@pytest.mark.parametrize("cfg", [V8, SIM_VARIANTS["2x2"], SIM_VARIANTS["4x8"]],
                         ids=lambda c: f"{c.rows}x{c.cols}")
@pytest.mark.parametrize("k, n", [(64, 64), (27, 13), (200, 40)])
def test_weight_blocks_are_the_blocks_with_a_nonzero_weight(cfg, k, n):
    b = pruned(cfg, k, n, 0.6)
    assert weight_blocks(cfg, b) == blocks_by_loop(cfg, b)
    assert weight_blocks(cfg, np.ones((k, n), np.int8)) is None  # nothing to skip: dense


def sparse_kernel(cfg, m, k, n, stages, fraction=0.6, seed=0, **kw):
    b = pruned(cfg, k, n, fraction, seed)
    p = GemmParams(M=m, K=k, N=n, stages=stages, epilogue=PARAMS,
                   blocks=weight_blocks(cfg, b), sparse=True, **kw)
    assert GEMM.legality(cfg, p) is None
    return compile_kernel(GEMM, cfg, p), b


@pytest.mark.parametrize("cfg", [SMALL, SIM_VARIANTS["2x2"], SIM_VARIANTS["4x8"], V8],
                         ids=lambda c: f"{c.rows}x{c.cols}")
@pytest.mark.parametrize("stages", [(), ("bias",), ("bias", "requant", "relu"),
                                    ("requant", "clamp")], ids=lambda s: ",".join(s) or "none")
@pytest.mark.parametrize("m, k, n", [(1, 64, 40), (13, 40, 27), (40, 48, 16)])
def test_sparse_kernels_read_only_kept_blocks_and_are_hazard_free(cfg, stages, m, k, n):
    """Every output row is one MATMUL chain over exactly its column block's kept rows of A
    and compact B (several A groups on the small scratchpads), stored once, with every WAIT
    it needs; the array is fed the kept rows only."""
    kernel, _ = sparse_kernel(cfg, m, k, n, stages)
    t = check_gemm(kernel)
    assert t.k_steps == busy_slices(kernel.dims, kernel.sparse_blocks)
    assert t.bytes_loaded == kernel.bytes_loaded
    assert len(kernel.program) <= cfg.imem_depth


def _loosened(text, i, left):
    line = text[i].strip().split(", left")[0]
    return assemble("\n".join(text[:i] + [f"{line}, left={left}"] + text[i + 1:]))


def test_every_wait_of_the_sparse_program_is_needed():
    """Leaving one more load pending at any LOAD wait, or not waiting at all for the column
    block before to read its weight slot, is a hazard the tracer catches: a matmul reading
    weights still loading, or a load into a slot a matmul still reads."""
    kernel, _ = sparse_kernel(V8, 16, 96, 48, ("bias", "requant"), seed=3)
    trace(V8, kernel.program, kernel.regions)
    text = disassemble(kernel.program).splitlines()
    loads = [i for i, line in enumerate(text) if line.strip().startswith("wait units=1")]
    feeds = [i for i, line in enumerate(text) if line.strip().startswith("wait units=2")]
    assert len(loads) == 6 and len(feeds) == 2  # a load wait per column block
    for i in loads:
        left = int(text[i].split("left=")[1]) if "left=" in text[i] else 0
        with pytest.raises(HazardError, match="while a load into rows"):
            trace(V8, _loosened(text, i, left + 1), kernel.regions)
    for i in feeds:
        with pytest.raises(HazardError, match="while a queued job"):
            trace(V8, _loosened(text, i, 15), kernel.regions)


def test_a_weight_in_a_skipped_block_is_refused_when_packed():
    kernel, b = sparse_kernel(V8, 8, 64, 16, ())
    col = kernel.sparse_blocks[1]
    skipped = next(j for j in range(8) if j not in col)
    b = b.copy()
    b[skipped * 8 + 3, 8 + 5] = 7
    with pytest.raises(ValueError, match=rf"b\[{skipped * 8 + 3}, 13\] = 7 lies in a weight "
                                         rf"block the block-sparse kernel skips"):
        kernel.memory(a=np.zeros((8, 64), np.int8), b=b)


@pytest.mark.parametrize("change, match", [
    ({"stages": ("bias", "requant", "residual")}, "loads no residual tiles"),
    ({"stages": ("bias",), "fused": False}, "epilogue fused only"),
    ({"N": 64}, "name 2 column block"),
])
def test_what_cannot_run_block_sparse_is_refused_with_the_reason(change, match):
    b = pruned(V8, 64, 16, 0.5)
    p = dataclasses.replace(GemmParams(M=8, K=64, N=16, blocks=weight_blocks(V8, b),
                                       sparse=True), **change)
    refusal = GEMM.legality(V8, p)
    assert refusal is not None and refusal.reason == "sparse" and match in refusal.text


def test_a_column_block_too_large_for_the_weight_slots_is_refused():
    cfg = dataclasses.replace(SMALL, spad_b_depth=16)
    dims = GemmDims(cfg, 4, 40, 8)
    assert any("more than half the B scratchpad" in p for p in sparse_problems(
        dims, ((0, 1, 2, 3, 4),), (), fused=True, per_channel=False))


def test_the_kind_offers_the_sparse_program_beside_the_dense_tilings():
    """Pruned weights: the variants are the dense tilings (whose cache keys do not change)
    and one block-sparse program, keyed by its blocks; dense weights offer no sparse one."""
    b = pruned(V8, 256, 64, 0.75)
    blocks = weight_blocks(V8, b)
    base = GemmParams(M=32, K=256, N=64, stages=("bias", "requant"), epilogue=PARAMS,
                      blocks=blocks)
    variants = GEMM.variants(V8, base)
    sparse = [p for p in variants if p.sparse]
    assert len(sparse) == 1 and sparse[0].blocks == blocks
    assert GEMM.key_params(sparse[0])["sparse_blocks"] == [list(c) for c in blocks]
    for p in variants:
        if not p.sparse:
            plain = dataclasses.replace(p, blocks=None)
            assert GEMM.key_params(p) == GEMM.key_params(plain)
    assert not any(p.sparse for p in GEMM.variants(V8, dataclasses.replace(base, blocks=None)))
    # at 75% of the blocks pruned, the analytical model prices the sparse program cheaper
    cycles = {p.sparse: min(GEMM.features(V8, q).analytical_cycles() for q in variants
                            if q.sparse == p.sparse) for p in variants}
    assert cycles[True] < 0.5 * cycles[False]


def test_sparse_features_round_trip_through_json():
    kernel, _ = sparse_kernel(V8, 16, 64, 24, ("bias",))
    f = GEMM.features(V8, kernel.signature)
    again = type(f).from_dict(f.to_dict())
    assert again == f and again.blocks == kernel.sparse_blocks
    assert again.analytical_cycles() == f.analytical_cycles()


def test_a_learned_model_sees_the_kept_blocks_summarized_not_listed():
    from fusion.cost.vectors import featurize
    from hwgen.platform import PlatformConfig

    kernel, _ = sparse_kernel(V8, 16, 256, 64, ("bias",), fraction=0.75)
    f = GEMM.features(V8, kernel.signature)
    vector = featurize(f, PlatformConfig())
    assert not any(name.startswith("blocks") for name in vector)
    assert vector["sparse.kept_blocks"] == sum(map(len, kernel.sparse_blocks))
    assert 8 <= vector["sparse.runs"] <= vector["sparse.kept_blocks"]
