"""The board's memory system: one frozen :class:`PlatformConfig` beside the variant.

The accelerator (:class:`hwgen.config.VariantConfig`) is the same bitstream on any board; the
memory behind its port is a property of the board. ``ideal`` is today's fixed-latency model;
``sdr`` and ``ddr3`` are a LiteDRAM controller with its simulation PHY (:mod:`sim.dram`),
generated from the module named here. Like the variant, a platform validates itself, has a
stable content hash naming its build folders, and is written into descriptors as plain JSON.
Like the rest of the contract, this module imports nothing of LiteDRAM: it names modules by
their LiteDRAM class names, and :mod:`sim.dram.generate` looks them up.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hwgen.config import check_fields, content_key

#: The memories a platform can have.
MEMORIES: tuple[str, ...] = ("ideal", "sdr", "ddr3")

#: LiteDRAM modules (class names of ``litedram.modules``) each DRAM memory accepts; the first
#: is the default. All have a 16-bit data bus (one chip).
MODULES: dict[str, tuple[str, ...]] = {
    "sdr": ("IS42S16160", "MT48LC16M16"),
    "ddr3": ("MT41K128M16", "MT41K64M16", "MT41K256M16"),
}

#: Controller clock to DRAM clock ratios each DRAM memory's PHY can have, as LiteDRAM spells
#: them; the first is the default. SDR runs the DRAM at the system clock. DDR3 runs it at four
#: times it (a 1:4 PHY, four DFI phases a cycle, as LiteDRAM's Xilinx PHYs) or at twice it
#: (1:2: the ECP5's DDR3 PHY, ``ECP5DDRPHY``, two phases a cycle, what DDR3 boards with an
#: ECP5 have).
RATES: dict[str, tuple[str, ...]] = {"sdr": ("1:1",), "ddr3": ("1:4", "1:2")}

#: DDR3 speed grades (MT/s) LiteDRAM has timings for on the modules of :data:`MODULES`.
DDR3_SPEEDGRADES: tuple[str, ...] = ("800", "1066", "1333", "1600")

#: Refresh settings: ``hot`` is DDR3's extended temperature range (above 85 C), which halves
#: the refresh interval tREFI (the same divisor applies to SDR, as a stress setting).
REFRESH: tuple[str, ...] = ("normal", "hot")

#: Controller clock range in Hz; DDR3's upper bound is its fastest grade at 1:4 (1600 MT/s).
CLOCK_RANGE: dict[str, tuple[int, int]] = {
    "ideal": (1_000_000, 1_000_000_000),
    "sdr": (10_000_000, 166_000_000),
    "ddr3": (50_000_000, 200_000_000),
}


@dataclass(frozen=True)
class PortFigures:
    """What one LiteDRAM native port does, as characterized (``sim.dram.characterize``,
    ``docs/memory.md``): the constants of the analytical model's memory terms
    (:mod:`fusion.cost.memory`). Measured with the controller's normal refresh, on streams
    of one pattern each; cycles are controller (= accelerator) cycles per port word.

    Attributes
    ----------
    sequential : float
        Cycles a read of consecutive words (the next word of the stream).
    bank_stride : float
        Cycles a read that changes bank every time: the bank lock of one port (the next bank
        is served once the previous bank's data is back).
    row_conflict : float
        Cycles a read to a new row of the same bank every time (precharge, activate, CAS).
    write : float
        Cycles a write of consecutive words.
    read_latency : float
        Mean cycles from a sequential read's command accepted to its data.
    refresh_hold : int
        Cycles one refresh holds the controller (measured; tRFC plus the precharge-all).
    refresh_interval : int
        tREFI in cycles at normal refresh (``hot`` divides it by
        :attr:`PlatformConfig.refresh_divisor`).
    words_per_row : int
        Port words in one DRAM row of one bank (the column bits of the port-word address).
    banks : int
        Banks; the bank bits sit just above the column bits (LiteDRAM's ``ROW_BANK_COL``).
    load_switch, load_activate : float
        Cycles beyond a sequential read that a LOAD's first word costs when the load before
        read another region: in a row already open in another bank, or in another row of a
        bank that has one open (measured on the accelerator, ``sim.dram_interplay``).
    write_turn : float
        Cycles a LOAD loses when stores cut into its requests after a while without any: the
        controller turns from reads to writes and back (``sim.dram_interplay``).
    write_word, write_word_same : float
        Cycles beyond a write each store word costs a LOAD when the words come one at a
        time, one every 2 cycles (the store unit packs two rows narrower than a word in
        each), to another bank or to another row of the bank being read: each is a turn of
        its own, cheap while the controller is already alternating, dear when it must close
        and open rows (``sim.dram_interplay``).
    write_word_spaced, write_word_same_spaced : float
        The same with a word every 4 cycles (four rows a word). Other spacings are
        interpolated (:meth:`fusion.cost.memory.MemoryModel.write_cut_cycles`).
    write_settle : float
        Cycles from the last store to the kernel's done (the adapter's idle settling).
    """

    sequential: float
    bank_stride: float
    row_conflict: float
    write: float
    read_latency: float
    refresh_hold: int
    refresh_interval: int
    words_per_row: int
    banks: int
    load_switch: float = 0.0
    load_activate: float = 0.0
    write_turn: float = 0.0
    write_word: float = 0.0
    write_word_same: float = 0.0
    write_word_spaced: float = 0.0
    write_word_same_spaced: float = 0.0
    write_settle: float = 0.0

    def bank_row(self, addr):  # noqa: ANN001, ANN201 - an int, or an array of them
        """The bank and the row of port-word address ``addr`` (``ROW_BANK_COL``: pages of
        :attr:`words_per_row` words dealt to the banks in turn); elementwise on arrays."""
        page = addr // self.words_per_row
        return page % self.banks, page // self.banks


#: The characterized ports, by (memory, rate, module, speedgrade, port bits, clock Hz): the
#: normal-refresh rows of ``docs/memory.md``'s table (``python -m sim.dram.characterize
#: --memory ddr3`` and ``--memory sdr --data-width 128 --reads 200000``), 100 MHz clock;
#: the figures of loads and stores sharing the port from ``python -m sim.dram_interplay`` on
#: the 8x8 variant of ``bench.platforms``, the ``_spaced`` ones on a 4x4 (negative ones,
#: within the noise of a slow port, as 0). The SDR port of 128 bits goes through LiteDRAM's
#: down-converter (eight 16-bit DRAM words a port word).
#: The SDR ports at 50 and 45 MHz are the ULX3S board's (``hwgen build --board ulx3s-85f``,
#: ``--clock-mhz 45`` for the 8x8): ``python -m sim.dram.characterize --memory sdr --clock-hz
#: 50000000 --data-width 32`` (and 64, and at 45000000) ``--reads 200000``; their load/store
#: interplay figures were not measured (0).
#: The DDR3 port at 1:2 and 50 MHz is the ECPIX-5 board's (``hwgen build --board
#: ecpix5-85f``): ``python -m sim.dram.characterize --memory ddr3 --rate 1:2 --module
#: MT41K256M16 --clock-hz 50000000 --data-width 128 --reads 200000``. Its refresh holds the
#: controller 75 cycles in 391 (19%): LiteDRAM counts the part's tRFC in the clocks of its
#: speed grade, 1.4 us here against the 260 ns the part needs, and the board's controller
#: does the same. Narrower ports go through LiteDRAM's up-converter, which keeps one
#: controller read in flight (6.6 cycles a 32-bit word, 12.2 a 64-bit one): a DDR3 board's
#: variant has a 16-byte port.
PORT_FIGURES: dict[tuple[str, str, str, str | None, int, int], PortFigures] = {
    ("ddr3", "1:4", "MT41K128M16", "800", 128, 100_000_000): PortFigures(
        sequential=1.100, bank_stride=12.03, row_conflict=8.29, write=1.118,
        read_latency=17.3, refresh_hold=22, refresh_interval=782, words_per_row=128,
        banks=8, load_switch=2.7, load_activate=5.12, write_turn=9.9, write_word=0.88,
        write_word_same=10.09, write_word_spaced=4.0, write_word_same_spaced=13.94,
        write_settle=22),
    ("ddr3", "1:4", "MT41K128M16", "1600", 128, 100_000_000): PortFigures(
        sequential=1.124, bank_stride=12.22, row_conflict=8.46, write=1.143,
        read_latency=17.5, refresh_hold=38, refresh_interval=782, words_per_row=128,
        banks=8, load_switch=2.7, load_activate=5.12, write_turn=6.7, write_word=0.88,
        write_word_same=10.38, write_word_spaced=4.0, write_word_same_spaced=14.19,
        write_settle=19),
    ("sdr", "1:1", "IS42S16160", None, 128, 100_000_000): PortFigures(
        sequential=9.127, bank_stride=16.21, row_conflict=12.25, write=9.206,
        read_latency=16.7, refresh_hold=12, refresh_interval=782, words_per_row=64,
        banks=4, load_switch=1.14, load_activate=0.0, write_turn=15.63, write_word=0.0,
        write_word_same=0.0, write_settle=29),
    ("sdr", "1:1", "IS42S16160", None, 32, 50_000_000): PortFigures(
        sequential=3.011, bank_stride=8.146, row_conflict=4.116, write=3.055,
        read_latency=10.46, refresh_hold=8, refresh_interval=391, words_per_row=256, banks=4),
    ("sdr", "1:1", "IS42S16160", None, 64, 50_000_000): PortFigures(
        sequential=5.047, bank_stride=10.156, row_conflict=6.174, write=5.121,
        read_latency=12.63, refresh_hold=8, refresh_interval=391, words_per_row=128, banks=4),
    ("sdr", "1:1", "IS42S16160", None, 32, 45_000_000): PortFigures(
        sequential=3.011, bank_stride=8.186, row_conflict=4.130, write=3.058,
        read_latency=10.52, refresh_hold=8, refresh_interval=352, words_per_row=256, banks=4),
    ("sdr", "1:1", "IS42S16160", None, 64, 45_000_000): PortFigures(
        sequential=5.042, bank_stride=10.203, row_conflict=6.193, write=5.133,
        read_latency=12.71, refresh_hold=8, refresh_interval=352, words_per_row=128, banks=4),
    ("ddr3", "1:2", "MT41K256M16", "800", 128, 50_000_000): PortFigures(
        sequential=2.565, bank_stride=11.937, row_conflict=6.266, write=2.712,
        read_latency=35.06, refresh_hold=75, refresh_interval=391, words_per_row=128, banks=8),
}


def ddr3_rate_mts(clock_hz: int, rate: str = "1:4") -> float:
    """The DDR3 data rate (MT/s) at controller clock ``clock_hz`` through a PHY of clock ratio
    ``rate``: two transfers a DRAM clock."""
    return clock_hz * int(rate.split(":")[1]) * 2 / 1e6


@dataclass(frozen=True, kw_only=True)
class PlatformConfig:
    """The memory system of one board.

    Parameters
    ----------
    memory : str
        ``"ideal"`` (fixed latency, always ready: the variant's ``port_latency``), ``"sdr"`` or
        ``"ddr3"`` (a LiteDRAM controller and simulation PHY).
    module : str, optional
        The DRAM part, a class name of ``litedram.modules`` from :data:`MODULES`; by default
        ``MT41K128M16`` for DDR3 and ``IS42S16160`` for SDR. The ideal memory has none.
    clock_hz : int
        The controller's (and accelerator's: one clock domain) clock in Hz.
    speedgrade : str, optional
        DDR3 only: the grade whose timings LiteDRAM uses, from :data:`DDR3_SPEEDGRADES`. By
        default the slowest grade that runs at ``clock_hz`` (``"800"`` at 100 MHz). LiteDRAM
        gives tRFC in DRAM clocks *of the grade* (128 for DDR3-1600, 64 for DDR3-800: both
        160 ns) and converts clocks to cycles without the clock frequency, so a faster grade
        than the clock overstates tRFC: at 100 MHz, ``"1600"`` makes it 32 cycles (320 ns)
        instead of 16, and the refresh cost about twice the real one. A grade slower than the
        clock is refused (the part would be overclocked).
    refresh : str
        ``"normal"``, or ``"hot"``: tREFI halved (DDR3's doubled refresh rate above 85 C).
        The ideal memory does not refresh.
    rate : str, optional
        The PHY's clock ratio, from :data:`RATES` (the memory's first by default; the ideal
        memory has none). DDR3 at ``"1:2"`` is the ECP5's PHY: the simulation uses that PHY's
        own latencies, and the DRAM clock is twice the controller's.
    """

    memory: str = "ideal"
    module: str | None = None
    clock_hz: int = 100_000_000
    speedgrade: str | None = None
    refresh: str = "normal"
    rate: str | None = None

    def __post_init__(self) -> None:
        if self.memory not in MEMORIES:
            raise ValueError(
                f"memory must be one of {', '.join(MEMORIES)}, not {self.memory!r}")
        if not isinstance(self.clock_hz, int) or isinstance(self.clock_hz, bool):
            raise ValueError(f"clock_hz must be an integer number of Hz, not {self.clock_hz!r}")
        low, high = CLOCK_RANGE[self.memory]
        if not low <= self.clock_hz <= high:
            raise ValueError(
                f"clock_hz must be from {low} to {high} for memory {self.memory}, "
                f"not {self.clock_hz!r}")
        if self.refresh not in REFRESH:
            raise ValueError(
                f"refresh must be one of {', '.join(REFRESH)}, not {self.refresh!r}")
        if self.memory == "ideal":
            for name, allowed in (("module", None), ("speedgrade", None), ("refresh", "normal"),
                                  ("rate", None)):
                if getattr(self, name) != allowed:
                    raise ValueError(
                        f"{name} must be {allowed!r} for the ideal memory (it has no DRAM), "
                        f"not {getattr(self, name)!r}; use memory sdr or ddr3")
            return
        modules = MODULES[self.memory]
        if self.module is None:
            object.__setattr__(self, "module", modules[0])
        elif self.module not in modules:
            raise ValueError(
                f"module must be one of {', '.join(modules)} for memory {self.memory}, "
                f"not {self.module!r}")
        if self.rate is None:
            object.__setattr__(self, "rate", RATES[self.memory][0])
        elif self.rate not in RATES[self.memory]:
            raise ValueError(
                f"rate must be one of {', '.join(RATES[self.memory])} for memory "
                f"{self.memory}, not {self.rate!r}")
        if self.memory == "sdr":
            if self.speedgrade is not None:
                raise ValueError(
                    f"speedgrade must be None for memory sdr (its modules have one set of "
                    f"timings), not {self.speedgrade!r}")
            return
        rate = ddr3_rate_mts(self.clock_hz, self.rate)
        if self.speedgrade is None:
            fitting = [g for g in DDR3_SPEEDGRADES if int(g) >= rate]
            object.__setattr__(self, "speedgrade", fitting[0])  # CLOCK_RANGE keeps one
        elif self.speedgrade not in DDR3_SPEEDGRADES:
            raise ValueError(
                f"speedgrade must be one of {', '.join(DDR3_SPEEDGRADES)} for memory ddr3, "
                f"not {self.speedgrade!r}")
        elif int(self.speedgrade) < rate:
            raise ValueError(
                f"speedgrade {self.speedgrade} is too slow for clock_hz={self.clock_hz} "
                f"({rate:g} MT/s at {self.rate}): use a speedgrade of at least {rate:g}")

    # -- derived: computed here once, read everywhere else -------------------------------

    def describe(self) -> str:
        """One phrase for reports: ``"the ideal memory"``, ``"ddr3 MT41K128M16-800, hot
        refresh"``."""
        if not self.is_dram:
            return "the ideal memory"
        grade = f"-{self.speedgrade}" if self.speedgrade else ""
        return f"{self.memory} {self.module}{grade}, {self.refresh} refresh"

    @property
    def is_dram(self) -> bool:
        """True for a LiteDRAM memory (``sdr``, ``ddr3``)."""
        return self.memory != "ideal"

    @property
    def refresh_divisor(self) -> int:
        """What the module's tREFI is divided by: 2 when hot, else 1."""
        return 2 if self.refresh == "hot" else 1

    def port_figures(self, port_bytes: int) -> PortFigures | None:
        """The characterized figures of this memory's port at ``port_bytes``
        (:data:`PORT_FIGURES`); None for the ideal memory.

        Raises
        ------
        ValueError
            A DRAM platform, clock or port width that was not characterized.
        """
        if not self.is_dram:
            return None
        key = (self.memory, self.rate, self.module, self.speedgrade, port_bytes * 8,
               self.clock_hz)
        if key not in PORT_FIGURES:
            known = ", ".join(f"{m} {r} {mod} {g or ''} {b}-bit at {hz / 1e6:g} MHz"
                              for m, r, mod, g, b, hz in PORT_FIGURES)
            raise ValueError(
                f"no characterized port figures for {self.memory} {self.rate} {self.module} "
                f"{self.speedgrade or ''} with {port_bytes}-byte words at {self.clock_hz} Hz "
                f"(known: {known}); measure it with python -m sim.dram.characterize "
                f"and add it to hwgen.platform.PORT_FIGURES")
        return PORT_FIGURES[key]

    # -- identity ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The parameters as plain JSON types (defaults filled in, so equal platforms give
        equal dicts). The default ``rate`` is left out: platforms from before it existed keep
        their keys, which name build folders and sit in descriptors and caches."""
        data = dataclasses.asdict(self)
        if self.rate is None or self.rate == RATES[self.memory][0]:
            del data["rate"]
        return data

    def key(self) -> str:
        """A stable content hash of the parameters (16 hex digits), like
        :meth:`hwgen.config.VariantConfig.key`: it names DRAM build folders."""
        return content_key(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlatformConfig:
        """Build a platform from :meth:`to_dict` output, naming any unknown field."""
        check_fields(cls, data, "platform config")
        return cls(**data)
