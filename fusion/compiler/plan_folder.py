"""The plan folder: a compiled model as a deployable artifact, written whole and read back checked.

``hwgen compile -o DIR`` writes (:func:`write_plan`)::

    DIR/plan.json       the plan: steps, memory plan, each kernel's metadata, and the size and
                        SHA-256 of every other file; its own SHA-256 in "digest"
    DIR/graph.json      the graph after the passes (hwgen JSON graph format)
    DIR/explain.txt     the engine's choices (--explain)
    DIR/kernels/NN_<kernel>.bin   each kernel's program: 64-bit words, little-endian
    DIR/kernels/NN_<kernel>.asm   its listing

The graph is stored *after* the passes rather than as the original model bytes: it is exactly
what the kernels were compiled from (their node names, tensors and constants), it reads
without ONNX, and a run from the plan cannot depend on this hwgen's passes rewriting the
model the same way as the one that compiled it. The source model's SHA-256 is recorded too,
so a run given both a model and a plan can check that they belong together.

A folder is written into a temporary sibling and renamed into place (exchanged atomically
with an old plan where the system allows it), so no stale kernel file survives a recompile
and an interruption leaves the old plan or the new one, never a mix. A non-empty folder that
is not an hwgen plan is refused, never emptied.

:func:`read_plan` (:mod:`fusion.compiler.plan_reader`) rebuilds the
:class:`~fusion.compiler.plan.CompiledModel` from a folder without recompiling.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fusion.compiler.plan import PLAN_TAG, CompiledModel
from fusion.frontend.json_format import to_text as graph_to_text
from hwgen.atomic import contents, replacing
from hwgen.files import NotRegularFile, dumps_json, loads_json, open_regular, read_bytes
from hwgen.gateware.sources import gateware_digest

PLAN_FILE = "plan.json"
GRAPH_FILE = "graph.json"
EXPLAIN_FILE = "explain.txt"
KERNELS_DIR = "kernels"
#: What a plan folder holds; any other entry makes a folder "not a plan" to the writer.
MEMBERS = frozenset({PLAN_FILE, GRAPH_FILE, EXPLAIN_FILE, KERNELS_DIR,
                     "plan.json.tmp"})  # plan.json.tmp: left by hwgen before plan format 3
#: ``plan.json`` is read whole before anything is checked: refuse a larger one unread.
MAX_PLAN_BYTES = 64 << 20


class PlanError(ValueError):
    """A plan folder that cannot be written or used: the message names the file and the fix."""


def plan_digest(plan: Mapping[str, Any]) -> str:
    """SHA-256 of ``plan`` without its ``digest`` key, as canonical JSON."""
    body = {k: v for k, v in plan.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def file_stem(index: int, name: str) -> str:
    """The name of step ``index``'s kernel files (without extension)."""
    return f"{index:02d}_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in blocks (a model may be large)."""
    with open_regular(path, "model") as f:  # a FIFO would block the read
        return hashlib.file_digest(f, "sha256").hexdigest()


# -- is it a plan? ------------------------------------------------------------------------------


def load_plan_json(path: Path) -> Any:
    """The parsed ``plan.json`` at ``path``.

    Raises
    ------
    PlanError
        If it is missing, larger than :data:`MAX_PLAN_BYTES`, unreadable or not JSON.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise PlanError(f"no plan at {path.parent}: {path.name} is missing") from None
    if size > MAX_PLAN_BYTES:
        raise PlanError(f"{path} has {size:,} bytes, more than any plan "
                        f"({MAX_PLAN_BYTES:,}); it is not an hwgen plan")
    try:
        return loads_json(read_bytes(path, "plan").decode("utf-8"))
    except NotRegularFile as exc:  # a FIFO would block the read forever
        raise PlanError(str(exc)) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PlanError(f"{path} is not valid JSON ({str(exc) or 'nested too deep'}); it is "
                        f"truncated or damaged") from None


def is_plan(data: Any) -> bool:
    """Is parsed ``plan.json`` data an hwgen plan (of any format version)?"""
    if not isinstance(data, dict):
        return False
    if data.get("format") == PLAN_TAG:
        return True
    # plan formats 1 and 2 had an integer "format" and no tag
    return isinstance(data.get("format"), int) and isinstance(data.get("steps"), list)


def check_output_folder(folder: Path | str) -> frozenset:
    """Refuse ``folder`` as ``hwgen compile``'s output unless it is new, empty or a plan.

    A plan folder may be replaced whole (its ``plan.json`` is an hwgen plan and it holds
    nothing but :data:`MEMBERS`, with only ``.bin``/``.asm`` files in ``kernels/``), so
    nothing of the user's is ever deleted.

    Returns
    -------
    frozenset
        What the folder holds now (:func:`hwgen.atomic.contents`), for :func:`write_plan`
        to refuse a folder changed since (files put there during the compile).

    Raises
    ------
    PlanError
        Naming the folder, what makes it not a plan, and the fix.
    """
    folder = Path(folder)
    if not folder.exists():
        if folder.is_symlink():
            raise PlanError(f"{folder} is a broken symbolic link; choose another folder for -o")
        return contents(folder.resolve())
    if not folder.is_dir():
        raise PlanError(f"{folder} is a file, not a plan folder; choose a new or empty "
                        f"folder for -o")
    checked = contents(folder.resolve())
    entries = sorted(folder.iterdir())
    if not entries:
        return checked
    fix = "choose a new or empty folder for -o (hwgen compile replaces only a plan folder)"
    plan = folder / PLAN_FILE
    if not plan.is_file():
        raise PlanError(f"{folder} is not empty and holds no {PLAN_FILE}, so it is not an "
                        f"hwgen plan; {fix}")
    try:
        data = load_plan_json(plan)
    except PlanError as exc:
        raise PlanError(f"{exc}, so {folder} is not an hwgen plan; {fix}") from None
    if not is_plan(data):
        raise PlanError(f"{plan} is not an hwgen plan; {fix}")
    for entry in entries:
        if entry.name not in MEMBERS:
            raise PlanError(f"{folder} holds {entry.name}, which is not part of an hwgen plan; "
                            f"move it out, or {fix}")
    kernels = folder / KERNELS_DIR
    if kernels.exists():
        if not kernels.is_dir() or kernels.is_symlink():
            raise PlanError(f"{kernels} is not a folder of kernel files; {fix}")
        for entry in sorted(kernels.iterdir()):
            if entry.suffix not in (".bin", ".asm") or not entry.is_file():
                raise PlanError(f"{folder} holds {KERNELS_DIR}/{entry.name}, which is not "
                                f"part of an hwgen plan; move it out, or {fix}")
    return checked


# -- writing ------------------------------------------------------------------------------------


def write_plan(compiled: CompiledModel, folder: Path | str, *,
               source: Path | str | None = None,
               checked: frozenset | None = None) -> dict[str, Any]:
    """Write the plan folder of ``compiled`` (see the module docstring), replacing an old plan.

    Parameters
    ----------
    compiled : CompiledModel
    folder : path
        New, empty, or a plan folder (:func:`check_output_folder`).
    source : path, optional
        The model file it was compiled from; its path and SHA-256 are recorded.
    checked : frozenset, optional
        What :func:`check_output_folder` returned before the compile: a folder changed
        since is refused (by default, since this was called).

    Returns
    -------
    dict
        What ``plan.json`` holds.

    Raises
    ------
    PlanError
        If ``folder`` is not empty and not a plan.
    ValueError
        If ``folder`` changed since ``checked`` (:func:`hwgen.atomic.check_unchanged`).
    """
    folder = Path(folder)
    now = check_output_folder(folder)
    target = folder.resolve()  # a symbolic link keeps pointing at the new plan
    target.parent.mkdir(parents=True, exist_ok=True)
    plan = compiled.to_dict()
    plan["gateware_digest"] = gateware_digest()
    plan["source"] = (None if source is None else
                      {"path": str(source), "sha256": file_sha256(Path(source))})
    blobs: dict[str, bytes] = {
        GRAPH_FILE: graph_to_text(compiled.graph).encode(),
        EXPLAIN_FILE: (compiled.explain() + "\n").encode()}
    kernel_steps = iter(compiled.kernels)
    for i, entry in enumerate(plan["steps"]):
        if entry["kind"] != "kernel":
            continue
        k = next(kernel_steps)
        stem = f"{KERNELS_DIR}/{file_stem(i, k.name)}"
        blobs[f"{stem}.bin"] = np.asarray(k.compiled.program, dtype="<u8").tobytes()
        blobs[f"{stem}.asm"] = k.compiled.source.encode()
        entry.update(binary=f"{stem}.bin", listing=f"{stem}.asm", metadata=k.compiled.meta)
    plan["files"] = {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                     for name, data in blobs.items()}
    plan["digest"] = plan_digest(plan)
    blobs[PLAN_FILE] = (dumps_json(plan) + "\n").encode()
    with replacing(target, checked=now if checked is None else checked) as tmp:
        (tmp / KERNELS_DIR).mkdir()
        for name, data in blobs.items():  # plan.json last: a folder without it is no plan
            _write_synced(tmp / name, data)
    return plan


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # the rename into place must not land before the data
