"""Placing a GEMM kernel's regions at given word addresses: ``gemm_regions`` names what
``compiled_gemm`` allocates, a placement moves exactly those regions, and the program follows
them (checked structurally by ``kernel_trace``). No Verilator."""

import numpy as np
import pytest

from fusion.kernels import layout
from fusion.kernels.cache import KernelCache
from fusion.kernels.gemm.kind import compiled_gemm, gemm_key_parts, gemm_regions
from fusion.kernels.tiling import Tiling
from hwgen.config import EPILOGUE_STAGES
from hwgen.presets import SMALL, WIDE
from hwgen.reference import EpilogueParams
from tests.helpers.kernel_trace import check_gemm

ALL = EPILOGUE_STAGES
PARAMS = EpilogueParams(mult=1 << 22, shift=30, zp=-5, clamp_lo=-60, clamp_hi=90)


def operands(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.integers(-128, 128, (m, k)), "b": rng.integers(-128, 128, (k, n)),
            "bias": rng.integers(-5000, 5000, n), "residual": rng.integers(-128, 128, (m, n)),
            "mult": rng.integers(1 << 20, 1 << 24, n), "shift": rng.integers(20, 34, n)}


def build(cfg, m, k, n, stages, fused, params=PARAMS, placement=None, tiling=None):
    return compiled_gemm(cfg, m, k, n, stages=stages, fused=fused, params=params, tiling=tiling,
                         placement=placement)


def moved(sizes, cfg, gap=3):
    """A placement of ``sizes`` in reverse order (out lowest), with gaps of ``gap`` words."""
    addr, placement = 5, {}
    for name in reversed(list(sizes)):
        placement[name] = addr
        addr += -(-sizes[name] // cfg.port_bytes) + gap
    return placement


@pytest.mark.parametrize("cfg", [SMALL, WIDE], ids=["4x8", "8x2w16"])
@pytest.mark.parametrize("stages, fused, params", [
    ((), True, PARAMS),
    (("bias",), True, PARAMS),
    (("bias", "requant", "relu"), False, PARAMS),
    (("requant", "clamp", "residual"), True, PARAMS),
    (ALL, False, PARAMS),
    (("requant",), True, EpilogueParams(per_channel=True, zp=2)),
    (("bias", "requant", "relu"), False, EpilogueParams(per_channel=True)),
], ids=lambda v: ",".join(v) if isinstance(v, tuple) else None)
def test_gemm_regions_are_what_compiled_gemm_allocates(cfg, stages, fused, params):
    for m, k, n in [(1, 1, 1), (13, 20, 27), (33, 64, 17)]:
        kernel = build(cfg, m, k, n, stages, fused, params)
        sizes = gemm_regions(cfg, m, k, n, stages=stages, fused=fused, params=params)
        assert list(sizes) == list(kernel.regions)  # the same names, in allocation order
        assert sizes == {name: r.nbytes for name, r in kernel.regions.items()}
        for addr, blob in kernel.memory(**operands(m, k, n)):  # each fills its region exactly
            (region,) = [r for r in kernel.regions.values() if r.addr == addr]
            assert len(blob) == region.nbytes


def test_default_placement_is_the_allocator():
    sizes = gemm_regions(SMALL, 13, 20, 27, stages=ALL, fused=False, params=PARAMS)
    alloc = layout.Allocator(SMALL)
    for name, nbytes in sizes.items():
        alloc.alloc(name, nbytes)
    assert layout.place(SMALL, sizes) == alloc.regions
    kernel = build(SMALL, 13, 20, 27, ALL, False)
    assert kernel.regions == alloc.regions


@pytest.mark.parametrize("stages, fused, tiling", [
    (("bias", "requant", "relu"), True, None),
    (("requant", "clamp", "residual"), True, Tiling(tm=1, tn=1, kt=8)),
    (ALL, False, Tiling(tm=2, tn=2, order="nm", double_buffer=False)),
    ((), True, None),
])
def test_a_placed_kernel_reads_and_writes_its_placed_regions(stages, fused, tiling):
    m, k, n = 13, 20, 27
    sizes = gemm_regions(SMALL, m, k, n, stages=stages, fused=fused, params=PARAMS)
    placement = moved(sizes, SMALL)
    kernel = build(SMALL, m, k, n, stages, fused, placement=placement, tiling=tiling)
    default = build(SMALL, m, k, n, stages, fused, tiling=tiling)
    assert {name: r.addr for name, r in kernel.regions.items()} == placement
    assert kernel.regions["out"].addr < kernel.regions["a"].addr
    assert kernel.reads == {"out": (placement["out"], sizes["out"])}
    # the same operand bytes, at the placed addresses
    ops = operands(m, k, n)
    placed, moved_from = kernel.memory(**ops), default.memory(**ops)
    assert sorted(blob for _, blob in placed) == sorted(b for _, b in moved_from)
    assert {a for a, _ in placed} == {placement[name] for name in sizes
                                      if name not in ("out", "tmp0", "tmp1")}
    # hazard-free, and every output row computed from the right operand rows of the placed
    # regions (kernel_trace labels rows by region name)
    check_gemm(kernel)
    np.testing.assert_array_equal(kernel.expected(**ops), default.expected(**ops))
    assert kernel.tiling == default.tiling and kernel.program != default.program


@pytest.mark.parametrize("change, match", [
    (lambda p: p.pop("b"), r"missing b"),
    (lambda p: p.update(extra=900), r"unknown extra"),
    (lambda p: p.update(out=p["a"] + 1), r"'a' .* and 'out' .* overlap"),
    (lambda p: p.update(bias=SMALL.mem_words - 1), r"'bias' .* beyond the 131072 words"),
    (lambda p: p.update(a=-4), r"'a' is placed at -4"),
    (lambda p: p.update(a=2.5), r"'a' is placed at 2.5"),
    (lambda p: p.update(a=True), r"'a' is placed at True"),
])
def test_bad_placements_name_the_region(change, match):
    stages = ("bias", "requant")
    placement = moved(gemm_regions(SMALL, 13, 20, 27, stages=stages), SMALL)
    change(placement)
    with pytest.raises(ValueError, match=match):
        build(SMALL, 13, 20, 27, stages, True, placement=placement)
    with pytest.raises(ValueError, match=match):
        compiled_gemm(SMALL, 13, 20, 27, stages=stages, params=PARAMS, placement=placement)


def test_a_region_inside_a_larger_one_overlaps():
    sizes = {"big": 800, "small1": 8, "small2": 8}
    with pytest.raises(ValueError, match=r"'big' .* and 'small2' .* overlap"):
        layout.place(SMALL, sizes, {"big": 0, "small1": 200, "small2": 10})
    # touching is not overlapping
    regions = layout.place(SMALL, sizes, {"big": 0, "small1": 101, "small2": 100})
    assert [r.addr for r in regions.values()] == [0, 101, 100]


def test_placement_is_part_of_the_cache_key_and_metadata(tmp_path):
    m, k, n, stages = 13, 20, 27, ("bias", "requant", "relu")
    sizes = gemm_regions(SMALL, m, k, n, stages=stages)
    placement = moved(sizes, SMALL)
    base = gemm_key_parts(SMALL, m, k, n, stages=stages, params=PARAMS)
    placed = gemm_key_parts(SMALL, m, k, n, stages=stages, params=PARAMS,
                            placement={k_: np.int64(v) for k_, v in placement.items()})
    assert base["placement"] is None and placed["placement"] == placement
    cache = KernelCache(tmp_path)
    assert cache.key(base) != cache.key(placed)
    got = compiled_gemm(SMALL, m, k, n, stages=stages, params=PARAMS, placement=placement,
                        cache=cache)
    direct = build(SMALL, m, k, n, stages, True, placement=placement)
    assert got.program == direct.program and got.reads == direct.reads
    assert got.meta["placement"] == placement
    assert {name: a for name, (a, _) in got.meta["regions"].items()} == placement
    ops = operands(m, k, n)
    assert got.memory(ops["a"], ops["b"], bias=ops["bias"]) == direct.memory(**ops)
    # the default placement is another entry; the same placement again is a hit
    compiled_gemm(SMALL, m, k, n, stages=stages, params=PARAMS, cache=cache)
    compiled_gemm(SMALL, m, k, n, stages=stages, params=PARAMS, placement=dict(placement),
                  cache=cache)
    assert (cache.stats.misses, cache.stats.hits) == (2, 1)
