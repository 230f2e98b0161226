"""A stage's tasks on this process and forks of it (fusion.compiler.forks): every task once,
whoever runs it; a fork's failure, exit or unpicklable error ends the stage with its reason;
a failure here stops the forks at once; nothing is left running."""

from __future__ import annotations

import os
import time

import pytest

from fusion.compiler import forks, scheduler
from fusion.compiler.forks import most_tasks, on_forks
from fusion.compiler.scheduler import CompileTimes, Workers, run_tasks

_PARENT = os.getpid()


def _where(i: int) -> tuple[int, int]:
    time.sleep(0.002)  # long enough that both processes take some
    return i * i, os.getpid()


def _leftover_forks() -> list[int]:
    """Forks of this process still not collected once they have had 10 s to exit (one still
    exiting when its stage ended is collected later)."""
    deadline = time.monotonic() + 10
    while True:
        forks._collect_exited()
        if not forks._EXITING or time.monotonic() > deadline:
            return list(forks._EXITING)
        time.sleep(0.02)


def test_every_task_runs_once_on_one_of_the_processes():
    pairs = list(on_forks(_where, list(range(200)), 2))
    got = dict(pairs)
    assert sorted(i for i, _ in pairs) == list(range(200))
    assert all(square == i * i for i, (square, _) in got.items())
    pids = {pid for _, pid in got.values()}
    assert _PARENT in pids and len(pids) == 2  # this process works too
    assert _leftover_forks() == []


def _fails_in_the_fork(i: int) -> int:
    time.sleep(0.01)
    if os.getpid() != _PARENT:
        raise KeyError(f"task {i}")
    return i


def test_a_fork_failure_comes_back_with_its_traceback():
    with pytest.raises(KeyError, match="task") as caught:
        list(on_forks(_fails_in_the_fork, list(range(50)), 2))
    assert any("raised in a forked compile process" in note and "_fails_in_the_fork" in note
               for note in caught.value.__notes__)
    assert _leftover_forks() == []


class _Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:  # pickling keeps one argument, not two
        super().__init__(f"{a} and {b}")


def _raises_unpicklable(i: int) -> int:
    time.sleep(0.01)
    if os.getpid() != _PARENT:
        raise _Unpicklable(i, i)
    return i


def test_an_error_that_cannot_be_pickled_still_names_itself():
    with pytest.raises(RuntimeError, match=r"_Unpicklable: \d+ and \d+"):
        list(on_forks(_raises_unpicklable, list(range(50)), 2))


def _exits_in_the_fork(i: int) -> int:
    time.sleep(0.01)
    if os.getpid() != _PARENT:
        os._exit(3)
    return i


def test_a_fork_that_exits_midway_fails_the_stage():
    with pytest.raises(RuntimeError, match=r"\(pid [1-9]\d*\) exited with status 3 before "
                                           r"finishing its tasks; run with --jobs 1"):
        list(on_forks(_exits_in_the_fork, list(range(50)), 2))
    assert _leftover_forks() == []


def _parent_fails_fork_sleeps(i: int) -> int:
    if os.getpid() == _PARENT:
        time.sleep(0.3)  # the fork has started and taken the other task
        raise ValueError("failed here")
    time.sleep(60)
    return i


def test_a_failure_here_stops_the_forks_at_once():
    began = time.perf_counter()
    with pytest.raises(ValueError, match="failed here"):
        list(on_forks(_parent_fails_fork_sleeps, [0, 1], 2))
    assert time.perf_counter() - began < 30  # the fork's 60 s task was stopped
    assert _leftover_forks() == []


def test_more_tasks_than_a_pipe_holds_are_refused_or_stay_here(monkeypatch):
    with pytest.raises(ValueError, match="do not fit a pipe"):
        list(on_forks(_where, list(range(most_tasks() + 1)), 2))
    monkeypatch.setattr(scheduler, "most_tasks", lambda: 3)
    times = CompileTimes()
    out = run_tasks(_where, list(range(8)), workers=Workers(jobs=2, fork_above=0),
                    sizes=[1] * 8, stage="many", names=[str(i) for i in range(8)], times=times)
    assert [square for square, _ in out] == [i * i for i in range(8)]
    assert times.where["many"] == "here"
