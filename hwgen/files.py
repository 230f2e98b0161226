"""Reading the user's files: only regular files (:func:`open_regular`), one array of a
``.npy`` (:func:`load_array`), strict JSON (:func:`loads_json`); and the JSON text hwgen
writes for people to read (:func:`dumps_json`).

Every command reads what it is given through here, so that a FIFO (which blocks its reader
until some writer comes, so forever), a device (which may never end) or a folder is refused
in one line before it is opened: opened without blocking, checked, then read.

Not gateware: :mod:`hwgen.gateware.sources` leaves this module out of the build digest.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

#: What a path is when it is not a regular file, by its type bits.
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFDIR: "a folder"}


class NotRegularFile(ValueError):
    """A path given as a file that is a FIFO, a socket, a device or a folder."""


def _refuse(path: Path | str, mode: int, what: str) -> NotRegularFile:
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return NotRegularFile(f"{what + ' ' if what else ''}{path} is {kind}, not a regular file; "
                          f"give a regular file")


def check_regular(path: Path | str, what: str = "") -> None:
    """Refuse ``path`` if it exists and is not a regular file (symbolic links followed), for
    a reader that hands the path to a library (SQLite, onnx, skops) or that checks
    ``is_file()`` and would call a FIFO missing. A missing path passes: the caller names it.

    Raises
    ------
    NotRegularFile
        Naming ``what`` (the option or role, e.g. ``"--input"``), the path and its kind.
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode):
        raise _refuse(path, mode, what)


def open_regular(path: Path | str, what: str = "") -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file.

    It is opened without blocking (a FIFO's open would wait for a writer), checked on the
    open descriptor (so it cannot be swapped after a check), then read normally.

    Raises
    ------
    NotRegularFile
        A FIFO, socket, device or folder, naming ``what`` and the path.
    OSError
        A missing or unreadable file (``FileNotFoundError``...).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except IsADirectoryError:
        raise _refuse(path, stat.S_IFDIR, what) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path | str, what: str = "") -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`)."""
    with open_regular(path, what) as f:
        return f.read()


def read_text(path: Path | str, what: str = "") -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`open_regular`).

    Raises
    ------
    UnicodeDecodeError
        If it is not UTF-8 text.
    """
    return read_bytes(path, what).decode("utf-8")


def load_array(path: Path | str, what: str) -> Any:
    """The one array of the ``.npy`` file ``path``, without pickle.

    Raises
    ------
    ValueError
        ``cannot read {what} {path}: ...`` for a missing, unreadable or non-regular file, a
        pickled object array or anything that is not a ``.npy``; and an ``.npz`` archive,
        naming its arrays (``np.load`` returns an archive there, not an array).
    """
    import numpy as np

    try:
        with open_regular(path, what) as f:
            value = np.load(f, allow_pickle=False)
            archive = isinstance(value, np.lib.npyio.NpzFile)
            if archive:
                names = ", ".join(value.files) or "no arrays"
                value.close()
    except NotRegularFile:
        raise
    except (OSError, EOFError, ValueError) as exc:  # EOFError: an empty file
        raise ValueError(f"cannot read {what} {path}: {exc}") from None
    if archive:
        raise ValueError(f"{what} {path} is an .npz archive (of {names}), not one array; save "
                         f"each input with np.save as its own .npy file")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def loads_json(text: str | bytes) -> Any:
    """``text`` parsed as JSON, refusing ``NaN``, ``Infinity`` and ``-Infinity`` (Python's
    json reads them; no other reader does).

    Raises
    ------
    ValueError
        Text that is not JSON (``json.JSONDecodeError``) or holds one of those constants.
    """
    return json.loads(text, parse_constant=_no_constant)


def dumps_json(value: Any, levels: int = 2) -> str:
    """``value`` as JSON text whose first ``levels`` levels of objects and arrays are
    indented one space a level (as ``json.dumps(value, indent=1)`` indents them all), and
    whose deeper ones are each written on one line: one line per tensor, node and
    initializer of a graph, per step of a plan.

    Why: an indented dump runs Python's pure-Python encoder on every element; each one-line
    part goes to the C encoder instead (MobileNetV1-0.25's ``graph.json``, 3.5 MB: 27 ms
    by ``json.dumps(..., indent=1)``, 16 ms so), and a graph's per-channel scales are no
    longer one number a line.

    Raises
    ------
    ValueError
        A float that is not finite (JSON has none; ``allow_nan=False``).
    TypeError
        A value JSON cannot hold.
    """
    out: list[str] = []
    _dump(value, "\n", levels, out)
    return "".join(out)


#: The C encoder, made once (``json.dumps(..., allow_nan=False)`` makes one a call).
_encode = json.JSONEncoder(allow_nan=False).encode


def _dump(value: Any, pad: str, levels: int, out: list[str]) -> None:
    inner = pad + " "
    if levels > 0 and isinstance(value, dict) and value:
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append(("," if i else "") + inner + _encode(_key(key)) + ": ")
            _dump(item, inner, levels - 1, out)
        out.append(pad + "}")
    elif levels > 0 and isinstance(value, (list, tuple)) and value:
        out.append("[")
        for i, item in enumerate(value):
            out.append(("," if i else "") + inner)
            _dump(item, inner, levels - 1, out)
        out.append(pad + "]")
    else:
        out.append(_encode(value))


def _key(key: Any) -> str:
    # what json.dumps makes of a key that is not a string
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
