"""The ``$readmemh``/``$writememh`` text through which a job's memory moves in and out of the
simulation top, for both harnesses (:mod:`sim.tb.harness`, :mod:`sim.cxx_driver`).

Imported inside the simulator as well, so it depends on numpy only.
"""

from __future__ import annotations

import numpy as np

from sim.tb.jobfile import POISON, JobSpec


def hex_lines(data: np.ndarray, port_bytes: int) -> str:
    """Bytes -> ``$readmemh`` lines, one little-endian word a line (most significant first)."""
    rows = np.ascontiguousarray(np.frombuffer(data.tobytes(), np.uint8).reshape(
        -1, port_bytes)[:, ::-1])
    text = rows.tobytes().hex()
    width = 2 * port_bytes
    return "\n".join(text[i:i + width] for i in range(0, len(text), width))


def segments(job: JobSpec, port_bytes: int) -> list[tuple[int, np.ndarray]]:
    """What a job writes before it starts, in order: zeros over what the previous job of the
    launch wrote, the poison byte over the read regions, then the job's own segments."""
    parts = [(addr, np.zeros(words * port_bytes, np.uint8)) for addr, words in job.clear]
    parts += [(addr, np.full(size, POISON, np.uint8)) for addr, size in job.reads.values()]
    return parts + list(job.writes)


def load_text(job: JobSpec, port_bytes: int) -> str:
    """The ``$readmemh`` file of a job's memory image on the ideal memory ("" if empty)."""
    parts = [f"@{addr:x}\n" + hex_lines(data, port_bytes)
             for addr, data in segments(job, port_bytes)]
    return "\n".join(parts) + "\n" if parts else ""


def dumped_words(text: str) -> list[str]:
    """The words of a ``$writememh`` file, one hex string each (comment lines and @ dropped)."""
    words = []
    for line in text.splitlines():
        if not line.lstrip().startswith("//"):
            words += [w for w in line.split() if not w.startswith("@")]
    return words


def region_bytes(text: str, words: int, port_bytes: int, what: str) -> np.ndarray:
    """The bytes of a ``$writememh`` dump of ``words`` words, little-endian words in order.

    Raises
    ------
    RuntimeError
        If the dump does not hold exactly ``words`` words.
    """
    lines = dumped_words(text)
    if len(lines) != words:
        raise RuntimeError(f"$writememh wrote {len(lines)} words of {what}, not {words}")
    raw = bytes.fromhex("".join(lines))
    return np.ascontiguousarray(np.frombuffer(raw, np.uint8).reshape(
        words, port_bytes)[:, ::-1]).reshape(-1)
