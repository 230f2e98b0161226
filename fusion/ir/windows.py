"""Sliding-window numerics shared by the executor's conv, pooling and im2col kernels.

One window extractor serves them all, so ``im2col`` and ``qconv2d`` read exactly the same
input elements (the identity the conv legalization relies on).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from fusion.ir import shapes


def windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int] | None,
            dilations: Sequence[int] | None, pads: Sequence[int] | None, fill: float | int,
            auto_pad: str = "NOTSET", ceil_mode: int = 0) -> np.ndarray:
    """Every window of ``x`` ([N, C, *spatial]) as ``[N, C, *kernel, *out]``.

    Padding (and, with ``ceil_mode``, any overhang of the last window) reads ``fill``; a
    negative end pad crops that many trailing elements first (:func:`fusion.ir.shapes.
    crop_ends`).
    """
    rank = len(x.shape) - 2
    if auto_pad == "NOTSET" and pads is not None and any(p < 0 for p in pads[rank:]):
        spatial, pads = shapes.crop_ends(x.shape[2:], pads)
        x = x[(slice(None), slice(None), *(slice(0, n) for n in spatial))]
    spatial = x.shape[2:]
    strides = tuple(strides or (1,) * rank)
    dilations = tuple(dilations or (1,) * rank)
    out, begin, end = shapes.window(spatial, kernel, strides, dilations, pads, auto_pad,
                                    ceil_mode)
    need = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in
            zip(out, strides, kernel, dilations, strict=True)]
    # The end padding grows when ceil_mode lets the last window hang over the input.
    end = [max(e, nd - n - b) for e, nd, n, b in zip(end, need, spatial, begin, strict=True)]
    padded = np.pad(x, [(0, 0), (0, 0), *zip(begin, end, strict=True)], constant_values=fill)
    cols = np.empty((*x.shape[:2], *kernel, *out), dtype=x.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                      for o, d, n, s in zip(offsets, dilations, out, strides, strict=True))
        cols[(slice(None), slice(None), *offsets)] = padded[(slice(None), slice(None), *index)]
    return cols


def conv2d(x: np.ndarray, w: np.ndarray, *, group: int, strides, dilations, pads, fill,
           auto_pad: str = "NOTSET", acc=np.int64) -> np.ndarray:
    """Grouped 2-D convolution of ``x`` [N, C, H, W] and ``w`` [M, C/group, kH, kW].

    Accumulates in ``acc`` (int64 for the integer ops: exact, the caller wraps to int32).
    """
    cols = windows(x.astype(acc), w.shape[2:], strides, dilations, pads, fill, auto_pad)
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    outs = []
    for g in range(group):
        part = cols[:, g * cg:(g + 1) * cg]  # [N, cg, kH, kW, OH, OW]
        wg = w[g * mg:(g + 1) * mg].astype(acc)  # [mg, cg, kH, kW]
        outs.append(np.tensordot(wg, part, axes=([1, 2, 3], [1, 2, 3])))  # [mg, N, OH, OW]
    return np.concatenate(outs, axis=0).transpose(1, 0, 2, 3)


def maxpool(x: np.ndarray, kernel, strides, dilations, pads, auto_pad="NOTSET",
            ceil_mode=0) -> np.ndarray:
    """N-d max pooling; padding holds the dtype's minimum (or -inf) so it never wins."""
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    cols = windows(x, kernel, strides, dilations, pads, fill, auto_pad, ceil_mode)
    return cols.max(axis=tuple(range(2, 2 + len(kernel))))


def im2col(x: np.ndarray, kernel, strides, dilations, pads, fill) -> np.ndarray:
    """``[N, C, H, W] -> [N, OH*OW, C*kH*kW]``, columns ordered (c, kh, kw)."""
    cols = windows(x, kernel, strides, dilations, pads, fill)  # [N, C, kH, kW, OH, OW]
    n, c, kh, kw, oh, ow = cols.shape
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n, oh * ow, c * kh * kw)


def avgpool(x: np.ndarray, kernel, strides, dilations, pads, auto_pad="NOTSET", ceil_mode=0,
            count_include_pad=0, acc=np.float64) -> np.ndarray:
    """N-d average pooling of float ``x`` as ONNX AveragePool defines it.

    The divisor of a window counts its input elements, plus its explicit (or ``auto_pad``)
    padding when ``count_include_pad`` is set; never the overhang that ``ceil_mode`` adds past
    the padding (:func:`window_sums`). Returns ``acc``.
    """
    sums, counts = window_sums(x, kernel, strides, dilations, pads, auto_pad, ceil_mode,
                               count_include_pad, acc)
    return sums / counts.astype(acc)


def window_sums(x: np.ndarray, kernel, strides, dilations, pads, auto_pad="NOTSET",
                ceil_mode=0, count_include_pad=0, acc=np.float64
                ) -> tuple[np.ndarray, np.ndarray]:
    """The sum of each average-pool window of ``x`` in ``acc``, and its divisor.

    Sums one kernel position after the other in row-major order (as onnxruntime's loops do,
    so a float32 ``acc`` rounds as they do; an int64 ``acc`` is exact for integer ``x``).
    Padding adds 0. The divisors (int64, shaped ``[1, 1, *out]``) are as
    :func:`avgpool` says.
    """
    spatial = x.shape[2:]
    out, begin, end = shapes.window(spatial, kernel, strides, dilations, pads, auto_pad,
                                    ceil_mode)
    cols = windows(x.astype(acc), kernel, strides, dilations, pads, 0, auto_pad, ceil_mode)
    sums = np.zeros((*x.shape[:2], *out), acc)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        sums += cols[(slice(None), slice(None), *offsets)]
    # The divisor: a window over a marker that is 1 on the input, count_include_pad on the
    # padding and 0 (windows' fill) on the ceil_mode overhang.
    marker = np.pad(np.ones((1, 1, *spatial), np.int64),
                    [(0, 0), (0, 0), *zip(begin, end, strict=True)],
                    constant_values=int(bool(count_include_pad)))
    counts = windows(marker, kernel, strides, dilations, (0,) * (2 * len(kernel)), 0,
                     "NOTSET", ceil_mode).sum(axis=tuple(range(2, 2 + len(kernel))))
    return sums, counts[(slice(None), slice(None), *(slice(0, o) for o in out))]
