"""The boards hwgen builds for: each an ``amaranth-boards`` platform and what hwgen adds.

The pins, the FPGA and its package come from ``amaranth-boards`` (no hand-written pin lists);
this table adds what that package does not know: which DRAM part is fitted (LiteDRAM's
module class), the clock hwgen runs it at, and the UART's highest dependable rate.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Board:
    """One board.

    Attributes
    ----------
    name : str
        What ``--board`` takes.
    platform : str
        The ``amaranth_boards`` module and class, ``module:Class``.
    device, package, speed : str, str, int
        The FPGA as nextpnr-ecp5 names it (``--85k``), its package and speed grade.
    litex_device : str
        The same FPGA as LiteX names it (its primitives for the DRAM PHY's I/O registers).
    memory, dram_module : str
        The DRAM kind (``sdr``, ``ddr3``) and part (a ``litedram.modules`` class name).
    dram_rate : str or None
        The DRAM PHY's clock ratio (:data:`hwgen.platform.RATES`): ``"1:2"`` for DDR3, the
        ECP5's PHY; None for the memory's default.
    clock_resource : str
        The board oscillator's resource; the PLL makes the system clock from it.
    clock_hz : int
        The system clock hwgen builds for by default (accelerator, DRAM controller, UART).
    baud : int
        The UART's default bit rate: the highest the board's USB UART carries dependably.
    uart_note : str
        What limits ``baud`` (``docs/boards.md``).
    loader_board : str
        openFPGALoader's ``-b`` name, for the flashing instructions.
    ecppack_options : tuple of str
        The board's ecppack options (the ULX3S's bitstreams are compressed).
    """

    name: str
    platform: str
    device: str
    package: str
    speed: int
    litex_device: str
    memory: str
    dram_module: str
    clock_resource: str
    clock_hz: int
    baud: int
    uart_note: str
    loader_board: str
    ecppack_options: tuple[str, ...] = ()
    dram_rate: str | None = None

    def amaranth_platform(self):
        """A new instance of the board's ``amaranth-boards`` platform.

        Raises
        ------
        RuntimeError
            If ``amaranth-boards`` is not installed, with the command that installs it.
        """
        import importlib

        module, cls = self.platform.split(":")
        try:
            return getattr(importlib.import_module(module), cls)()
        except ImportError:
            raise RuntimeError("amaranth-boards is not installed; run 'make setup' (or "
                               "'pip install amaranth-boards==0.0.21')") from None


#: Every board, by name.
BOARDS: dict[str, Board] = {b.name: b for b in (
    Board(name="ulx3s-85f", platform="amaranth_boards.ulx3s:ULX3S_85F_Platform",
          device="85k", package="CABGA381", speed=6, litex_device="LFE5U-85F-6BG381C",
          memory="sdr", dram_module="IS42S16160", clock_resource="clk25",
          clock_hz=50_000_000, baud=3_000_000,
          uart_note="FT231X: 3 Mbaud is its highest rate (its baud generator divides 48 MHz "
                    "by 16 or more)",
          loader_board="ulx3s", ecppack_options=("--compress",)),
    Board(name="ecpix5-85f", platform="amaranth_boards.ecpix5:ECPIX585Platform",
          device="um5g-85k", package="CABGA554", speed=8, litex_device="LFE5UM5G-85F-8BG554I",
          memory="ddr3", dram_module="MT41K256M16", dram_rate="1:2", clock_resource="clk100",
          clock_hz=50_000_000, baud=6_000_000,
          uart_note="FT2232H: 12 Mbaud at most (LambdaConcept's ECPIX-5 documentation), "
                    "but the UART takes at most an eighth of the system clock; 6 Mbaud is the "
                    "FT2232H's next rate (its 12 MHz divided by 2), 8.3 clock cycles a bit "
                    "at 50 MHz",
          loader_board="ecpix5"),
)}


def board(name: str) -> Board:
    """The board ``name``.

    Raises
    ------
    ValueError
        If hwgen has no such board, listing the ones it has.
    """
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}; hwgen builds for "
                         f"{', '.join(sorted(BOARDS))}") from None


#: nextpnr's routers (``hwgen build --router``), the default first: router2 routes the 4x4
#: board designs in 4 to 15 minutes; router1, nextpnr's own default, is slower and more
#: timing-driven (the ULX3S 4x4: 71 MHz in 16 minutes against router2's 54 to 57). Neither
#: converged on the ULX3S 8x8 until yosys was told not to pack wide functions
#: (``wide_luts=False``, docs/boards.md).
ROUTERS = ("router2", "router1")
