"""Shape arithmetic shared by the op catalog (:mod:`fusion.ir.ops`) and the executor.

Pure functions on tuples of ints, so that shape inference and execution cannot disagree about
padding, output sizes or broadcasting. They raise :class:`~fusion.ir.graph.GraphError` with a
message naming the problem; callers prefix the node name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusion.ir.graph import GraphError

Shape = tuple[int, ...]


def broadcast(a: Sequence[int], b: Sequence[int]) -> Shape:
    """The numpy (and ONNX multidirectional) broadcast of two shapes."""
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + tuple(a)),
                    reversed((1,) * (len(a) - len(b)) + tuple(b)), strict=True):
        if x != y and 1 not in (x, y):
            raise GraphError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def matmul(a: Sequence[int], b: Sequence[int]) -> Shape:
    """The shape of ``numpy.matmul(a, b)`` (1-D operands promoted and dropped as numpy does)."""
    if not a or not b:
        raise GraphError("matmul operands must have at least one dimension")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise GraphError(f"matmul inner dimensions differ: {tuple(a)} @ {tuple(b)}")
    out = (*broadcast(a2[:-2], b2[:-2]), a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def axis(value: int, rank: int, what: str = "axis") -> int:
    """Normalize a possibly negative ``value`` into ``0..rank-1``."""
    if not -rank <= value < rank:
        raise GraphError(f"{what} {value} is out of range for rank {rank}")
    return value % rank


def crop_ends(spatial: Sequence[int], pads: Sequence[int]) -> tuple[Shape, Shape]:
    """``spatial`` less the columns (rows) a negative end pad crops, and ``pads`` with those
    ends 0: hwgen's ``maxpool`` reads an end pad below 0 as that many trailing elements
    dropped, a window never reaching them (a convolution that computes whole blocks of
    output columns writes more than its pool reads: :mod:`fusion.compiler.whole_rows`).
    ONNX's own pads are never negative (:func:`window` refuses them)."""
    rank = len(spatial)
    pads = tuple(pads)
    if len(pads) != 2 * rank or any(p < 0 for p in pads[:rank]):
        raise GraphError(f"pads {pads} must be {2 * rank} values (all begins, then all ends), "
                         f"the begins non-negative")
    cropped = tuple(n + min(e, 0) for n, e in zip(spatial, pads[rank:], strict=True))
    if any(n < 1 for n in cropped):
        raise GraphError(f"end pads {pads[rank:]} crop all of the input {tuple(spatial)}")
    return cropped, (*pads[:rank], *(max(e, 0) for e in pads[rank:]))


def window(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
) -> tuple[Shape, Shape, Shape]:
    """Output size and explicit padding of a sliding window (conv, pooling, im2col).

    Parameters
    ----------
    spatial, kernel : sequence of int
        Input spatial sizes and kernel sizes (same length).
    strides, dilations : sequence of int, optional
        Default to ones.
    pads : sequence of int, optional
        ONNX order: all begins, then all ends. Ignored unless ``auto_pad`` is ``NOTSET``.
    auto_pad : {"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"}
    ceil_mode : int
        Pooling's ``ceil_mode``: round the output size up, but never start a window wholly in
        the end padding (ONNX's rule).

    Returns
    -------
    out, pads_begin, pads_end : tuple of int
    """
    rank = len(spatial)
    strides = tuple(strides or (1,) * rank)
    dilations = tuple(dilations or (1,) * rank)
    if len(kernel) != rank or len(strides) != rank or len(dilations) != rank:
        raise GraphError(f"kernel {tuple(kernel)}, strides {strides} and dilations {dilations} "
                         f"must each have one entry per spatial dimension ({rank})")
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or any(k < 1 for k in kernel):
        raise GraphError("kernel sizes, strides and dilations must be positive")
    eff = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(math.ceil(n / s) for n, s in zip(spatial, strides, strict=True))
        total = [max((o - 1) * s + e - n, 0)
                 for o, s, e, n in zip(out, strides, eff, spatial, strict=True)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return out, tuple(begin), tuple(end)
    if auto_pad == "VALID":
        begin = end = (0,) * rank
    elif auto_pad == "NOTSET":
        pads = tuple(pads or (0,) * (2 * rank))
        if len(pads) != 2 * rank or any(p < 0 for p in pads):
            raise GraphError(f"pads {pads} must be {2 * rank} non-negative values "
                             f"(all begins, then all ends)")
        begin, end = pads[:rank], pads[rank:]
    else:
        raise GraphError(f"auto_pad {auto_pad!r} is not one of NOTSET, VALID, SAME_UPPER, "
                         f"SAME_LOWER")
    out = []
    for n, e, s, b, f in zip(spatial, eff, strides, begin, end, strict=True):
        span = n + b + f - e
        if span < 0:
            raise GraphError(f"the window ({e}) is larger than the padded input ({n + b + f})")
        size = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (size - 1) * s >= n + b:
            size -= 1  # the last window would start in the end padding
        out.append(size)
    return tuple(out), tuple(begin), tuple(end)


def reshape(shape: Sequence[int], target: Sequence[int], allowzero: int = 0) -> Shape:
    """ONNX Reshape: ``0`` copies the input dimension (unless ``allowzero``), ``-1`` is inferred."""
    target = [int(t) for t in target]
    if not allowzero:
        for i, t in enumerate(target):
            if t == 0:
                if i >= len(shape):
                    raise GraphError(f"reshape target {tuple(target)} copies dimension {i}, "
                                     f"which input shape {tuple(shape)} does not have")
                target[i] = shape[i]
    size = math.prod(shape)
    if target.count(-1) > 1 or any(t < -1 for t in target):
        raise GraphError(f"reshape target {tuple(target)} may have one -1 and no other negatives")
    if -1 in target:
        rest = math.prod(t for t in target if t != -1)
        if rest == 0 or size % rest:
            raise GraphError(f"cannot reshape {tuple(shape)} into {tuple(target)}")
        target[target.index(-1)] = size // rest
    if math.prod(target) != size:
        raise GraphError(f"cannot reshape {tuple(shape)} ({size} elements) into {tuple(target)}")
    return tuple(target)


def flatten(shape: Sequence[int], ax: int) -> Shape:
    """ONNX Flatten: the dimensions before ``ax`` and from ``ax`` on, each multiplied out."""
    rank = len(shape)
    if not -rank <= ax <= rank:
        raise GraphError(f"flatten axis {ax} is out of range for rank {rank} ({-rank}..{rank})")
    ax = ax + rank if ax < 0 else ax
    return math.prod(shape[:ax]), math.prod(shape[ax:])


def transpose(shape: Sequence[int], perm: Sequence[int] | None) -> Shape:
    """The shape after permuting axes; ``perm`` None reverses them."""
    perm = tuple(reversed(range(len(shape)))) if perm is None else tuple(perm)
    if sorted(perm) != list(range(len(shape))):
        raise GraphError(f"perm {perm} is not a permutation of the {len(shape)} axes")
    return tuple(shape[p] for p in perm)
