"""One board design: a variant on a board at a clock and baud rate, and its digest.

The digest names the design a bitstream was built from. The system on chip holds it in its
identity region (:mod:`hwgen.board.soc`), the board folder records it (``board.json``), and the
host runtime reads it from the board before anything else: a board running another bitstream
than the folder's is refused before a byte of a model is written.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path

from hwgen.board.boards import Board
from hwgen.config import VariantConfig
from hwgen.gateware.sources import gateware_digest
from hwgen.platform import PlatformConfig

#: Bumped when what the digest covers changes.
DESIGN_FORMAT = 1
#: The packages whose code becomes part of the bitstream.
GATEWARE_PACKAGES = ("amaranth", "amaranth-boards", "litex", "litedram", "migen")


#: The port width (bytes) of a DDR3 board's variant: the controller's word (BL8 of x16).
DDR3_PORT_BYTES = 16

#: The modules of this package that make the board's gateware.
BOARD_GATEWARE = ("soc.py", "top.py", "pll.py")


def board_gateware_digest() -> str:
    """A hash of :data:`BOARD_GATEWARE` (16 hex digits)."""
    h = hashlib.sha256()
    for name in BOARD_GATEWARE:
        h.update(name.encode())
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class BoardDesign:
    """A variant on a board.

    Attributes
    ----------
    config : VariantConfig
    board : Board
    clock_hz : int
        The system clock (the PLL's output).
    baud : int
        The UART's bit rate.
    """

    config: VariantConfig
    board: Board
    clock_hz: int
    baud: int

    def __post_init__(self) -> None:
        if self.board.memory == "ddr3" and self.config.port_bytes != DDR3_PORT_BYTES:
            raise ValueError(
                f"the {self.board.name}'s DDR3 controller reads {DDR3_PORT_BYTES}-byte words; a "
                f"{self.config.port_bytes}-byte port would go through LiteDRAM's up-converter, "
                f"which keeps one read in flight (about ten times the cycles a byte, "
                f"docs/boards.md): build a variant with +port{DDR3_PORT_BYTES}")
        if not isinstance(self.baud, int) or not 9600 <= self.baud <= self.clock_hz // 8:
            raise ValueError(f"the baud rate must be from 9600 to an eighth of the "
                             f"{self.clock_hz / 1e6:g} MHz clock ({self.clock_hz // 8}), not "
                             f"{self.baud!r}")

    @property
    def platform(self) -> PlatformConfig:
        """The memory as the accelerator-only simulation models it (same part, same clock)."""
        return PlatformConfig(memory=self.board.memory, module=self.board.dram_module,
                              clock_hz=self.clock_hz, rate=self.board.dram_rate)

    def identity(self) -> dict[str, object]:
        """What the digest covers."""
        versions = {}
        for dist in GATEWARE_PACKAGES:
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                versions[dist] = None
        return {"format": DESIGN_FORMAT, "variant": self.config.key(),
                "board": self.board.name, "clock_hz": self.clock_hz, "baud": self.baud,
                "gateware_digest": gateware_digest(), "board_gateware": board_gateware_digest(),
                "versions": versions}

    def digest(self) -> str:
        """The hex SHA-256 of :meth:`identity`."""
        text = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def ident_words(self) -> list[int]:
        """The digest as eight 32-bit words, first hex digits first."""
        d = self.digest()
        return [int(d[i:i + 8], 16) for i in range(0, 64, 8)]
