"""Replacing an output folder whole (variant folders, plan folders and simulator builds), and a
file whole (:func:`write_file`: cache entries, a library's index, a report page).

Each is written into a temporary sibling folder, then swapped into place in one step, so a
reader (or the next run after a crash) finds the old folder or the new one, never a mix::

    with replacing(Path("build/v4x4")) as tmp:
        (tmp / "variant.json").write_text(...)

A process killed outright leaves its temporary folder, named for its process id; the next
:func:`replacing` of the same target removes it once that process is gone.

A user's output (``generate -o``, ``compile -o``, ``train -o``) passes what the target held
when it was checked (:func:`contents`: each entry's path, type, inode, size and modification
time); it is compared again just before the swap, so that a file the user put into the
target, or changed there, while the replacement was being written makes the swap refuse and
is never deleted. A cache (a simulator build, made under a lock or by any process alike)
passes nothing and is replaced whatever it holds.

Not gateware: :mod:`hwgen.gateware.sources` leaves this module out of the build digest.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole: into a temporary sibling that is renamed over it, so a
    reader finds the old file or the new one; two writers each rename a whole file, and the
    last rename wins.

    Raises
    ------
    OSError
        If the folder cannot be made or written; nothing is left behind then.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the rename must not land before the data
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a shared cache is readable
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def temp_prefix(target: Path) -> str:
    """The name every temporary folder of ``target`` starts with (hidden, beside it)."""
    return f".{target.name}.tmp-"


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``).

    Returns
    -------
    bool
        False where the system or the file system cannot (the caller falls back to two
        renames).

    Raises
    ------
    OSError
        If the swap is supported but failed (permissions, a vanished path).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"cannot replace {b}: {os.strerror(err)}", str(b))


def swap_in(tmp: Path, target: Path) -> None:
    """Put the finished folder ``tmp`` at ``target``; an old ``target`` ends up at ``tmp``
    (for the caller to delete), or nothing does."""
    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        os.replace(tmp, target)  # onto nothing, or onto an empty folder: one rename
    elif not exchange(tmp, target):
        # Two renames: for an instant there is no folder at target (never a mixed one).
        old = tmp.with_name(tmp.name + "-old")
        os.replace(target, old)
        os.replace(tmp, target)
        os.replace(old, tmp)
    _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    # The rename must reach the disk after the files it publishes (best effort: not every
    # file system lets a folder be synced).
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(target: Path) -> None:
    """Remove temporary folders of ``target`` whose process is gone (killed mid-write)."""
    prefix = temp_prefix(target)
    for tmp in target.parent.glob(f"{prefix}*"):
        pid = tmp.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


#: One entry of :func:`contents`: path relative to the target, file type bits, inode, size
#: and modification time (ns; 0 for a folder, whose own time changes with its entries').
Entry = tuple[str, int, int, int, int]


def contents(target: Path) -> frozenset[Entry]:
    """What ``target`` holds, to tell later whether anyone changed it: every entry below it
    (symbolic links not followed), or the target itself if it is not a folder. A missing
    target and an empty folder hold nothing alike (neither has anything to lose)."""
    target = Path(target)
    try:
        st = target.lstat()
    except FileNotFoundError:
        return frozenset()
    if not stat.S_ISDIR(st.st_mode):
        return frozenset({_entry(".", st)})
    out = set()
    for folder, dirs, files in os.walk(target):
        for name in dirs + files:
            path = Path(folder, name)
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile: not listed
                out.add(_entry(path.relative_to(target).as_posix(), path.lstat()))
    return frozenset(out)


def _entry(name: str, st: os.stat_result) -> Entry:
    kind = stat.S_IFMT(st.st_mode)
    is_dir = kind == stat.S_IFDIR
    return (name, kind, st.st_ino, 0 if is_dir else st.st_size, 0 if is_dir else st.st_mtime_ns)


def check_unchanged(target: Path, checked: frozenset[Entry]) -> None:
    """Refuse to replace ``target`` if it no longer holds what it did when it was checked.

    Raises
    ------
    ValueError
        Naming the target and the first entry added, changed or removed since.
    """
    now = contents(target)
    if now == checked:
        return
    before, after = {e[0]: e for e in checked}, {e[0]: e for e in now}
    name = min(set(before) ^ set(after) or {n for n in before if before[n] != after[n]})
    what = "added" if name not in before else "removed" if name not in after else "changed"
    shown = target.name if name == "." else name
    raise ValueError(f"{target} changed while hwgen was writing its replacement ({shown} was "
                     f"{what}); nothing was replaced and its files are kept: move them out or "
                     f"choose another output, then run again")


@contextlib.contextmanager
def replacing(target: Path, *, checked: frozenset[Entry] | None = None) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``target`` to fill; swap it into place when the
    body returns, unless ``target`` changed since ``checked`` (:func:`check_unchanged`).

    Parameters
    ----------
    target : Path
        The folder to replace (or create).
    checked : frozenset, optional
        :func:`contents` of ``target`` when the caller checked that it may be replaced (a
        command checks its output before its work). None (a cache's folder): replaced
        whatever it holds.

    If the body raises (or the process is interrupted), or ``target`` changed, the
    temporary folder is removed and ``target`` is untouched. Checking that ``target`` may be
    replaced is the caller's job.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(target)
    tmp = target.with_name(f"{temp_prefix(target)}{os.getpid()}-{secrets.token_hex(4)}")
    tmp.mkdir()
    try:
        yield tmp
        if checked is not None:  # a file put there during the work would be deleted
            check_unchanged(target, checked)
        swap_in(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the old folder, or an unfinished new one
