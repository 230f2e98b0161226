"""Hardware loops over a window kernel's repeated steps: items whose consecutive repeats
fold into ``li``/``bnzd`` loops (:func:`compress`), shared by the window convolution
(:mod:`fusion.kernels.conv.program`) and the window unit's kernels."""

from __future__ import annotations

from collections.abc import Sequence

#: Loop counters, innermost first (rows of an image, then images).
LOOP_REGS = ("r12", "r11")


def compress(steps: Sequence[list[dict]], prefix: str, *,
             counters: Sequence[str] = LOOP_REGS) -> list[dict]:
    """The steps' items, with consecutive repeats folded into hardware loops.

    Level by level (one level per loop counter of ``counters``, innermost first): at each
    position the period (1 to 8 units) covering the most units is taken, and a unit repeated
    at least twice becomes a loop. Units at the first level are steps; at the next, the
    steps and loops the first left.
    """
    units: list[list[dict]] = [list(s) for s in steps]
    for counter in counters:
        out: list[list[dict]] = []
        i = 0
        while i < len(units):
            best = None
            for period in range(1, 9):
                unit = units[i:i + period]
                if len(unit) < period:
                    break
                times = 1
                while units[i + times * period:i + (times + 1) * period] == unit:
                    times += 1
                if times >= 2 and (best is None or times * period > best[0] * best[1]):
                    best = (times, period)
            if best is None:
                out.append(units[i])
                i += 1
                continue
            times, period = best
            body = [it for u in units[i:i + period] for it in u]
            out.append([{"kind": "loop", "counter": counter, "count": times, "body": body}])
            i += times * period
        units = out
    items = [it for u in units for it in u]
    return _labelled(items, prefix, [0])


def _labelled(items: list[dict], prefix: str, counter: list[int]) -> list[dict]:
    """The items with a unique label on every loop (given after folding, so that loops
    differing only by their label fold too)."""
    out = []
    for it in items:
        if it["kind"] == "loop":
            counter[0] += 1
            it = {**it, "label": f"{prefix}_loop{counter[0]}",
                  "body": _labelled(it["body"], prefix, counter)}
        out.append(it)
    return out


def instructions(items: Sequence[dict]) -> int:
    """Instruction words the items assemble to (an upper bound: before redundant ``li``s are
    dropped)."""
    n = 0
    for it in items:
        if it["kind"] == "loop":
            n += 2 + instructions(it["body"])
        elif it["kind"] == "load":
            n += 1 + 2 + (it["count"] > 1)
        elif it["kind"] != "comment":
            n += 1
    return n
