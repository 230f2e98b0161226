"""Energy per kernel: an estimate from the hardware counters, not a measurement.

Each event the counters show (a MAC, a scratchpad byte, a DRAM byte, a row activation, a
refresh, a nanosecond of background power) has one record here: its energy, what counts it,
and where the figure comes from. :func:`estimate` multiplies each record by its count.
``docs/energy.md`` gives the table, the derivations and what the estimate leaves out.

Arithmetic and SRAM figures are Horowitz's 45 nm ASIC figures, scaled by the FPGA-to-ASIC
dynamic power ratio of Kuon and Rose (see :data:`FPGA_TO_ASIC`). DRAM figures are derived
from datasheet IDD currents by the method of Micron's TN-41-01; the parts are stand-ins for
the platform's modules, named in :data:`DRAM_PARTS`. All figures are exact
:class:`~fractions.Fraction` values so that a derivation can be checked digit for digit;
the estimate converts to float only at the end.

Like :mod:`hwgen.config`, this module imports nothing else from the project but the
contract (:mod:`hwgen.config`, :mod:`hwgen.platform`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction as F

from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig

#: Counters every estimate needs; a mapping without one of them is refused.
REQUIRED_COUNTERS: tuple[str, ...] = ("cycles", "array_busy", "bytes_read", "bytes_written")

#: Counters read when present and taken as 0 when absent (the ideal memory has no rows).
OPTIONAL_COUNTERS: tuple[str, ...] = ("row_activates",)

HOROWITZ = ('M. Horowitz, "Computing\'s energy problem (and what we can do about it)", '
            "ISSCC 2014, pp. 10-14: energy table, 45 nm, 0.9 V")
KUON_ROSE = ('I. Kuon, J. Rose, "Measuring the Gap Between FPGAs and ASICs", IEEE TCAD '
             "26(2):203-215, Feb. 2007 (90 nm): dynamic power ratio approximately 14")
TN_41_01 = 'Micron TN-41-01 "Calculating Memory System Power for DDR3" (method)'

#: FPGA-to-ASIC dynamic power ratio applied to Horowitz's on-chip figures. Kuon and Rose
#: measured about 14 for LUT logic and flip-flops and found the gap "generally smaller" with
#: hard multipliers and block RAMs, so this errs high for DSP- and BRAM-mapped work.
FPGA_TO_ASIC = F(14)

# Horowitz's table (pJ, 45 nm ASIC).
_MULT8_PJ = F("0.2")  # 8-bit integer multiply
_ADD32_PJ = F("0.1")  # 32-bit integer add (the int32 accumulate)
#: SRAM read of 64 bits, pJ, by array size in bytes: Horowitz's 8 KB, 32 KB and 1 MB rows.
_SRAM_64BIT_PJ: tuple[tuple[int, F], ...] = ((8 << 10, F(10)), (32 << 10, F(20)),
                                             (1 << 20, F(100)))

#: Data bus of every DRAM module :mod:`hwgen.platform` accepts, in bits (one x16 chip).
_BUS_BITS = 16


@dataclass(frozen=True, kw_only=True)
class DramPart:
    """One DRAM chip's datasheet currents and timings, and the energies derived from them.

    Currents are the datasheet's maxima in mA, times in ns, so that mA x V x ns is pJ and
    mA x V is mW. The derivations follow TN-41-01: each operation's energy is its current
    above the background it replaces, times the supply, times the time it lasts.

    Parameters
    ----------
    name, source : str
        The part and speed grade, and where every figure below was read.
    vdd : Fraction
        Supply voltage the currents are specified at.
    width_bits : int
        Data pins of one chip; ``16 // width_bits`` chips make the board's 16-bit bus.
    transfers_per_clock : int
        2 for DDR, 1 for SDR.
    idd0, idd2n, idd3n, idd4r, idd4w, idd5 : Fraction
        One-bank ACTIVATE-PRECHARGE cycling at tRC; precharge standby; active standby;
        burst read; burst write; refresh cycling at tRFC (mA). SDR datasheets call them
        IDD1, IDD2, IDD3, IDD4 (read and write alike), IDD5.
    tck, trc, tras, trfc, trefi : Fraction
        The clock the burst currents are specified at, and the row cycle, row active,
        refresh cycle and refresh interval times (ns).
    """

    name: str
    source: str
    vdd: F
    width_bits: int
    transfers_per_clock: int
    idd0: F
    idd2n: F
    idd3n: F
    idd4r: F
    idd4w: F
    idd5: F
    tck: F
    trc: F
    tras: F
    trfc: F
    trefi: F

    @property
    def chips(self) -> int:
        """Chips that make the board's 16-bit data bus."""
        return _BUS_BITS // self.width_bits

    @property
    def activate_pj(self) -> F:
        """One ACTIVATE and its PRECHARGE on the whole bus, pJ.

        TN-41-01: IDD0 is measured with one bank cycling ACT-PRE at tRC; subtract the
        active standby current for tRAS and the precharge standby current for the rest of
        tRC, which :attr:`background_mw` already charges:
        ``(IDD0 * tRC - IDD3N * tRAS - IDD2N * (tRC - tRAS)) * VDD * chips``.
        """
        charge = self.idd0 * self.trc - self.idd3n * self.tras - self.idd2n * (self.trc - self.tras)
        return charge * self.vdd * self.chips

    def _burst_pj_per_byte(self, idd4: F) -> F:
        # A chip moves width_bits/8 bytes a transfer; the burst current above active standby
        # flows for the clock those transfers take. The same per byte for any chip count.
        bytes_per_clock = F(self.width_bits, 8) * self.transfers_per_clock
        return (idd4 - self.idd3n) * self.vdd * self.tck / bytes_per_clock

    @property
    def read_pj_per_byte(self) -> F:
        """Array and core energy of reading one byte in a burst, pJ (no I/O or termination):
        ``(IDD4R - IDD3N) * VDD * tCK / bytes a chip moves a clock``."""
        return self._burst_pj_per_byte(self.idd4r)

    @property
    def write_pj_per_byte(self) -> F:
        """Array and core energy of writing one byte in a burst, pJ, as
        :attr:`read_pj_per_byte` with IDD4W."""
        return self._burst_pj_per_byte(self.idd4w)

    @property
    def refresh_pj(self) -> F:
        """One REFRESH command on the whole bus, pJ:
        ``(IDD5 - IDD3N) * VDD * tRFC * chips``."""
        return (self.idd5 - self.idd3n) * self.vdd * self.trfc * self.chips

    @property
    def background_mw(self) -> F:
        """Active standby power of the bus, mW (= pJ a ns): ``IDD3N * VDD * chips``.

        LiteDRAM's controller keeps rows open between accesses, so a bank is active most of
        the time; IDD3N at the datasheet's clock errs high against a slower controller."""
        return self.idd3n * self.vdd * self.chips


#: DDR3 stand-in. The MT41K128M16's own IDD table was not in the sources this estimate
#: could check; these are Micron's MT41J512M8 (4 Gb x8 DDR3-1600, die rev. E/J) as quoted
#: in gem5. tRC = tRAS + tRP = 35 + 13.75 ns.
DDR3_STANDIN = DramPart(
    name="Micron MT41J512M8 DDR3-1600 (4 Gb x8), stand-in for the MT41K* modules",
    source=("gem5 src/python/gem5/components/memory/dram_interfaces/ddr3.py, DDR3_1600_8x8: "
            "'Current values from datasheet Die Rev E,J' (Micron MT41J512M8)"),
    vdd=F("1.5"), width_bits=8, transfers_per_clock=2,
    idd0=F(55), idd2n=F(32), idd3n=F(38), idd4r=F(157), idd4w=F(125), idd5=F(235),
    tck=F("1.25"), trc=F("48.75"), tras=F(35), trfc=F(260), trefi=F(7800),
)

#: SDR stand-in. The IS42S16160's IDD table was not in the sources this estimate could
#: check; these are Winbond's W9864G6JH (64 Mb x16 SDR, 3.3 V) at its -6 grade (tCK 6 ns at
#: CL 3). SDR refreshes a row per bank in tRC, so tRFC = tRC; 4096 rows (1M words a bank,
#: 256 columns) in tREF 64 ms give tREFI = 64 ms / 4096 = 15625 ns.
SDR_STANDIN = DramPart(
    name="Winbond W9864G6JH-6 SDR (64 Mb x16), stand-in for the IS42S16160 and MT48LC16M16",
    source=("Winbond W9864G6JH datasheet: 9.4 DC Characteristics (rev. A04, Jun. 2013: "
            "IDD1 50, IDD2 25, IDD3 35, IDD4 75, IDD5 60 mA at -6) and 9.5 AC Characteristics "
            "(rev. A03, Oct. 2011: tRC 60, tRAS 42 ns; tCK 6 ns at CL 3; tREF 64 ms)"),
    vdd=F("3.3"), width_bits=16, transfers_per_clock=1,
    idd0=F(50), idd2n=F(25), idd3n=F(35), idd4r=F(75), idd4w=F(75), idd5=F(60),
    tck=F(6), trc=F(60), tras=F(42), trfc=F(60), trefi=F(15625),
)

#: The DRAM figures each memory uses. The ideal memory prices its bytes as DDR3 accesses
#: (and has no rows, refresh or background: see :func:`energy_table`).
DRAM_PARTS: dict[str, DramPart] = {"ddr3": DDR3_STANDIN, "sdr": SDR_STANDIN,
                                   "ideal": DDR3_STANDIN}


@dataclass(frozen=True)
class Counts:
    """What an event's count is computed from: the run's counters and its variant and board."""

    counters: Mapping[str, int]
    config: VariantConfig
    platform: PlatformConfig

    def __getitem__(self, name: str) -> int:
        return self.counters.get(name, 0)

    @property
    def elapsed_ns(self) -> F:
        """Wall time of the run: ``cycles / clock_hz``, in ns."""
        return F(self["cycles"] * 10**9, self.platform.clock_hz)


@dataclass(frozen=True, kw_only=True)
class EnergyEvent:
    """One row of the energy table.

    Parameters
    ----------
    name : str
        The key in the breakdown, e.g. ``"mac_int8"``.
    pj : Fraction
        Energy of one event, pJ (for power events the event is a nanosecond, so pJ is mW).
    unit : str
        What one event is ("MAC", "byte", "activation", "refresh", "ns").
    counted_by : str
        How the counters give the number of events; "derived" where they give it only
        approximately.
    source : str
        Where the figure comes from, with any derivation.
    count : callable
        ``Counts -> Fraction``: the number of events in a run.
    """

    name: str
    pj: F
    unit: str
    counted_by: str
    source: str
    count: Callable[[Counts], F] = field(compare=False, repr=False)


def sram_pj_per_byte(size_bytes: int) -> F:
    """Horowitz's SRAM read energy per byte for an array of ``size_bytes`` (45 nm ASIC, pJ).

    Horowitz lists 64-bit reads of 8 KB, 32 KB and 1 MB arrays; this takes the smallest
    listed array that holds ``size_bytes`` and divides its figure by 8 bytes.

    Raises
    ------
    ValueError
        For an array larger than 1 MB, which Horowitz's table does not cover.
    """
    for limit, pj in _SRAM_64BIT_PJ:
        if size_bytes <= limit:
            return pj / 8
    raise ValueError(f"no SRAM energy figure for a {size_bytes}-byte scratchpad: Horowitz's "
                     f"table stops at 1 MB; use scratchpads of at most 1 MB")


def energy_table(config: VariantConfig, platform: PlatformConfig, *,
                 fpga_factor: F = FPGA_TO_ASIC,
                 fpga_static_mw: F = F(0)) -> tuple[EnergyEvent, ...]:
    """The energy table for ``config`` on ``platform``: one :class:`EnergyEvent` per event.

    Parameters
    ----------
    config : VariantConfig
        The variant: its array shape and scratchpad sizes.
    platform : PlatformConfig
        The board's memory. ``ddr3`` and ``sdr`` use their :data:`DRAM_PARTS`; ``ideal``
        prices the bytes it moves as DDR3 reads and writes and adds no activation, refresh
        or background energy, so its estimate is a lower bound for any real board.
    fpga_factor : Fraction, optional
        Multiplies Horowitz's ASIC figures for the MACs and scratchpads; :data:`FPGA_TO_ASIC`
        by default, 1 for the 45 nm ASIC view.
    fpga_static_mw : Fraction, optional
        The FPGA's static power in mW. It depends on the device, voltage and temperature,
        and no source this estimate could check gives it for a chosen board, so it is 0
        unless given (Vivado's ``report_power`` gives "Device Static" for a built design).

    Returns
    -------
    tuple of EnergyEvent
        In a fixed order; the keys of the estimate's breakdown.
    """
    fpga_factor, fpga_static_mw = F(fpga_factor), F(fpga_static_mw)
    if fpga_factor <= 0:
        raise ValueError(f"fpga_factor must be positive, not {fpga_factor}")
    if fpga_static_mw < 0:
        raise ValueError(f"fpga_static_mw must be 0 or more, not {fpga_static_mw}")
    onchip = f" x {fpga_factor} (FPGA/ASIC: {KUON_ROSE})" if fpga_factor != 1 else ""
    spad_bytes = max(config.spad_a_depth * config.a_row_bytes,
                     config.spad_b_depth * config.b_row_bytes)
    sram = sram_pj_per_byte(spad_bytes)
    sram_src = (f"{HOROWITZ}: {sram * 8} pJ a 64-bit read of the smallest listed SRAM holding "
                f"the larger scratchpad ({spad_bytes} bytes), / 8 bytes{onchip}")
    part = DRAM_PARTS[platform.memory]
    dram_src = f"{part.name}; {part.source}; {TN_41_01}"
    table = [
        EnergyEvent(
            name="mac_int8", pj=(_MULT8_PJ + _ADD32_PJ) * fpga_factor, unit="MAC",
            counted_by="array_busy x rows x cols (every slot of a busy cycle)",
            source=f"{HOROWITZ}: 8-bit multiply 0.2 + 32-bit add 0.1 pJ{onchip}",
            count=lambda c: F(c["array_busy"] * c.config.rows * c.config.cols)),
        EnergyEvent(
            name="spad_read", pj=sram * fpga_factor, unit="byte",
            counted_by="derived: array_busy x (a_row_bytes + b_row_bytes)",
            source=sram_src,
            count=lambda c: F(c["array_busy"] * (c.config.a_row_bytes + c.config.b_row_bytes))),
        EnergyEvent(
            name="spad_write", pj=sram * fpga_factor, unit="byte",
            counted_by="derived: bytes_read (every byte read from memory lands in a scratchpad)",
            source=sram_src + "; a write taken as costing a read",
            count=lambda c: F(c["bytes_read"])),
        EnergyEvent(
            name="dram_read", pj=part.read_pj_per_byte, unit="byte", counted_by="bytes_read",
            source=f"(IDD4R - IDD3N) x VDD x tCK / bytes a chip moves a clock; {dram_src}",
            count=lambda c: F(c["bytes_read"])),
        EnergyEvent(
            name="dram_write", pj=part.write_pj_per_byte, unit="byte", counted_by="bytes_written",
            source=f"(IDD4W - IDD3N) x VDD x tCK / bytes a chip moves a clock; {dram_src}",
            count=lambda c: F(c["bytes_written"])),
    ]
    if platform.is_dram:
        table += [
            EnergyEvent(
                name="dram_activate", pj=part.activate_pj, unit="activation",
                counted_by="row_activates (0 when absent)",
                source=(f"(IDD0 x tRC - IDD3N x tRAS - IDD2N x (tRC - tRAS)) x VDD x {part.chips} "
                        f"chip(s); {dram_src}"),
                count=lambda c: F(c["row_activates"])),
            EnergyEvent(
                name="dram_refresh", pj=part.refresh_pj, unit="refresh",
                counted_by="derived: cycles / clock_hz / (tREFI / refresh divisor)",
                source=(f"(IDD5 - IDD3N) x VDD x tRFC x {part.chips} chip(s), "
                        f"tREFI {part.trefi} ns; {dram_src}"),
                count=lambda c: c.elapsed_ns * c.platform.refresh_divisor / part.trefi),
            EnergyEvent(
                name="dram_background", pj=part.background_mw, unit="ns",
                counted_by="cycles / clock_hz",
                source=f"IDD3N x VDD x {part.chips} chip(s) (mW = pJ/ns); {dram_src}",
                count=lambda c: c.elapsed_ns),
        ]
    table.append(EnergyEvent(
        name="fpga_static", pj=fpga_static_mw, unit="ns", counted_by="cycles / clock_hz",
        source="caller's figure for the device (0: not known here)",
        count=lambda c: c.elapsed_ns))
    return tuple(table)


@dataclass(frozen=True)
class EnergyEstimate:
    """An energy estimate: nJ per event, in table order. Add estimates with ``+`` or
    :func:`total`.

    Parameters
    ----------
    items : tuple of (str, float)
        ``(event name, nJ)`` pairs.
    """

    items: tuple[tuple[str, float], ...]

    @property
    def breakdown_nj(self) -> dict[str, float]:
        """Energy of each event, nJ."""
        return dict(self.items)

    @property
    def total_nj(self) -> float:
        """The sum of the breakdown, nJ."""
        return sum(nj for _, nj in self.items)

    def __add__(self, other: EnergyEstimate) -> EnergyEstimate:
        merged = self.breakdown_nj
        for name, nj in other.items:
            merged[name] = merged.get(name, 0.0) + nj
        return EnergyEstimate(tuple(merged.items()))

    def to_dict(self) -> dict[str, object]:
        """``{"energy_nj": total, "energy_breakdown_nj": {event: nJ}}``, each rounded to three
        significant digits: the figures are good to a factor, not to a digit."""
        return {"energy_nj": _round3(self.total_nj),
                "energy_breakdown_nj": {k: _round3(v) for k, v in self.items}}


def _round3(value: float) -> float:
    return float(f"{value:.3g}")


def check_counters(counters: Mapping[str, int]) -> None:
    """Refuse counters an estimate cannot use.

    Raises
    ------
    ValueError
        Naming every missing required counter, or every counter that is negative or not an
        integer.
    """
    missing = [n for n in REQUIRED_COUNTERS if n not in counters]
    if missing:
        raise ValueError(f"the energy estimate needs counter(s) {', '.join(missing)}; pass the "
                         f"run's counters (hwgen.perf.COUNTERS)")
    bad = [f"{n}={counters[n]!r}" for n in REQUIRED_COUNTERS + OPTIONAL_COUNTERS
           if n in counters and (not isinstance(counters[n], int) or isinstance(counters[n], bool)
                                 or counters[n] < 0)]
    if bad:
        raise ValueError(f"counters must be integers of 0 or more, not {', '.join(bad)}")


def estimate(counters: Mapping[str, int], config: VariantConfig, platform: PlatformConfig, *,
             fpga_factor: F = FPGA_TO_ASIC, fpga_static_mw: F = F(0)) -> EnergyEstimate:
    """Estimate a run's energy from its hardware counters.

    Parameters
    ----------
    counters : mapping of str to int
        The run's counters by name (:data:`hwgen.perf.COUNTERS`); needs
        :data:`REQUIRED_COUNTERS`, reads :data:`OPTIONAL_COUNTERS` as 0 when absent and
        ignores others.
    config : VariantConfig
        The variant that ran.
    platform : PlatformConfig
        The board's memory; its ``clock_hz`` turns cycles into time.
    fpga_factor, fpga_static_mw : Fraction, optional
        As for :func:`energy_table`.

    Returns
    -------
    EnergyEstimate
        nJ per event of :func:`energy_table`.

    Raises
    ------
    ValueError
        For missing, negative or non-integer counters (see :func:`check_counters`).
    """
    check_counters(counters)
    counts = Counts(counters, config, platform)
    table = energy_table(config, platform, fpga_factor=fpga_factor,
                         fpga_static_mw=fpga_static_mw)
    return EnergyEstimate(tuple((e.name, float(e.pj * e.count(counts) / 1000)) for e in table))


def total(estimates: Iterable[EnergyEstimate]) -> EnergyEstimate:
    """The sum of ``estimates`` (a model's kernels), event by event.

    Parameters
    ----------
    estimates : iterable of EnergyEstimate
        Any number, on any platforms; an event missing from one counts 0 there.

    Returns
    -------
    EnergyEstimate
        The per-event sums; empty for no estimates.
    """
    result = EnergyEstimate(())
    for one in estimates:
        result = result + one
    return result
