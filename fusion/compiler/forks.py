"""A stage's tasks on this process and forked copies of it, each taking the next task as it
frees up (:func:`fusion.compiler.scheduler.run_tasks` decides when a stage forks).

Why not :class:`concurrent.futures.ProcessPoolExecutor`: its workers wait on this process for
work. Its management thread hands them their calls, and that thread needs this process's GIL
while this process is itself running tasks: MobileNetV1-0.25's pricing showed 23 ms stalls
of the fork between two calls, and importing the pool took about 10 ms of a compile that
forks once per stage. Here nobody waits on anybody:

- before forking, this process writes every task's index into a pipe (:func:`_token_pipe`)
  and closes its writing end; each process, this one included, takes the next task by reading
  one index from it, and an empty pipe reads as the end. A read of a few bytes from a pipe is
  atomic (the kernel holds the pipe's lock for the whole read), so no two take one task;
- each fork sends every task's result as soon as it has it, on a pipe of its own (large, so
  that a fork rarely waits for this process to read); this process reads what has come
  between its own tasks, and waits on the pipes only when no task is left;
- a fork ends by ``os._exit``: it never returns into this process's stack, runs no exit
  handler and flushes none of the buffers it inherited.
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import select
import signal
import struct
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

_INDEX = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
#: Bytes asked of a fork's result pipe: room for many results before a fork waits on this
#: process (Linux's default is 64 KiB; an unprivileged process may ask up to 1 MiB).
_RESULT_PIPE_BYTES = 1 << 20
#: Whether this process is a fork, or has forks working (:func:`busy`).
_BUSY = [False]
#: Forks that ended but had not finished exiting when last looked at: collected later, so
#: that this process never waits on a fork's exit (unmapping its copy of our memory).
_EXITING: list[int] = []


@functools.cache
def most_tasks() -> int:
    """The most tasks :func:`on_forks` can hand out: a pipe holds every task's index."""
    read, write = os.pipe()
    try:
        return _grow(write, _RESULT_PIPE_BYTES) // _INDEX.size
    finally:
        os.close(read)
        os.close(write)


def busy() -> bool:
    """Whether this process is a fork, or is running a stage with forks: its tasks' own stages
    (a library's compiles are tasks whose pricing is a stage) then stay where they are,
    instead of forking again onto cores that are already working."""
    return _BUSY[0]


def on_forks(task: Callable[[int], Any], order: Sequence[int], count: int
             ) -> Iterator[tuple[int, Any]]:
    """``(i, task(i))`` for every ``i`` of ``order``, run on this process and ``count - 1``
    forks of it, each taking the next of ``order`` when it frees up; yielded as they come.

    ``task`` and what it reads are inherited by the forks (never sent); each result travels
    back pickled. A task's exception, raised here or in a fork (with the fork's traceback as a
    note), ends the stage: no process takes another task, and the forks are stopped.

    Raises
    ------
    ValueError
        If ``order`` has more than :func:`most_tasks`.
    RuntimeError
        If a fork exited before it finished (killed, or out of memory).
    """
    _collect_exited()
    tokens = _token_pipe(order)
    forks: dict[int, _Fork] = {}
    # what this process holds stays out of the forks' collections: a collection there would
    # write to every object's header, copying this process's pages into each fork
    gc.freeze()
    _BUSY[0] = True  # the forks inherit it
    try:
        for _ in range(count - 1):
            read, write = os.pipe()
            _grow(write, _RESULT_PIPE_BYTES)
            pid = os.fork()
            if pid == 0:  # the fork: never returns
                os.close(read)
                for other in forks.values():
                    os.close(other.fd)
                _serve(task, tokens, write)
            os.close(write)
            os.set_blocking(read, False)
            forks[read] = _Fork(pid, read)
        while (i := _take(tokens)) is not None:
            yield i, task(i)
            for fork in forks.values():
                yield from fork.arrived()
        while (open_ := [fd for fd, fork in forks.items() if not fork.ended]):
            ready, _, _ = select.select(open_, [], [])
            for fd in ready:
                yield from forks[fd].arrived()
    finally:
        _drain(tokens)  # after a failure, nobody takes another task
        os.close(tokens)
        for fork in forks.values():
            fork.close()
        _BUSY[0] = False
        gc.unfreeze()


class _Fork:
    """One fork seen from this process: its pid, its result pipe and what has come on it."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        self.buffer = bytearray()
        self.ended = False

    def arrived(self) -> Iterator[tuple[int, Any]]:
        """The results that have come whole since the last call (without waiting)."""
        while not self.ended:
            try:
                chunk = os.read(self.fd, _RESULT_PIPE_BYTES)
            except BlockingIOError:
                break
            if not chunk:
                pid, status = self.pid, self._wait()
                raise RuntimeError(f"a forked compile process (pid {pid}) exited with "
                                   f"status {status} before finishing its tasks; run with "
                                   f"--jobs 1 to compile on this process only")
            self.buffer += chunk
            yield from self._messages()

    def _messages(self) -> Iterator[tuple[int, Any]]:
        while len(self.buffer) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(self.buffer)
            end = _LENGTH.size + size
            if len(self.buffer) < end:
                return
            # our own fork's bytes, written by _send just now: safe to unpickle
            kind, value = pickle.loads(self.buffer[_LENGTH.size:end])
            del self.buffer[:end]
            if kind == "error":
                raise value
            if kind == "end":
                self.ended = True
                return
            yield value

    def _wait(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        """Stop the fork if it has not ended, and collect it (or leave it to
        :func:`_collect_exited` if it is still exiting)."""
        os.close(self.fd)
        if not self.pid:
            return
        if not self.ended:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        elif os.waitpid(self.pid, os.WNOHANG)[0] == 0:
            _EXITING.append(self.pid)


def _serve(task: Callable[[int], Any], tokens: int, out: int) -> None:
    """In a fork: the tasks it takes, each result sent at once, until none is left or one
    fails; then exit, whatever happened."""
    status = 0
    os.environ["HWGEN_NO_PROGRESS"] = "1"  # the parent's line counts this fork's tasks
    try:
        while (i := _take(tokens)) is not None:
            _send(out, "done", (i, task(i)))
        _send(out, "end", None)
    except BaseException as exc:  # noqa: BLE001 - anything a task raises goes to the parent
        try:
            _send(out, "error", _portable(exc))
        except BaseException:  # noqa: BLE001 - the parent is gone or the pipe is broken
            status = 1
    finally:
        os._exit(status)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` with the fork's traceback as a note, or a RuntimeError naming it if it does not
    survive pickling (an exception whose constructor takes other arguments than it keeps)."""
    where = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any failure to round-trip
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    exc.add_note(f"raised in a forked compile process:\n{where}")
    return exc


def _send(fd: int, kind: str, value: Any) -> None:
    data = pickle.dumps((kind, value), protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _token_pipe(order: Sequence[int]) -> int:
    """The reading end of a pipe holding every index of ``order``, its writing end closed (so
    that an emptied pipe reads as its end)."""
    if len(order) > most_tasks():
        raise ValueError(f"{len(order)} tasks do not fit a pipe (at most {most_tasks()})")
    read, write = os.pipe()
    data = b"".join(_INDEX.pack(i) for i in order)
    try:
        _grow(write, len(data))
        os.set_blocking(write, False)  # a pipe smaller than it said fails, never hangs
        if os.write(write, data) != len(data):
            raise OSError(f"a pipe took part of {len(order)} task indices")
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read


def _take(tokens: int) -> int | None:
    data = os.read(tokens, _INDEX.size)
    if not data:
        return None
    if len(data) != _INDEX.size:  # cannot happen: reads are atomic and whole indices wait
        raise RuntimeError(f"read {len(data)} bytes of a task index from its pipe")
    return _INDEX.unpack(data)[0]


def _drain(tokens: int) -> None:
    while os.read(tokens, 1 << 16):
        pass


def _grow(fd: int, size: int) -> int:
    """The pipe's capacity in bytes after asking for at least ``size`` (best effort: Linux
    lets an unprivileged process ask up to ``/proc/sys/fs/pipe-max-size``)."""
    import fcntl

    get, set_ = getattr(fcntl, "F_GETPIPE_SZ", None), getattr(fcntl, "F_SETPIPE_SZ", None)
    if get is None or set_ is None:
        return 1 << 14  # what macOS gives a pipe at first
    have = fcntl.fcntl(fd, get)
    if have < size:
        try:
            have = fcntl.fcntl(fd, set_, size)
        except OSError:
            pass
    return have


def _collect_exited() -> None:
    """Collect the forks that have finished exiting since they ended."""
    for pid in list(_EXITING):
        try:
            if os.waitpid(pid, os.WNOHANG)[0] != 0:
                _EXITING.remove(pid)
        except ChildProcessError:
            _EXITING.remove(pid)
