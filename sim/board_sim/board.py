"""A board in simulation: the board design's system on chip under Verilator, its UART on a
socket, driven by the host runtime unchanged.

The simulated board is the bitstream's system on chip (:mod:`hwgen.board.soc`) with two
differences, both below the bus: LiteDRAM's simulation PHY (the SDRAM as logic) stands for
the PHY and the chip, and the board top's PLL and reset are the harness's clock and reset
(``uart_main.cpp``). The UART is the real one, bit by bit at the design's baud rate, joined to
a TCP socket on 127.0.0.1; the host opens ``socket://127.0.0.1:PORT`` where it would open
``/dev/ttyUSB0``. Its identity region holds the board design's digest, as the bitstream's
does, so the host's checks run as they would on the board.

Builds are cached under the simulation build root (:func:`sim.build.default_root`), keyed by
the design's digest and the harness's source.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

from hwgen.board.design import BoardDesign
from sim import build as sim_build
from sim.board_sim.build import HARNESS, build_uart_sim

#: What ``board.json`` of a simulation build records beside the binary.
MARKER = "ready"


def build_key(design: BoardDesign) -> str:
    """The build's cache key: the design's digest and the harness's source."""
    h = hashlib.sha256(design.digest().encode())
    h.update(HARNESS.read_bytes())
    return h.hexdigest()[:16]


def build_board(design: BoardDesign, *, root: Path | None = None) -> Path:
    """The simulator of ``design`` (built once, then taken from the cache).

    Returns
    -------
    Path
        The executable.

    Raises
    ------
    sim.top.BuildError
        If Verilator failed.
    """
    from hwgen.board.build import gateware_files
    from hwgen.board.soc import MODULE

    root = Path(root) if root is not None else sim_build.default_root()
    folder = root / "board" / f"{design.board.name}-{build_key(design)}"
    binary = folder / "obj" / "uart_sim"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with sim_build.locked(folder.with_suffix(".lock")):
        if (folder / MARKER).is_file() and binary.is_file():
            return binary
        shutil.rmtree(folder, ignore_errors=True)
        src = folder / "src"
        src.mkdir(parents=True)
        files, _spec = gateware_files(design, sim=True)
        for name, text in files.items():
            (src / name).write_text(text)
        build_uart_sim([src / name for name in files], MODULE, folder, jobs=os.cpu_count() or 1)
        (folder / MARKER).write_text(design.digest() + "\n")
    return binary


class SimulatedBoard:
    """A running simulated board (a context manager): :attr:`url` is its serial port.

    Parameters
    ----------
    design : BoardDesign
    root : Path, optional
        The build cache root.

    Attributes
    ----------
    url : str
        ``socket://127.0.0.1:PORT``, for the host runtime's ``--board-port``.
    cycles : int or None
        System clock cycles the board ran, once it has stopped.
    """

    def __init__(self, design: BoardDesign, *, root: Path | None = None):
        self.design = design
        self.binary = build_board(design, root=root)
        self.url = ""
        self.cycles: int | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr: list[str] = []

    def __enter__(self) -> SimulatedBoard:
        d = self.design
        self._proc = subprocess.Popen(
            [str(self.binary), "--clock-hz", str(d.clock_hz), "--baud", str(d.baud),
             "--port", "0", "--idle-timeout", "120"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        threading.Thread(target=lambda: self._stderr.extend(self._proc.stderr),
                         daemon=True).start()
        line = self._proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "LISTENING":
            self._proc.kill()
            raise RuntimeError(f"the simulated board did not start: {' '.join(line)} "
                               f"{''.join(self._stderr)}")
        self.url = f"socket://127.0.0.1:{line[1]}"
        return self

    def __exit__(self, *exc) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        for line in out.splitlines():
            if line.startswith("CYCLES "):
                self.cycles = int(line.split()[1])
        self._proc = None

    def exited(self) -> int | None:
        """The simulator's exit status if it has stopped, else None."""
        return None if self._proc is None else self._proc.poll()

    @property
    def log(self) -> str:
        """What the simulator wrote on stderr."""
        return "".join(self._stderr)
