"""The DRAM port the load engine and the store unit share, as :class:`~fusion.cost.machine.
Machine` prices it (:mod:`fusion.cost.memory` has the costs; ``docs/memory.md`` the rules).

The adapter gives writes the port, so a drain's stores cut into the LOAD requesting then,
whose requests (and all after them) end later by what the stores cost; a drain while no load
requests is paid by the next LOAD that requests before it begins, for the share still going
on when that LOAD starts. A LOAD's first word costs what its relation to the read before
does: it continues it, switches to a row open in another bank, or activates another row of
a bank. A walk of a program knows the addresses (the banks and rows each store and LOAD fall
in, and the rows left open); a walk of a template knows only which register a LOAD reads
through.
"""

from __future__ import annotations

from typing import Any

#: Cycles between one drain's stores and the next's within which the controller is still
#: writing (no new turn from reads): measured, back-to-back EPIPASSes pay one turn.
JOIN_GAP = 8
#: Drains kept waiting for a load to pay for their writes (older ones are long done).
PENDING = 16


class SharedPort:
    """The shared port's rules, mixed into :class:`~fusion.cost.machine.Machine` (whose
    ``memory``, load times and DRAM state they read and move)."""

    memory: Any
    loads: int
    req_from: int
    dma: int
    dma_take: int
    dma_issue: int
    last_write: int
    seq: int
    pending: list[tuple[int, int, float]]
    read: tuple | None
    open_rows: dict[int, int]
    last_source: object
    loads_done: list[int]
    rows_started: list[int]
    accesses: list[tuple[str, tuple]]

    def _writes(self, first: int, last: int, words: float, *, spacing: float,
                joined: bool, out: int | None) -> None:
        """A drain's ``words`` writes, from ``first`` to ``last``. The adapter gives writes
        the port, so a LOAD requesting then loses what they cost it
        (:meth:`~fusion.cost.memory.MemoryModel.write_cut_cycles`): its requests, and all
        after them, end that much later. Writes while no load requests are paid by the next
        load requesting before they begin, for the part still going on when it starts (a
        short load may be done requesting before them). Rows narrower than a word come a
        word every ``spacing`` cycles, each word a turn of its own; wider ones stream, one
        turn a drain (none when it follows the drain before without a gap)."""
        self.last_write = last
        f = self.memory.figures
        same = 1 / f.banks  # the bank of the writes against the reads': unknown
        if out is not None:
            bank, row = self._bank_row(out)
            if self.read is not None and self.read[0] is not None:
                reading = self._reading(first)
                same = float(reading is not None and reading[0] == bank and reading[1] != row)
            self.open_rows[bank] = row
            self.accesses.append(("store", (out, words, first, last)))
        cost = self.memory.write_cut_cycles(words, spacing=spacing, turn=not joined,
                                            same_bank=same)
        if self.loads and self.req_from <= first < self.dma_take:
            self._delay_loads(first, round(cost))
        else:
            self.pending = (self.pending + [(first, last, cost)])[-PENDING:]

    def _bank_row(self, addr: int) -> tuple[int, int]:
        return self.memory.figures.bank_row(addr)

    def _reading(self, cycle: int) -> tuple[int, int] | None:
        """Bank and row of the word the newest load requests at ``cycle`` (None: it is not
        requesting then)."""
        addr, count, length, stride, start, span = self.read
        words = count * length
        if not start <= cycle < start + span:
            return None
        i = min(words - 1, (cycle - start) * words // max(1, span))
        return self._bank_row(addr + (i // length) * stride + i % length)

    def _delay_loads(self, cycle: int, d: int) -> None:
        """Every load request from ``cycle`` on, and what follows them, ``d`` cycles later."""
        self.dma_take += d
        self.dma_issue += d
        self.dma += d
        self.loads_done = [t + d if t >= cycle else t for t in self.loads_done]
        self.rows_started = [t + d if t >= cycle else t for t in self.rows_started]
        if self.read is not None:
            a, c, n, st, start, span = self.read
            self.read = (a, c, n, st, start, span + d)

    def _relation(self, source: object, addr: int | None) -> str:
        """How a LOAD's first word relates to the read before (:meth:`~fusion.cost.memory.
        MemoryModel.first_extra`)."""
        if self.read is None:
            return "continues"  # the first load: measured as a sequential read
        prev = self.read
        if addr is not None and prev[0] is not None:
            a, c, n, st = prev[:4]
            if addr == a + (c - 1) * st + n:
                return "continues"
            bank, row = self._bank_row(addr)
            return "switch" if self.open_rows.get(bank) == row else "activate"
        if source is not None and source == self.last_source:
            return "continues"
        return "unknown"

    def _opened(self, addr: int, count: int, length: int, stride: int) -> None:
        """Record the rows a load leaves open (the last it touched in each bank)."""
        wpr = self.memory.figures.words_per_row
        for s in range(count) if count <= 4096 else (0, count - 1):
            start = addr + s * stride
            for page in range(start // wpr, (start + length - 1) // wpr + 1):
                bank, row = self._bank_row(page * wpr)
                self.open_rows[bank] = row

    def done(self) -> int:
        """The cycle the kernel is done once its final WAIT and HALT have retired: the
        cycle after, and on a DRAM port no sooner than the adapter has settled after the
        last store."""
        if self.memory is None:
            return self.seq + 1
        return max(self.seq + 1, self.last_write + round(self.memory.figures.write_settle))
