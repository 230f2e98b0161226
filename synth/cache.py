"""Synthesis results kept by the Verilog's sha256, the tools' versions and the flow's settings
in ``<build root>/synthesis/``, JSON checked on every read: building the same variants again
runs no tool (:func:`synth.flow.synthesize` reads and writes it)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hwgen import ecp5
from hwgen.atomic import write_file
from synth.flow import (
    PNR_OPTIONS,
    ROUTE_PART,
    ROUTE_SPEED,
    YOSYS_SCRIPT,
    SynthesisJob,
    tool_versions,
)

#: Format tag and version of a cache entry; bump the version when a result's fields change.
CACHE_FORMAT, CACHE_VERSION = "hwgen-synthesis", 3


class SynthesisCache:
    """Synthesis results by Verilog sha256, tools and settings: one JSON file an entry.

    An entry is used when its recorded key matches; one that cannot be read or does not
    match its own key is reported (``notice``) and computed again. A placement that timed
    out is used again only for a timeout no longer than its own, and a result without
    placement (``--no-pnr``) does not serve a build that places.
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    @staticmethod
    def key_parts(job: SynthesisJob) -> dict[str, Any]:
        """What decides a result besides the placement's time limit."""
        return {"verilog_sha256": job.sha256, "top": job.top, "clock_hz": job.clock_hz,
                "tools": tool_versions(), "parts": [asdict(p) for p in ecp5.PARTS],
                "yosys_script": YOSYS_SCRIPT, "pnr_options": list(PNR_OPTIONS),
                "route": [ROUTE_PART, ROUTE_SPEED]}

    def path(self, job: SynthesisJob) -> Path:
        """The entry file of ``job``: ``<sha256>-<hash of the key>.json``."""
        text = json.dumps(self.key_parts(job), sort_keys=True)
        return self.root / f"{job.sha256}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"

    def get(self, job: SynthesisJob,
            notice: Callable[[str], None] = lambda line: None) -> dict[str, Any] | None:
        """The cached result of ``job``, or None (missing, stale or unusable)."""
        path = self.path(job)
        try:
            entry = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            notice(f"hwgen: synthesis cache entry {path} is unreadable ({exc}); synthesizing "
                   f"{job.name} again")
            return None
        problem = _entry_problem(entry, self.key_parts(job))
        if problem is not None:
            notice(f"hwgen: synthesis cache entry {path} is unusable ({problem}); "
                   f"synthesizing {job.name} again")
            return None
        result, pnr = entry["result"], entry["result"]["pnr"]
        if job.pnr and pnr["status"] == "skipped":
            return None  # made without placement; this build places
        if job.pnr and pnr["status"] == "timeout" and pnr["timeout_s"] < job.pnr_timeout:
            return None  # it may finish within the longer limit
        return result

    def put(self, job: SynthesisJob, result: dict[str, Any]) -> None:
        """Record ``result``; a cache that cannot be written is only a slower next build."""
        entry = {"format": CACHE_FORMAT, "version": CACHE_VERSION,
                 "key": self.key_parts(job), "result": result}
        try:
            write_file(self.path(job), (json.dumps(entry, indent=1) + "\n").encode())
        except OSError:
            pass


#: The result's fields and their types, checked on every read.
_RESULT_FIELDS = {"cells": dict, "part_reason": str, "pnr": dict,
                  "tools": dict, "seconds": dict, "scope": str, "top": str,
                  "verilog_sha256": str}


def _entry_problem(entry: Any, key: dict[str, Any]) -> str | None:
    if not isinstance(entry, dict) or entry.get("format") != CACHE_FORMAT:
        return "not a synthesis cache entry"
    if entry.get("version") != CACHE_VERSION:
        return f"version {entry.get('version')!r}, expected {CACHE_VERSION}"
    if entry.get("key") != key:
        return "its key differs from the lookup's"
    result = entry.get("result")
    if not isinstance(result, dict):
        return "no result"
    for name, kind in _RESULT_FIELDS.items():
        if not isinstance(result.get(name), kind):
            return f"its result's {name} is missing or not a {kind.__name__}"
    if result["verilog_sha256"] != key["verilog_sha256"]:
        return "its result is of other Verilog"
    resources = result.get("resources")
    if result.get("status") == "failed":
        if resources is not None or not isinstance(result.get("error"), str):
            return "a failed synthesis with figures or without its error"
    elif result.get("status") != "ok":
        return f"its status {result.get('status')!r} is unknown"
    elif not isinstance(resources, dict) or set(resources) != {
            "LUT", "FF", "DSP", "BRAM", "DISTRIBUTED_RAM"} or not all(
            isinstance(v, int) and v >= 0 for v in resources.values()):
        return "its resources are not counts of LUT, FF, DSP, BRAM, DISTRIBUTED_RAM"
    pnr = result["pnr"]
    if pnr.get("status") not in ("ok", "timeout", "failed", "skipped", "no_part", "no_netlist"):
        return f"its placement status {pnr.get('status')!r} is unknown"
    if pnr["status"] == "timeout" and not isinstance(pnr.get("timeout_s"), int | float):
        return "its timed-out placement records no time limit"
    fmax = result.get("fmax_mhz")
    if (fmax is None) != (pnr["status"] != "ok") or not (
            fmax is None or isinstance(fmax, int | float) and fmax > 0):
        return f"its Fmax {fmax!r} does not agree with its placement status"
    if result.get("part") is not None and result["part"] not in {p.name for p in ecp5.PARTS}:
        return f"its part {result['part']!r} is unknown"
    return None
