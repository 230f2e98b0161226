"""Read leveling of the ECP5's DDR3 PHY, done by the host over the bridge.

The ECP5's DDR3 PHY (LiteDRAM's ``ECP5DDRPHY``) captures each byte lane's read data with a
delay (0-7 taps) and a bitslip (0-3) that depend on the board's traces and the DRAM. LiteX's
BIOS finds them on a soft CPU (``liblitedram``'s ``sdram_read_leveling``); a board design
without a CPU has its host do the same through the PHY's registers:

for each byte lane, each bitslip and each delay, write a pseudo-random pattern through the
controller, read it back, and count it working when every byte of the lane came back and
the PHY saw the read's burst (``burstdet_seen``). The lane keeps the bitslip with the most
working delays (the BIOS's choice) and the middle of its longest run of working delays (the
BIOS centres its window the same way).

The simulated board has LiteDRAM's simulation PHY, which has no delays to level: this runs
on boards only (:attr:`hwgen.board.soc.SocVerilog.spec`'s ``dram.read_leveling`` is None in
a simulation build).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: 32-bit words of the test pattern (its bytes alternate between the two lanes of an x16
#: chip: a bus byte's lane is its address modulo 2).
PATTERN_WORDS = 64
#: Seeds of the patterns each setting is tried with (the BIOS tries three).
SEEDS = (42, 84, 36)


class LevelingFailed(RuntimeError):
    """A byte lane read back wrong at every delay and bitslip."""


@dataclass(frozen=True)
class LaneLevel:
    """What leveling chose for one byte lane.

    Attributes
    ----------
    lane : int
    bitslip, delay : int
        The settings left in the PHY.
    working : tuple of tuple of bool
        ``working[bitslip][delay]``: the scan.
    """

    lane: int
    bitslip: int
    delay: int
    working: tuple[tuple[bool, ...], ...]

    def to_dict(self) -> dict:
        """Plain JSON types, the scan as one string of ``#`` (working) and ``.`` a bitslip."""
        return {"lane": self.lane, "bitslip": self.bitslip, "delay": self.delay,
                "scan": ["".join("#" if w else "." for w in row) for row in self.working]}


def choose(working: Sequence[Sequence[bool]]) -> tuple[int, int]:
    """The bitslip with the most working delays (the first of equals), and the middle of
    its longest run of working delays (the lower middle of an even run).

    Raises
    ------
    LevelingFailed
        If no setting worked.
    """
    best = None
    for bitslip, row in enumerate(working):
        start, length, run_start = 0, 0, None
        for delay, ok in enumerate([*row, False]):
            if ok and run_start is None:
                run_start = delay
            elif not ok and run_start is not None:
                if delay - run_start > length:
                    start, length = run_start, delay - run_start
                run_start = None
        score = (sum(bool(w) for w in row), length)
        if length and (best is None or score > best[0]):
            best = (score, bitslip, start + (length - 1) // 2)
    if best is None:
        raise LevelingFailed("no delay and bitslip read back the pattern")
    return best[1], best[2]


class ReadLeveler:
    """Levels the reads of a board's DDR3 PHY.

    Parameters
    ----------
    write, read : callable
        The bridge: ``write(address, words)``, ``read(address, count) -> words``.
    csr : callable
        Register name -> byte address (LiteX's names: ``ddrphy_dly_sel`` ...).
    base : int
        The byte address of the DRAM's test words (the first :data:`PATTERN_WORDS`).
    lanes, bitslips, delays : int
        The PHY's byte lanes, bitslips and delay taps (``soc.json``'s
        ``dram.read_leveling``).
    """

    def __init__(self, write: Callable, read: Callable, csr: Callable[[str], int], base: int,
                 *, lanes: int, bitslips: int, delays: int):
        self._write, self._read, self._csr = write, read, csr
        self.base, self.lanes, self.bitslips, self.delays = base, lanes, bitslips, delays
        self._patterns = [np.random.default_rng(seed).integers(
            0, 1 << 32, PATTERN_WORDS, dtype=np.uint64).astype(np.uint32) for seed in SEEDS]

    def _act(self, lane: int, register: str) -> None:
        """Pulse ``register`` for ``lane`` alone; the lane's strobe buffer is paused while
        it is selected, so it is deselected again at once."""
        self._write(self._csr("ddrphy_dly_sel"), [1 << lane])
        self._write(self._csr(register), [1])
        self._write(self._csr("ddrphy_dly_sel"), [0])

    def _works(self, lane: int) -> bool:
        for pattern in self._patterns:
            self._write(self.base, pattern)
            self._write(self._csr("ddrphy_burstdet_clr"), [1])
            back = np.asarray(self._read(self.base, PATTERN_WORDS), np.uint32)
            seen = int(self._read(self._csr("ddrphy_burstdet_seen"), 1)[0])
            lane_bytes = slice(lane, None, 2)
            if (not seen >> lane & 1 or not np.array_equal(
                    pattern.view(np.uint8)[lane_bytes], back.view(np.uint8)[lane_bytes])):
                return False
        return True

    def level(self) -> list[LaneLevel]:
        """Scan every lane, leave each at its chosen settings, and say what they are.

        Raises
        ------
        LevelingFailed
            For a lane that read back wrong at every setting, naming it.
        """
        chosen = []
        for lane in range(self.lanes):
            scan = []
            self._act(lane, "ddrphy_rdly_dq_bitslip_rst")
            for _bitslip in range(self.bitslips):
                row = []
                self._act(lane, "ddrphy_rdly_dq_rst")
                for _delay in range(self.delays):
                    row.append(self._works(lane))
                    self._act(lane, "ddrphy_rdly_dq_inc")
                scan.append(tuple(row))
                self._act(lane, "ddrphy_rdly_dq_bitslip")
            try:
                bitslip, delay = choose(scan)
            except LevelingFailed:
                raise LevelingFailed(
                    f"DDR3 read leveling: byte lane {lane} read back wrong at every delay "
                    f"and bitslip; the DRAM does not answer as the design expects (is this "
                    f"the board the bitstream was built for, and is it powered?)") from None
            self._act(lane, "ddrphy_rdly_dq_bitslip_rst")
            for _ in range(bitslip):
                self._act(lane, "ddrphy_rdly_dq_bitslip")
            self._act(lane, "ddrphy_rdly_dq_rst")
            for _ in range(delay):
                self._act(lane, "ddrphy_rdly_dq_inc")
            chosen.append(LaneLevel(lane, bitslip, delay, tuple(scan)))
        return chosen
