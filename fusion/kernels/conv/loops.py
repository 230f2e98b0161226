"""Hardware loops over a window kernel's repeated steps: items whose consecutive repeats
fold into ``li``/``bnzd`` loops (:func:`compress`), shared by the window convolution
(:mod:`fusion.kernels.conv.program`) and the window unit's kernels."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Loop counters, innermost first (rows of an image, then images).
LOOP_REGS = ("r12", "r11")
#: Inside a loop over column chunks (:class:`ChunkLoop`, counter r11), the steps' counter.
STEP_REGS = ("r12",)


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
        elif it["kind"] == "load_regs":
            n += 2 + (it["count"] > 1)
        elif it["kind"] != "comment":
            n += 1
    return n


def least_instructions(items: Sequence[dict]) -> int:
    """Instruction words the items assemble to at the least: every ``li`` may be dropped as
    redundant (but a loop's trip count), every load keeps its LOAD. A program whose least
    exceeds the instruction memory need not be assembled to be refused."""
    n = 0
    for it in items:
        if it["kind"] == "loop":
            n += 2 + least_instructions(it["body"])
        elif it["kind"] not in ("comment", "li", "load_regs"):
            n += 1
    return n


class BiasRow:
    """How a column chunk's matmuls set r9, the epilogue row of column block ``nbl``'s bias
    (``group`` rows a column block). Unrolled: an ``li`` of ``(nb0 + nbl) * group``.
    In a :class:`ChunkLoop`, r9 is a chunk register: an ``addi`` moves it from the column
    block the last matmul named, and every step starts and ends at the chunk's last column
    block, so that equal steps (and chunks) have equal code."""

    def __init__(self, group: int, nb0: int, tn_c: int, looped: bool) -> None:
        self.group, self.nb0, self.tn_c, self.looped = group, nb0, tn_c, looped
        self.at = tn_c - 1

    def start(self) -> list[dict]:
        """The chunk's first items: looped, r9 from the last chunk's last column block (or
        the one before block 0, :meth:`ChunkLoop.items`) to this chunk's last."""
        if not self.looped:
            return []
        return [{"kind": "addi", "rd": "r9", "rs": "r9", "imm": self.tn_c * self.group}]

    def set(self, nbl: int) -> list[dict]:
        """The items pointing r9 at column block ``nbl`` of the chunk."""
        if not self.looped:
            return [{"kind": "li", "rd": "r9", "imm": (self.nb0 + nbl) * self.group}]
        delta, self.at = (nbl - self.at) * self.group, nbl
        return [{"kind": "addi", "rd": "r9", "rs": "r9", "imm": delta}] if delta else []


@dataclass(frozen=True)
class ChunkLoop:
    """A window convolution's column chunks of ``tn`` blocks (of ``Nb``) as one hardware
    loop (counter r11), the last, narrower chunk after it: for programs whose chunks,
    unrolled, exceed the instruction memory (a 3x3 convolution of 128 channels: one column
    block a chunk, each reloading its windows).

    A looped chunk's code is relative to three chunk registers: r13 its weights' word
    address, r15 its first output tile's, r9 its bias rows (:class:`BiasRow`); each chunk
    moves r13 and r15 on to the next (:meth:`advance`). The steps inside fold with r12
    alone (:data:`STEP_REGS`)."""

    Nb: int
    tn: int
    #: The loop's label (a program with several such loops gives each its own).
    label: str = "conv_chunks"

    @staticmethod
    def advance(b_words: int, out_delta: int) -> list[dict]:
        """A chunk's last items: r13 past its ``b_words`` words of weights, r15 by
        ``out_delta`` from its last step's output tile to the next chunk's first."""
        return [{"kind": "addi", "rd": "r13", "rs": "r13", "imm": b_words},
                {"kind": "addi", "rd": "r15", "rs": "r15", "imm": out_delta}]

    def items(self, b_addr: int, out_addr: int, group: int,
              chunk: Callable[[int, int], list[dict]]) -> list[dict]:
        """The body: the chunk registers' start, the loop over the whole chunks (``chunk(nb0,
        tn_c)`` builds one's items), then the last chunk when narrower."""
        full, rest = divmod(self.Nb, self.tn)
        items = [{"kind": "li", "rd": "r13", "imm": b_addr},
                 {"kind": "li", "rd": "r15", "imm": out_addr},
                 {"kind": "li", "rd": "r9", "imm": -group}]
        if full > 1:
            items.append({"kind": "loop", "counter": "r11", "count": full,
                          "label": self.label, "body": chunk(0, self.tn)})
        elif full:
            items += chunk(0, self.tn)
        if rest:
            items += chunk(full * self.tn, rest)
        return items
