"""Memory layouts: blocked operands, tile-blocked tensors, bias padding, region allocation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.kernels import layout
from fusion.kernels.layout import Allocator, GemmDims
from hwgen.config import VariantConfig


@st.composite
def configs(draw):
    rows = draw(st.sampled_from([1, 2, 4, 8]))
    cols = draw(st.sampled_from([1, 2, 4, 8]))
    port = draw(st.sampled_from([p for p in (1, 2, 4, 8, 16) if (rows * cols) % p == 0]))
    return VariantConfig(rows=rows, cols=cols, port_bytes=port)


@settings(max_examples=60, deadline=None)
@given(cfg=configs(), m=st.integers(1, 20), k=st.integers(1, 20), n=st.integers(1, 20),
       seed=st.integers(0, 1000))
def test_layouts_are_exact(cfg, m, k, n, seed):
    d = GemmDims(cfg, m, k, n)
    R, C, Kp = cfg.rows, cfg.cols, d.Kp
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k))
    b = rng.integers(-128, 128, (k, n))
    pa = np.frombuffer(layout.pack_a(d, a), np.int8)
    pb = np.frombuffer(layout.pack_b(d, b), np.int8)
    assert Kp % cfg.k_align == 0 and Kp >= k
    assert len(pa) == d.Mb * Kp * R and len(pa) % cfg.port_bytes == 0
    assert len(pb) == d.Nb * Kp * C and len(pb) % cfg.port_bytes == 0
    i, r, kk = rng.integers(0, m), 0, rng.integers(0, k)
    blk, r = divmod(i, R)
    assert pa[(blk * Kp + kk) * R + r] == a[i, kk]
    j = rng.integers(0, n)
    blk, c = divmod(j, C)
    assert pb[(blk * Kp + kk) * C + c] == b[kk, j]
    # the padding is zeros
    assert np.count_nonzero(pa) == np.count_nonzero(a)
    assert np.count_nonzero(pb) == np.count_nonzero(b)
    for dtype in (np.int8, np.int32):
        x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (m, n), dtype=np.int64)
        data = layout.pack_tiles(d, x, dtype)
        assert len(data) == d.Mb * d.Nb * d.tile_bytes(np.dtype(dtype).itemsize)
        np.testing.assert_array_equal(layout.unpack_tiles(d, data, dtype), x)
        tiles = np.frombuffer(data, np.dtype(dtype).newbyteorder("<"))
        ti, tr = divmod(i, R)
        tj, tc = divmod(j, C)
        assert tiles[((ti * d.Nb + tj) * R + tr) * C + tc] == x[i, j]


def test_bias_is_padded_to_whole_words():
    cfg = VariantConfig(rows=8, cols=1, port_bytes=8)  # one int32 lane a row: 2 rows a word
    d = GemmDims(cfg, 8, 8, 3)
    assert d.Nb == 3 and d.bias_rows == 4
    data = layout.pack_bias(d, np.array([1, -2, 3]))
    assert len(data) == 16
    np.testing.assert_array_equal(np.frombuffer(data, "<i4"), [1, -2, 3, 0])
    wide = GemmDims(VariantConfig(rows=4, cols=4), 4, 4, 6)
    assert wide.bias_rows == wide.Nb == 2


@pytest.mark.parametrize("call, match", [
    (lambda d: layout.pack_a(d, np.zeros((3, 4), int)), r"a must have shape \(4, 4\)"),
    (lambda d: layout.pack_a(d, np.full((4, 4), 128)), "a has values outside int8"),
    (lambda d: layout.pack_b(d, np.zeros((4, 4))), "b must be an integer array"),
    (lambda d: layout.pack_bias(d, np.full(4, 1 << 31)), "bias has values outside int32"),
    (lambda d: layout.unpack_tiles(d, b"\0" * 8), "needs 16 bytes, got 8"),
])
def test_pack_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call(GemmDims(VariantConfig(rows=4, cols=4), 4, 4, 4))


def test_dims_are_validated():
    with pytest.raises(ValueError, match="K must be a positive integer, not 0"):
        GemmDims(VariantConfig(), 1, 0, 1)


def test_allocator_aligns_and_checks_the_memory_size():
    cfg = VariantConfig(port_bytes=8, mem_addr_bits=8)  # 256 words
    alloc = Allocator(cfg)
    first = alloc.alloc("a", 3)
    second = alloc.alloc("b", 100)
    assert (first.addr, second.addr) == (0, 8)  # 64-byte alignment = 8 words
    assert second.words(8) == 13 and alloc.used_words == 21
    with pytest.raises(ValueError, match="allocated twice"):
        alloc.alloc("a", 1)
    with pytest.raises(ValueError, match="beyond the 256 words of external memory"):
        alloc.alloc("big", 2000)
