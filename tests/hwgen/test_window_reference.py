"""The window unit's numpy meaning (:func:`hwgen.reference.window_tile`) is a depthwise
convolution, a max pool and a global sum: checked against each computed another way
(whole-array numpy over a padded input, not tap by tap), for random geometries."""

import numpy as np
import pytest

from hwgen.reference import WindowGeometry, window_tile

LANES, ROWS = 8, 8


def _padded(x, pt, pl, kh, kw, stride, fill):
    """``x`` ``[H, W, C]`` padded on every side far enough for every window, with ``fill``."""
    h, w, c = x.shape
    out = np.full((h + pt + kh + stride, w + pl + kw + stride, c), fill, np.int64)
    out[pt:pt + h, pl:pl + w] = x
    return out


def _direct(x, weights, geom):
    """Every output ``[OH, OW, C]`` of the window op, by shifted whole-array slices."""
    kh, kw, s = geom.kh, geom.kw, geom.stride
    h, w, _ = x.shape
    oh = (h + 2 * geom.pt - kh) // s + 1  # as much padding below and right as above and left
    ow = (w + 2 * geom.pl - kw) // s + 1
    fill = np.int8(np.uint8(geom.fill)).astype(np.int64)
    xp = _padded(x.astype(np.int64), geom.pt, geom.pl, kh, kw, s, fill)
    taps = [xp[ky:ky + oh * s:s, kx:kx + ow * s:s] for ky in range(kh) for kx in range(kw)]
    if geom.mode == "max":
        return np.max(taps, axis=0)
    return sum(t * weights[3 * ky + kx] for t, (ky, kx) in
               zip(taps, [(ky, kx) for ky in range(kh) for kx in range(kw)], strict=True))


@pytest.mark.parametrize("seed", range(12))
def test_window_tiles_are_a_depthwise_convolution_or_a_max_pool(seed):
    rng = np.random.default_rng(seed)
    kh, kw = rng.integers(1, 4, 2)
    stride = int(rng.integers(1, 4))
    geom = WindowGeometry(win=int(rng.integers(kw, 12)), hin=int(rng.integers(kh, 9)),
                          kh=int(kh), kw=int(kw), stride=stride, pt=int(rng.integers(0, kh)),
                          pl=int(rng.integers(0, kw)), fill=int(rng.integers(0, 256)),
                          mode=("mac", "max")[seed % 2])
    x = rng.integers(-128, 128, (geom.hin, geom.win, LANES), dtype=np.int8)
    weights = rng.integers(-128, 128, (9, LANES), dtype=np.int8)
    want = _direct(x, weights.astype(np.int64), geom)
    oh, ow = want.shape[:2]
    a_spad = np.zeros((256, LANES), np.int8)
    base = 37  # the plane anywhere in the scratchpad
    a_spad[base:base + geom.hin * geom.win] = x.reshape(-1, LANES)
    e_spad = np.zeros((64, LANES), np.int64)
    e_spad[20:29] = weights
    e_spad[20:29] |= 0x7F00  # only the low byte of a weight lane counts
    got = []
    for p in range(0, oh * ow, ROWS):
        count = min(ROWS, oh * ow - p)
        tile = window_tile(a_spad, e_spad, geom, a=base, w=20, pos=(p // ow) << 16 | p % ow,
                           count=count, ow=ow, rows=ROWS)
        assert not tile[count:].any()
        got.append(tile[:count])
    np.testing.assert_array_equal(np.concatenate(got).reshape(want.shape), want)


def test_sum_mode_is_each_images_global_sum():
    rng = np.random.default_rng(3)
    images, h, w = 11, 3, 5
    x = rng.integers(-128, 128, (images, h * w, LANES), dtype=np.int8)
    a_spad = np.zeros((512, LANES), np.int8)
    a_spad[9:9 + images * h * w] = x.reshape(-1, LANES)
    geom = WindowGeometry(win=w, hin=h, mode="sum")
    got = np.concatenate([
        window_tile(a_spad, np.zeros((16, LANES)), geom, a=9, w=0, pos=n << 16,
                    count=min(ROWS, images - n), ow=1, rows=ROWS)[:min(ROWS, images - n)]
        for n in range(0, images, ROWS)])
    np.testing.assert_array_equal(got, x.astype(np.int64).sum(axis=1))
