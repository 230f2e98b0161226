"""Where a port word lies in a DRAM model's bank memories: scatter for ``$readmemh``, gather
after ``$writememh``.

``layout`` is :meth:`sim.memory.BoardMemory.testbench_header`: ``ratio`` controller words a
port word (lowest bits first), ``controller_bytes`` each, ``words_per_row`` controller words
a row of one bank, ``banks``. Controller word ``c`` is column ``c % words_per_row``, bank
``(c // words_per_row) % banks``, row above, at index ``(row * words_per_row + column) *
stride`` of its bank's memory (LiteDRAM's ``ROW_BANK_COL``; ``stride`` is 2 for the ECP5's 1:2
PHY, whose model uses every other word). Imported inside the simulator: numpy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def locate(first_word: int, words: int, layout: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Bank and index of each controller word of port words ``first_word`` onwards, in
    order (``words * ratio`` of each)."""
    ratio, wpr, banks = layout["ratio"], layout["words_per_row"], layout["banks"]
    c = np.arange(first_word * ratio, (first_word + words) * ratio, dtype=np.int64)
    column = c % wpr
    bank = (c // wpr) % banks
    row = c // (wpr * banks)
    return bank, (row * wpr + column) * layout["stride"]


def _hex(rows: np.ndarray) -> list[str]:
    """Controller words (``n x bytes``, little-endian) as ``$readmemh`` words."""
    text = np.ascontiguousarray(rows[:, ::-1]).tobytes().hex()
    width = 2 * rows.shape[1]
    return [text[i:i + width] for i in range(0, len(text), width)]


def bank_files(segments: list[tuple[int, np.ndarray]], port_bytes: int,
               layout: dict[str, Any]) -> list[str]:
    """The ``$readmemh`` text of each bank (bank order) holding ``segments`` (port-word
    address, bytes): each run of consecutive indices after an ``@index`` line."""
    per_bank: list[list[str]] = [[] for _ in range(layout["banks"])]
    cb = layout["controller_bytes"]
    for addr, data in segments:
        data = np.asarray(data, dtype=np.uint8)
        words = len(data) // port_bytes
        if not words:
            continue
        bank, index = locate(addr, words, layout)
        lines = _hex(data.reshape(-1, cb))
        for b in range(layout["banks"]):
            chosen = np.flatnonzero(bank == b)
            if not len(chosen):
                continue
            idx = index[chosen]
            starts = np.flatnonzero(np.diff(idx, prepend=idx[0] - 2) != 1)
            out = per_bank[b]
            start_set = set(starts.tolist())
            for k, (i, pos) in enumerate(zip(idx.tolist(), chosen.tolist(), strict=True)):
                if k in start_set:
                    out.append(f"@{i:x}")
                out.append(lines[pos])
    # a bank with no words still gets a file: the top reads every bank's
    return ["\n".join(lines) + "\n" if lines else "// no words\n" for lines in per_bank]


def bank_ranges(first_word: int, words: int, layout: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """For each bank a region touches, the lowest and highest index of its words there."""
    bank, index = locate(first_word, words, layout)
    out = {}
    for b in np.unique(bank).tolist():
        idx = index[bank == b]
        out[b] = (int(idx.min()), int(idx.max()))
    return out


def gather(first_word: int, words: int, layout: dict[str, Any],
           dumps: dict[int, tuple[int, np.ndarray]]) -> np.ndarray:
    """The region's bytes from bank dumps ``bank -> (lowest index, n x controller_bytes
    words)`` as :func:`bank_ranges` asked for them."""
    bank, index = locate(first_word, words, layout)
    cb = layout["controller_bytes"]
    out = np.empty((len(bank), cb), dtype=np.uint8)
    for b, (lo, rows) in dumps.items():
        chosen = bank == b
        out[chosen] = rows[index[chosen] - lo]
    return out.reshape(-1)
