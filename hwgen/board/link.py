"""The host's end of the board's UART bridge: LiteX's UARTBone protocol over pyserial.

Every transfer is a burst of 32-bit bus words, as LiteX's ``Stream2Wishbone`` takes it: one
command byte (:data:`WRITE` or :data:`READ`, address incrementing), a length byte (1 to 255
words), the word address (byte address / 4) in four bytes, most significant first, then for a
write the words, each most significant byte first. A write has no reply; a read's reply is its
words. The bridge has no receive buffer beyond one byte, so a command is sent only after the
previous read's reply is in (a write streams: the bridge finishes each bus write long before
the next word's four bytes have arrived). A command left half sent resets after 100 ms of
silence; :meth:`UartBone.open` waits that long first, so a session starts in step whatever
the last one left.

``port`` is anything pyserial opens: ``/dev/ttyUSB0``, ``COM3``, or ``socket://host:port``
for the simulated board (:mod:`sim.board_sim`).
"""

from __future__ import annotations

import time

import numpy as np

WRITE = 0x01
READ = 0x02
#: Words one command moves at most.
BURST = 255
#: The bridge's reset timeout (LiteX's 100 ms), and a margin.
RESYNC_SECONDS = 0.12


class LinkError(RuntimeError):
    """The board cannot be opened, or did not answer in time."""


class UartBone:
    """One session on the bridge.

    Parameters
    ----------
    port : str
        The serial device or pyserial URL.
    baud : int
        The bridge's bit rate (the board folder's).
    timeout : float
        Seconds a read's reply may take before the board counts as gone, beyond the time
        the bytes before it take on the wire (a reply comes after the bridge has worked
        through every write sent before its command).
    byte_seconds : float, optional
        The time one byte takes on the wire, with a margin: twice its ten bits at ``baud`` by
        default; a simulated board, whose clock runs slower than real time, takes longer.

    Attributes
    ----------
    bytes_out, bytes_in : int
        Bytes sent and received.
    seconds : float
        Wall time spent in transfers (the link's share of a run).
    """

    def __init__(self, port: str, baud: int, *, timeout: float = 5.0,
                 byte_seconds: float | None = None):
        self.port, self.baud, self.timeout = port, baud, timeout
        self.byte_seconds = 20 / baud if byte_seconds is None else byte_seconds
        self._queued = 0  # bytes sent since the last reply: on the wire before the next one
        self.bytes_out = self.bytes_in = 0
        self.seconds = 0.0
        self._serial = None

    def open(self) -> UartBone:
        """Open the port (LinkError naming it when it cannot be)."""
        import serial

        try:
            self._serial = serial.serial_for_url(self.port, baudrate=self.baud,
                                                 timeout=self.timeout,
                                                 write_timeout=self.timeout)
        except (serial.SerialException, ValueError, OSError) as exc:
            raise LinkError(f"cannot open the board's serial port {self.port}: {exc}; check "
                            f"--board-port (pyserial-ports lists the ports) and that the "
                            f"board is plugged in") from None
        time.sleep(RESYNC_SECONDS)
        self._serial.reset_input_buffer()
        return self

    def close(self) -> None:
        if self._serial is not None:
            self._serial.close()
            self._serial = None

    def __enter__(self) -> UartBone:
        return self.open() if self._serial is None else self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, data: bytes) -> None:
        import serial

        try:
            self._serial.write(data)
        except (serial.SerialException, OSError) as exc:
            raise LinkError(f"the board's serial port {self.port} failed while writing: "
                            f"{exc}") from None
        self.bytes_out += len(data)
        self._queued += len(data)

    @staticmethod
    def _header(cmd: int, addr: int, words: int) -> bytes:
        if addr % 4:
            raise ValueError(f"bus address {addr:#x} is not a multiple of 4")
        return bytes([cmd, words]) + (addr // 4).to_bytes(4, "big")

    def write(self, addr: int, words) -> None:
        """Write 32-bit ``words`` from bus byte address ``addr`` on."""
        words = np.asarray(words, dtype=np.uint32)
        started = time.perf_counter()
        be = words.astype(">u4").tobytes()
        parts = []
        for i in range(0, len(words), BURST):
            n = min(BURST, len(words) - i)
            parts.append(self._header(WRITE, addr + 4 * i, n) + be[4 * i:4 * (i + n)])
        self._send(b"".join(parts))
        self.seconds += time.perf_counter() - started

    def read(self, addr: int, count: int) -> np.ndarray:
        """Read ``count`` 32-bit words from bus byte address ``addr`` on.

        Raises
        ------
        LinkError
            If the board's reply is short after ``timeout`` seconds.
        """
        import serial

        started = time.perf_counter()
        out = np.empty(count, dtype=np.uint32)
        for i in range(0, count, BURST):
            n = min(BURST, count - i)
            self._send(self._header(READ, addr + 4 * i, n))
            wait = self.timeout + (self._queued + 4 * n) * self.byte_seconds
            try:
                self._serial.timeout = wait
                reply = self._serial.read(4 * n)
            except (serial.SerialException, OSError) as exc:
                raise LinkError(f"the board's serial port {self.port} failed while reading: "
                                f"{exc}") from None
            self.bytes_in += len(reply)
            self._queued = 0
            if len(reply) != 4 * n:
                raise LinkError(
                    f"the board on {self.port} sent {len(reply)} of {4 * n} bytes within "
                    f"{wait:.3g} s of a read at {addr + 4 * i:#x}: is it powered, "
                    f"flashed with this folder's bitstream (see docs/boards.md) and at "
                    f"{self.baud} baud?")
            out[i:i + n] = np.frombuffer(reply, dtype=">u4")
        self.seconds += time.perf_counter() - started
        return out

    def write_bytes(self, addr: int, data: bytes) -> None:
        """Write ``data`` (a multiple of 4 bytes) to memory at ``addr``, little-endian words
        as the bus's byte lanes place them."""
        if len(data) % 4:
            raise ValueError(f"{len(data)} bytes is not a whole number of bus words")
        self.write(addr, np.frombuffer(bytes(data), dtype="<u4"))

    def read_bytes(self, addr: int, size: int) -> bytes:
        """Read ``size`` bytes (a multiple of 4) of memory from ``addr``."""
        if size % 4:
            raise ValueError(f"{size} bytes is not a whole number of bus words")
        return self.read(addr, size // 4).astype("<u4").tobytes()
