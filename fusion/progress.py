"""Progress lines for long compiles and runs: a tqdm bar on stderr, only when stderr is a
terminal (a log or a pipe gets none) and ``HWGEN_NO_PROGRESS`` is not set."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def wanted() -> bool:
    """Whether progress lines are shown: stderr is a terminal, and not turned off."""
    return sys.stderr.isatty() and not os.environ.get("HWGEN_NO_PROGRESS")


def steps(items: Iterable[T], what: str, *, show: bool, unit: str = "step",
          total: int | None = None) -> Iterator[T]:
    """``items``, with a bar named ``what`` that counts them when ``show``; the bar goes
    away when done."""
    if not show:
        yield from items
        return
    from tqdm import tqdm

    bar: Any = tqdm(items, desc=what, unit=unit, total=total, leave=False,
                    dynamic_ncols=True, file=sys.stderr)
    try:
        yield from bar
    finally:
        bar.close()
