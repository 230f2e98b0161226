"""A board session for the command line: a board folder and a port, real or simulated.

``hwgen run --board-port DEVICE`` opens the board on DEVICE; ``--board-port sim`` first starts
the folder's design under Verilator (:mod:`sim.board_sim.board`) and opens its socket, so
that the same host runtime, byte for byte, drives either.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from hwgen.board.link import LinkError
from hwgen.board.runtime import BoardRunner, open_board_folder

#: What ``--board-port`` takes for the simulated board.
SIMULATED = "sim"
#: The simulated board's clock runs some hundred times slower than the board's (a few
#: hundred thousand cycles a second for a design with an 8x8 array): a byte on its UART takes
#: milliseconds, and a reply may wait seconds behind the writes before it.
SIMULATED_BYTE_SECONDS = 0.01
SIMULATED_TIMEOUT = 60.0


class Session(BoardRunner):
    """A :class:`BoardRunner` that also reports on its link."""

    started: float = 0.0
    simulated_cycles: int | None = None

    def figures(self) -> dict[str, object]:
        """The board, its design and the link's traffic and share of the session's time."""
        wall = time.perf_counter() - self.started
        return {"port": self.link.port, "board": self.folder.descriptor["board"],
                "design": self.folder.digest, "bytes_out": self.link.bytes_out,
                "bytes_in": self.link.bytes_in, "link_seconds": round(self.link.seconds, 3),
                "session_seconds": round(wall, 3),
                **{f"{k}_seconds": round(v, 3) for k, v in self.seconds.items()},
                "read_leveling": self.leveling}

    def summary(self) -> str:
        f = self.figures()
        return (f"board {f['board']} on {f['port']} (design {str(f['design'])[:16]}): "
                f"{f['bytes_out']:,} B out, {f['bytes_in']:,} B in over the UART; of the "
                f"{f['session_seconds']:.1f} s session, {f['load_seconds']:.1f} s loading "
                f"memory and programs, {f['run_seconds']:.1f} s from start to done, "
                f"{f['read_seconds']:.1f} s reading results")


@contextlib.contextmanager
def open_session(folder_path: str | Path, port: str, *, timeout: float = 5.0
                 ) -> Iterator[Session]:
    """The board folder's board on ``port`` (``"sim"``: the simulated board), checked and
    with its DRAM initialized.

    Raises
    ------
    ValueError
        A folder that is not a board folder, or whose bitstream does not match it.
    hwgen.board.runtime.BoardMismatch
        The board runs another design.
    hwgen.board.link.LinkError
        The board cannot be opened or does not answer.
    """
    folder = open_board_folder(folder_path)
    simulated = None
    with contextlib.ExitStack() as stack:
        if port == SIMULATED:
            from hwgen.board.boards import board
            from hwgen.board.design import BoardDesign
            from sim.board_sim.board import SimulatedBoard

            design = BoardDesign(folder.config, board(folder.descriptor["board"]),
                                 folder.clock_hz, folder.baud)
            if design.digest() != folder.digest:
                raise ValueError(
                    f"{folder.directory} was built from other gateware or packages (design "
                    f"{folder.digest[:16]}); this hwgen makes design {design.digest()[:16]} of "
                    f"it: rebuild the folder with 'hwgen build --board {design.board.name}'")
            simulated = stack.enter_context(SimulatedBoard(design))
            port = simulated.url
            session = Session(folder, port, timeout=SIMULATED_TIMEOUT,
                              byte_seconds=SIMULATED_BYTE_SECONDS, simulated=True)
        else:
            session = Session(folder, port, timeout=timeout)
        session.started = time.perf_counter()
        try:
            stack.enter_context(session)
            yield session
        except LinkError as exc:
            if simulated is not None and simulated.exited() is not None:
                raise LinkError(f"{exc}; the simulated board had stopped (exit status "
                                f"{simulated.exited()}): {simulated.log[-500:]}") from None
            raise
