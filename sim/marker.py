"""The marker of a simulation build folder (``build.json``): what was built, from what, with
which tools, and the binary it made; and the check that a folder still holds exactly that.

It is written last into a build's temporary folder, so a folder with a marker is whole. A
folder whose marker is missing, unreadable or does not match, or whose binary is not the one
built (truncated, bit-flipped, deleted, or another variant's), is rebuilt by
:mod:`sim.build`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hwgen.config import VariantConfig
from sim import toolchain
from sim.top import TOP

#: Bumped when the layout of a build folder or its marker changes, so old builds are not
#: reused. 2: the marker records the Verilog's and the binary's sha256 and the tool versions.
BUILD_FORMAT = 3

MARKER = "build.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def marker_problem(directory: Path, config: VariantConfig, digest: str,
                    verilog_sha: str | None = None) -> tuple[dict | None, str | None]:
    """``(marker, None)`` for a whole, current build; ``(None, why)`` for one to rebuild;
    ``(None, None)`` when there is no build folder at all."""
    if not directory.is_dir():
        return None, None
    try:
        marker = json.loads((directory / MARKER).read_text())
    except FileNotFoundError:
        return None, f"it has no {MARKER} (an interrupted or older build)"
    except (OSError, ValueError) as exc:
        return None, f"its {MARKER} cannot be read ({exc})"
    if not isinstance(marker, dict):
        return None, f"its {MARKER} is not a JSON object"
    if marker.get("format") != BUILD_FORMAT:
        return None, (f"it was made by another hwgen (build format {marker.get('format')!r}, "
                      f"this one reads {BUILD_FORMAT})")
    if marker.get("key") != config.key() or marker.get("config") != config.to_dict():
        return None, (f"it holds variant {marker.get('key')!r}, not {config.key()} (copied "
                      f"or renamed from another build)")
    if marker.get("digest") != digest:
        return None, f"it was built from other sources (digest {marker.get('digest')!r})"
    sha, exe = marker.get("verilog_sha256"), marker.get("executable")
    if not (isinstance(sha, str) and isinstance(exe, dict) and isinstance(exe.get("size"), int)
            and isinstance(exe.get("sha256"), str) and isinstance(marker.get("verilator"), str)
            and isinstance(marker.get("build_seconds"), int | float)
            and isinstance(marker.get("memory"), dict)
            and marker["memory"].get("kind") in ("ideal", "dram")):
        return None, f"its {MARKER} lacks entries"
    if verilog_sha is not None and sha != verilog_sha:
        return None, "it was built from other Verilog"
    runtime = toolchain.runtime_versions()
    if marker.get("runtime") != runtime:
        return None, f"it was built for {marker.get('runtime')}, this environment is {runtime}"
    binary = directory / "obj" / TOP
    try:
        size = binary.stat().st_size
    except OSError:
        return None, f"its simulator obj/{TOP} is missing"
    if size != exe["size"]:
        return None, (f"its simulator is {size} bytes, {exe['size']} when built (truncated or "
                      f"replaced)")
    if sha256_file(binary) != exe["sha256"]:
        return None, "its simulator's sha256 is not the one built (corrupted)"
    return marker, None


def write_marker(work: Path, config: VariantConfig, digest: str, verilog: bytes,
                 tool: toolchain.Verilator, build_seconds: float,
                 memory: dict[str, Any]) -> dict:
    """Write the marker of the finished build in ``work`` (its binary is ``obj/TOP``);
    ``memory`` is what the testbench needs of its memory
    (:meth:`sim.memory.BoardMemory.testbench_header`), recorded so that a run does not
    generate the DRAM again to learn it."""
    binary = work / "obj" / TOP
    marker = {
        "format": BUILD_FORMAT,
        "key": config.key(),
        "config": config.to_dict(),
        "digest": digest,
        "verilog_sha256": hashlib.sha256(verilog).hexdigest(),
        "verilator": tool.version_text,
        "tools": {"verilator": tool.version_text,
                  "g++": toolchain.compiler_version(toolchain.tool_env(tool))},
        "runtime": toolchain.runtime_versions(),
        "executable": {"size": binary.stat().st_size, "sha256": sha256_file(binary)},
        "build_seconds": build_seconds,
        "memory": memory,
    }
    (work / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return marker
