"""A model of a DRAM port, for the analytical model's loads and stores (issues 12 and 13).

On the ideal memory a LOAD requests a word every ``gap`` cycles (the load engine's gearbox
rate) and its data comes ``port_latency`` cycles later. Behind a LiteDRAM controller
(:mod:`hwgen.platform`, ``docs/memory.md``) these things change, and this module prices each
from the port's measured figures (:class:`hwgen.platform.PortFigures`), nothing fitted to
kernels:

- **row-buffer locality**: each word of a LOAD's ``count`` segments of ``len`` words at
  ``stride`` is classified against the word before it: the next address or the same DRAM row
  (``sequential``), another bank (``bank_stride``: one port waits for the previous bank's
  data, the bank lock), or another row of the same bank (``row_conflict``). A word then takes
  the larger of the engine's ``gap`` and its class's cycles. The first word of a LOAD costs
  what its relation to the read before does (:meth:`MemoryModel.first_extra`).
- **stores sharing the port**: stores cut into the LOAD requesting then
  (:meth:`MemoryModel.write_cut_cycles`; the rules of when are
  :mod:`fusion.cost.shared_port`'s).
- **latency**: the mean sequential read latency replaces ``port_latency``.
- **refresh, as a rate**: the port is held ``refresh_hold`` cycles every tREFI (halved when
  hot), so the memory's cycles stretch by ``1 / (1 - share)``: a LOAD's whole span of
  requests, also where the engine requests slower than the port serves (the engine never
  makes up a request a refresh cost it). The characterized figures were measured with the
  normal refresh running; its share is taken out of them first.

Within a LOAD the DRAM row a word falls in is counted from address 0: a LOAD's own pattern,
not its alignment, decides its cost (the walk of a built program knows the banks of its
LOADs and stores, :mod:`fusion.cost.shared_port`). Left out (the gap a learned model must
close): latency growing with queued row misses, requests refused while credits run out, and
the controller's queues.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hwgen.platform import PlatformConfig, PortFigures


@dataclass(frozen=True)
class MemoryModel:
    """The per-word costs of one platform's port at one port width.

    Parameters
    ----------
    figures : PortFigures
        The port as characterized (normal refresh).
    refresh_divisor : int
        What tREFI is divided by (2 when hot).
    """

    figures: PortFigures
    refresh_divisor: int = 1

    @classmethod
    def for_platform(cls, platform: PlatformConfig | None,
                     port_bytes: int) -> MemoryModel | None:
        """The model of ``platform``'s port at ``port_bytes``; None for the ideal memory (or
        no platform), whose timing the machine already has exactly.

        Raises
        ------
        ValueError
            A DRAM port that was not characterized (:meth:`PlatformConfig.port_figures`).
        """
        if platform is None or not platform.is_dram:
            return None
        return cls(platform.port_figures(port_bytes), platform.refresh_divisor)

    # -- the costs -----------------------------------------------------------------------

    @property
    def _measured_share(self) -> float:
        f = self.figures
        return f.refresh_hold / f.refresh_interval

    @property
    def refresh_share(self) -> float:
        """Fraction of cycles refresh holds the controller on this platform."""
        f = self.figures
        return f.refresh_hold * self.refresh_divisor / f.refresh_interval

    def _clean(self, measured: float) -> float:
        """A characterized figure with its normal refresh taken out."""
        return measured * (1 - self._measured_share)

    @property
    def read_latency(self) -> int:
        """Cycles from a read accepted to its data (the sequential mean, rounded up)."""
        return -(-int(self.figures.read_latency * 1000) // 1000)

    def word_costs(self) -> tuple[float, float, float]:
        """Cycles a read of each class takes with no refresh: sequential, bank change, row
        conflict."""
        f = self.figures
        return self._clean(f.sequential), self._clean(f.bank_stride), self._clean(f.row_conflict)

    def load_cycles(self, count: int, length: int, stride: int, gap: int,
                    first_extra: float = 0.0) -> tuple[int, int]:
        """``(first, rest)``: cycles before a LOAD's first request (after the previous load's
        last: a sequential read and ``first_extra``, :meth:`first_extra`), and from its
        first request to its last, for ``count`` segments of ``length`` words ``stride``
        apart requested at most one every ``gap`` cycles."""
        return _load_cycles(self, count, length, stride, gap, first_extra)

    def load_classes(self, count: int, length: int, stride: int) -> tuple[int, int, int]:
        """:func:`classify` of a LOAD's words after its first, on this port's rows and
        banks."""
        return _classes(count, length, stride, self.figures.words_per_row, self.figures.banks)

    def first_extra(self, relation: str) -> float:
        """Cycles beyond a sequential read a LOAD's first word takes, by how it relates to
        the port's previous read: ``"continues"`` it (the next address: nothing),
        ``"switch"`` to a row already open in another bank, ``"activate"`` a row of a bank
        that has another one open, or ``"unknown"`` (the walk does not know the regions:
        a switch, or with one chance in ``banks`` an activation)."""
        f = self.figures
        if relation == "continues":
            return 0.0
        if relation == "unknown":
            return ((f.banks - 1) * f.load_switch + f.load_activate) / f.banks
        return f.load_switch if relation == "switch" else f.load_activate

    def write_cut_cycles(self, words: float, *, spacing: float, turn: bool,
                         same_bank: float) -> float:
        """Cycles a LOAD's requests lose to ``words`` store words that cut into them (the
        adapter gives writes the port): the writes, the controller's turn to writes and back
        (``turn``: the first stores after a while without), and, for words that come one
        at a time, every ``spacing`` cycles (1: they stream), a turn each, dearer for the
        share ``same_bank`` that goes to another row of the bank being read (refresh
        included). The per-word turns are measured at spacings 2 and 4 and taken as linear
        in the spacing between, and beyond up to a whole turn a word."""
        f = self.figures
        if spacing <= 1:
            extra = 0.0
        else:
            def at(two: float, four: float) -> float:
                return max(0.0, (two * (4 - spacing) + four * (spacing - 2)) / 2)

            other = min(at(f.write_word, f.write_word_spaced), max(f.write_turn, f.write_word))
            same = at(f.write_word_same, f.write_word_same_spaced)
            extra = same_bank * same + (1 - same_bank) * other
        return ((words * self._clean(f.write) + turn * f.write_turn + words * extra)
                / (1 - self.refresh_share))

    def store_cycles(self, words: float) -> float:
        """Cycles the port takes to write ``words`` consecutive words (refresh included)."""
        return words * self._clean(self.figures.write) / (1 - self.refresh_share)


def classify(count: int, length: int, stride: int, words_per_row: int,
             banks: int) -> tuple[int, int, int]:
    """How many of a LOAD's words after its first are sequential, change bank, or hit
    another row of the same bank, for ``count`` segments of ``length`` words ``stride``
    apart from address 0 (``ROW_BANK_COL``: a DRAM page of ``words_per_row`` words, pages
    dealt to the banks in turn)."""
    seq = bank = row = 0
    prev = None  # the previous word's address
    for s in range(count):
        start = s * stride
        if prev is not None:
            if start == prev + 1 or start // words_per_row == prev // words_per_row:
                seq += 1
            elif (start // words_per_row) % banks != (prev // words_per_row) % banks:
                bank += 1
            else:
                row += 1
        # inside a segment every word is the next address
        seq += length - 1
        prev = start + length - 1
    return seq, bank, row


_classes = functools.lru_cache(maxsize=4096)(classify)


@functools.lru_cache(maxsize=4096)
def _load_cycles(model: MemoryModel, count: int, length: int, stride: int,
                 gap: int, first_extra: float) -> tuple[int, int]:
    f = model.figures
    seq, bank, row = _classes(count, length, stride, f.words_per_row, f.banks)
    t_seq, t_bank, t_row = model.word_costs()
    stretch = 1 / (1 - model.refresh_share)
    # a refresh holds the port however often the engine requests, and the engine never
    # makes up a request it lost: the whole span of requests stretches, not only the words
    # the port is slower for than the engine
    rest = (seq * max(gap, t_seq) + bank * max(gap, t_bank) + row * max(gap, t_row)) * stretch
    first = max(gap, (t_seq + first_extra) * stretch)
    return round(first), round(rest)
