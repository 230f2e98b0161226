"""The super tiles of a GEMM kernel, in program order, compressed into repetitions.

A super tile (a *step*) is ``(loads, tme, tne, kte, last)``: the operand blocks it loads
(each ``(bytes, row_bytes, segments)``, A before B), its extent in row and column blocks, its
k tile, and whether it is the last k tile (so its tiles drain). As in ``gemm.j2``, the loop
order puts row groups (``mn``) or column groups (``nm``) outermost, k chunks innermost, and a
block still resident from the previous step is not loaded again: with one k chunk, the
outer operand loads at the first step of each outer iteration, and the inner operand every
step unless there is one inner group (then it stays from the first iteration on).

A kernel can have tens of thousands of steps, but only a few *kinds* of outer iteration (the
first, the full ones, a ragged last one) and, inside one, runs of equal steps. The schedule
is therefore returned as nested repetitions, which :meth:`fusion.cost.machine.Machine.repeat`
walks in time independent of the step count.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import Tiling

Load = tuple[int, int, int]
Step = tuple[tuple[Load, ...], int, int, int, bool]
Pair = tuple[Step, Step]
#: ``[(block of (step, next step) pairs, repetitions), ...]`` inside one outer iteration.
Inner = list[tuple[tuple[Pair, ...], int]]


def blocks(items: Sequence, max_period: int = 16) -> list[tuple[tuple, int]]:
    """``items`` as consecutive repetitions of short blocks: ``[(block, count), ...]``.

    K chunks make a step sequence periodic (chunk 0, 1, ..., last, and again) rather than
    constant, so repetitions of every period up to ``max_period`` are tried and the one that
    covers the most items wins.
    """
    items = list(items)
    out: list[tuple[tuple, int]] = []
    i, n = 0, len(items)
    while i < n:
        best, best_p = 1, 1
        for p in range(1, min(max_period, n - i) + 1):
            count = 1
            while items[i + count * p:i + (count + 1) * p] == items[i:i + p]:
                count += 1
            if count > 1 and count * p > best * best_p:
                best, best_p = count, p
        out.append((tuple(items[i:i + best_p]), best))
        i += best * best_p
    return out


def _runs(items: Sequence) -> list[tuple[object, int]]:
    out: list[tuple[object, int]] = []
    for item in items:
        if out and out[-1][0] == item:
            out[-1] = (item, out[-1][1] + 1)
        else:
            out.append((item, 1))
    return out


def _sizes(total: int, size: int) -> list[int]:
    return [min(size, total - start) for start in range(0, total, size)]


def schedule(dims: GemmDims, tiling: Tiling) -> tuple[list[tuple[Inner, int]], Step, Step]:
    """The super tiles of ``tiling`` (resolved) on ``dims``.

    Returns
    -------
    runs : list of (Inner, int)
        ``(inner, count)``: ``count`` consecutive outer iterations that each run the pairs
        of ``inner`` (a super tile with the one after it: double buffered, a step issues
        its successor's loads). The last super tile, which has no successor, is left out.
    first, last : Step
        The first super tile (its loads are the program's prologue) and the last one.
    """
    return _schedule(dims.R, dims.C, dims.Mb, dims.Nb, dims.Kp, tiling)


@cache
def _schedule(R: int, C: int, Mb: int, Nb: int, Kp: int,  # noqa: N803
              t: Tiling) -> tuple[list[tuple[Inner, int]], Step, Step]:
    kt = t.kt or Kp
    mn = t.order == "mn"
    outer, inner = (_sizes(Mb, t.tm), _sizes(Nb, t.tn)) if mn else (
        _sizes(Nb, t.tn), _sizes(Mb, t.tm))
    chunks = _sizes(Kp, kt)
    kc = len(chunks)

    @cache
    def iteration(first: bool, so: int) -> tuple[Step, ...]:
        steps = []
        for ii, si in enumerate(inner):
            tme, tne = (so, si) if mn else (si, so)
            for c, kte in enumerate(chunks):
                outer_new = kc > 1 or ii == 0
                inner_new = kc > 1 or len(inner) > 1 or first
                a_new, b_new = (outer_new, inner_new) if mn else (inner_new, outer_new)
                loads = ([(tme * kte * R, R, tme)] if a_new else []) + (
                    [(tne * kte * C, C, tne)] if b_new else [])
                steps.append((tuple(loads), tme, tne, kte, c == kc - 1))
        return tuple(steps)

    kinds = [(o == 0, so) for o, so in enumerate(outer)]
    nexts = [*kinds[1:], None]
    runs: list[tuple[Inner, int]] = []
    for (kind, nxt), count in _runs(list(zip(kinds, nexts, strict=True))):
        steps = iteration(*kind)
        succ = steps[1:] + ((iteration(*nxt)[0],) if nxt is not None else ())
        pairs = list(zip(steps, succ, strict=False))
        runs.append((blocks(pairs, max(16, kc)), count))
    return runs, iteration(*kinds[0])[0], iteration(*kinds[-1])[-1]


def steps(dims: GemmDims, tiling: Tiling) -> list[Step]:
    """Every super tile in order (for tests and reports; :func:`schedule` is compact)."""
    runs, _, last = schedule(dims, tiling)
    out: list[Step] = []
    for inner, count in runs:
        for _ in range(count):
            for block, reps in inner:
                out.extend(step for _ in range(reps) for step, _ in block)
    return [*out, last]
