"""Facts derived from a kernel's parameters, kept beside the kernel cache.

Some facts about a kernel take a program's worth of work to derive and are asked again by
every command: whether a window convolution's program fits the instruction memory and in
which column chunks (:func:`fusion.kernels.conv.program.plain_plan`, which builds and
assembles candidate programs), or its cycles by the analytical timing model (which walks
the program instruction by instruction). Each is a pure function of the variant, the
kernel's parameters and the code generator; a process keeps them in ``functools`` caches, and
with a store in use (:func:`use`: the CLI's kernel cache folder, ``derived/``) they are kept
on disk too, so that a warm ``hwgen run`` reading a plan back does not derive them again
(ResNet-8 under cProfile: 0.6 s of the plan's legality checks, 0.4 s of the shadow checks'
timing floors).

An entry is one small JSON file named by the digest of the fact's name, its arguments and
the code generator's version (:func:`fusion.kernels.cache.codegen_version`, so a change to
the code misses, as the kernel cache does); it holds the arguments' digest again and the
value. An entry that is damaged, too large or of the wrong form is derived again and
replaced: the store is never a reason to fail, nor to give a different answer.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Larger entries are not read (every value here is a few numbers).
_MAX_BYTES = 4096

_ROOT: list[Path | None] = [None]


def use(root: Path | str | None) -> None:
    """Keep derived facts in ``root`` from now on in this process (None: in memory only)."""
    _ROOT[0] = None if root is None else Path(root)


def remembered(name: str, parts: Mapping[str, Any], derive: Callable[[], T],
               decode: Callable[[Any], T]) -> T:
    """``decode(derive())``, or ``decode`` of the value kept for ``name`` and ``parts`` (JSON
    data: a variant's and a kernel's dataclasses) in the store in use: ``derive`` returns
    JSON data, and ``decode`` turns it into the value (the same type, store or not), raising
    ``ValueError`` (or ``TypeError``) for any other form."""
    folder = _ROOT[0]
    if folder is None:
        return decode(derive())
    from fusion.kernels.cache import cache_key, codegen_version

    key = cache_key({"fact": name, **parts}, codegen_version())
    path = folder / name / f"{key}.json"
    try:
        if path.stat().st_size <= _MAX_BYTES:
            data = json.loads(path.read_bytes())
            if isinstance(data, dict) and data.get("key") == key:
                return decode(data["value"])
    except (OSError, ValueError, TypeError, KeyError):
        pass  # missing or damaged: derived again, and replaced
    value = derive()
    _write(path, {"key": key, "value": value})
    return decode(value)


def whole_number(value: Any) -> int:
    """``decode`` of a count (cycles): a JSON integer, not below 0."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a count")
    return value


def cycles(name: str, config: Any, params: Any, platform: Any, derive: Callable[[], int]
           ) -> int:
    """A kernel's cycles by the analytical model (``derive``), :func:`remembered` as
    ``name`` of the variant ``config``, the kernel's ``params`` and the ``platform``."""
    return remembered(name, {"config": config, "params": params, "platform": platform},
                      derive, whole_number)


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (a reader sees the old file or the new one, never half); a store
    that cannot be written is only slower."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
