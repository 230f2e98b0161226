"""The Lattice ECP5 parts a variant is synthesized for: their capacities, their bitstream
sizes and how fast a board loads one. Pure data, defined once: ``hwgen variants build``
(:mod:`synth.flow`) picks the smallest part a variant fits and prices its reconfiguration
with it; ``docs/variants.md`` gives the sources.

Capacities are the ECP5 family data sheet's (Lattice FPGA-DS-02012, Table 1.1: 24K, 44K and
84K LUTs; 56, 108 and 208 sysMEM EBR blocks of 18 kbit; 28, 72 and 156 18x18 multipliers),
in the exact counts nextpnr-ecp5's chip database holds for the same devices (its
``--report`` utilisation: a LUT4 is one ``TRELLIS_COMB``, every slice has two of them and two
flip-flops).

Bitstream sizes are the configuration frames of each device, frames x bits a frame (padding
included), from Project Trellis's ``devices.json`` (the documented ECP5 bitstream format;
Lattice's own size table in FPGA-TN-02039, the sysCONFIG usage guide, was not at hand): the
SRAM configuration a full reconfiguration writes. A ``.bit`` file adds a few hundred bytes of
header and commands, and EBR initialisation frames when block RAMs start with content (the
accelerator's do not).

The configuration port is slave SPI from the host (the runtime's reconfiguration manager
swaps bitstreams from software): one bit a clock at most 60 MHz, the limit Linux's
``lattice,sysconfig-ecp5`` FPGA manager binding and driver set for ECP5
(``drivers/fpga/lattice-sysconfig-spi.c``: ``ecp5_spi_max_speed_hz = 60000000``), writing the
uncompressed bitstream.

Not gateware: :mod:`hwgen.gateware.sources` leaves this module out of the build digest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Part:
    """One ECP5 device, as synthesis and place-and-route see it.

    Attributes
    ----------
    name : str
        Lattice's device name (``LFE5U-25F``).
    nextpnr_device : str
        nextpnr-ecp5's device option without dashes (``25k``).
    luts, ffs : int
        LUT4s (``TRELLIS_COMB``) and flip-flops (``TRELLIS_FF``).
    dsps : int
        18x18 multipliers (``MULT18X18D``).
    brams : int
        18 kbit block RAMs (``DP16KD``, sysMEM EBR).
    ram_slices : int
        Slices that can hold distributed RAM (``TRELLIS_RAMW``: one per ``TRELLIS_DPR16X4``).
    frames, frame_bits : int
        Configuration frames, and bits a frame with its padding (Project Trellis).
    """

    name: str
    nextpnr_device: str
    luts: int
    ffs: int
    dsps: int
    brams: int
    ram_slices: int
    frames: int
    frame_bits: int

    @property
    def bitstream_bits(self) -> int:
        """Bits a full configuration writes: every frame."""
        return self.frames * self.frame_bits


#: The LFE5U parts from smallest to largest (the -12F is a 25F with a smaller licence and the
#: same die: left out).
PARTS: tuple[Part, ...] = (
    Part(name="LFE5U-25F", nextpnr_device="25k", luts=24288, ffs=24288, dsps=28, brams=56,
         ram_slices=3036, frames=7562, frame_bits=592),
    Part(name="LFE5U-45F", nextpnr_device="45k", luts=43848, ffs=43848, dsps=72, brams=108,
         ram_slices=5481, frames=9470, frame_bits=846 + 2),
    Part(name="LFE5U-85F", nextpnr_device="85k", luts=83640, ffs=83640, dsps=156, brams=208,
         ram_slices=10455, frames=13294, frame_bits=1136),
)
#: Parts that boards carry but that ``hwgen variants build`` does not choose among: the
#: ECP5-5G 85F (the ECPIX-5's), the LFE5U-85F's die with faster SERDES, so its capacities
#: and configuration frames are the 85F's (Project Trellis lists the same frames for both).
BOARD_PARTS: tuple[Part, ...] = (
    dataclasses.replace(PARTS[-1], name="LFE5UM5G-85F", nextpnr_device="um5g-85k"),
)
#: The package every part is placed in (the 381-ball caBGA all three come in).
PACKAGE = "CABGA381"

#: The configuration port: slave SPI, one bit a clock.
CONFIG_PORT = "slave SPI x1"
#: Its clock, the fastest ECP5's slave SPI takes (Linux's lattice,sysconfig-ecp5 limit).
CONFIG_CLOCK_HZ = 60_000_000
#: Bits a clock on that port.
CONFIG_BITS_PER_CLOCK = 1
#: Where the figures come from, as recorded in every descriptor.
SOURCE = ("capacities: Lattice FPGA-DS-02012 (ECP5 family data sheet) Table 1.1, counts as in "
          "nextpnr-ecp5's chip database; bitstream: configuration frames x frame bits from "
          "Project Trellis devices.json (FPGA-TN-02039's size table not consulted); bandwidth: "
          "slave SPI x1 at 60 MHz, the ECP5 limit of Linux's lattice,sysconfig-ecp5 FPGA manager")


def part(name: str) -> Part:
    """The part called ``name`` (``LFE5U-45F``) or its nextpnr device (``45k``).

    Raises
    ------
    ValueError
        An unknown part, naming the known ones.
    """
    for p in (*PARTS, *BOARD_PARTS):
        if name in (p.name, p.nextpnr_device):
            return p
    raise ValueError(f"unknown ECP5 part {name!r}; the parts are "
                     f"{', '.join(p.name for p in (*PARTS, *BOARD_PARTS))}")


def demand(cells: Mapping[str, int]) -> dict[str, int]:
    """What a netlist of yosys ``synth_ecp5`` cells needs of a part.

    A ``CCU2C`` (two bits of carry chain) takes two LUT4s, a ``TRELLIS_DPR16X4`` (16x4
    distributed RAM) four LUT4s in RAM mode and one RAM-write slice; ``PFUMX``/``L6MUX21``
    are the slices' own wide multiplexers and take none.

    Returns
    -------
    dict
        ``luts``, ``ffs``, ``dsps``, ``brams``, ``ram_slices``.
    """
    ram = cells.get("TRELLIS_DPR16X4", 0)
    return {"luts": cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0) + 4 * ram,
            "ffs": cells.get("TRELLIS_FF", 0),
            "dsps": cells.get("MULT18X18D", 0),
            "brams": cells.get("DP16KD", 0),
            "ram_slices": ram}


def shortfall(cells: Mapping[str, int], p: Part) -> str | None:
    """What part ``p`` lacks to hold ``cells`` (``"30000 luts > 24288, ..."``), or None when
    it holds them."""
    need = demand(cells)
    over = [f"{need[k]} {k} > {getattr(p, k)}" for k in need if need[k] > getattr(p, k)]
    return ", ".join(over) or None


def smallest_part(cells: Mapping[str, int]) -> tuple[Part | None, str]:
    """The smallest part whose every resource holds ``cells`` (:func:`demand`), and why.

    Returns
    -------
    part, reason : Part or None, str
        The part and a line saying what it holds; None and the resource that the largest
        part lacks when none fits.
    """
    need = demand(cells)
    for p in PARTS:
        if shortfall(cells, p) is None:
            return p, (f"smallest ECP5 part that holds {need['luts']} LUT4, {need['ffs']} FF, "
                       f"{need['dsps']} DSP, {need['brams']} BRAM")
    largest = PARTS[-1]
    return None, f"fits no ECP5 part: {shortfall(cells, largest)} on the {largest.name}"


def reconfiguration(p: Part, clock_hz: int, bitstream_bytes: int | None = None
                    ) -> dict[str, Any]:
    """The cost of loading a full bitstream of part ``p``, in seconds and in cycles of a
    ``clock_hz`` clock (the platform's: the clock the accelerator's cycles are counted in).
    ``bitstream_bytes`` is a real bitstream file's size (``hwgen build --board``): the cost
    of loading that file, compressed or not, rather than of every frame.

    Returns
    -------
    dict
        ``part``, ``bitstream_bits``, ``config_port``, ``config_bandwidth_bits_per_s``,
        ``seconds``, ``clock_hz``, ``cycles``, ``source``.
    """
    bandwidth = CONFIG_CLOCK_HZ * CONFIG_BITS_PER_CLOCK
    bits = p.bitstream_bits if bitstream_bytes is None else 8 * bitstream_bytes
    source = SOURCE if bitstream_bytes is None else (
        "bitstream: the size of the built file; " + SOURCE.split("; ", 2)[2])
    seconds = bits / bandwidth
    return {"part": p.name, "bitstream_bits": bits, "config_port": CONFIG_PORT,
            "config_bandwidth_bits_per_s": bandwidth, "seconds": round(seconds, 6),
            "clock_hz": clock_hz, "cycles": round(seconds * clock_hz), "source": source}
