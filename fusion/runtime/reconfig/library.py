"""A variant library as the reconfiguration manager reads it (``hwgen variants build`` writes
it: ``docs/variants.md``).

Every variant folder is opened with :func:`hwgen.gateware.folder.open_variant`, which refuses
one whose Verilog does not match the sha256 its descriptor records. The manager also needs
what the library adds to each descriptor: the kernel kinds and epilogue stages the variant
runs (``capabilities``) and what loading its bitstream costs (``reconfiguration``). The
variants must share one board memory: a swap changes the FPGA's bitstream, not the board.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusion.kernels.capabilities import capability_problem, covers
from hwgen.files import check_regular
from hwgen.gateware.folder import VariantFolder, open_variant

LIBRARY_FILE = "library.json"
LIBRARY_FORMAT = "hwgen-variant-library"


@dataclass(frozen=True)
class LibraryVariant:
    """One variant of a library: its name, its checked folder, what it can run, and the
    cycles of loading it."""

    name: str
    folder: VariantFolder
    capabilities: dict[str, Any]
    reconfig_cycles: int | None
    reconfig_reason: str = ""

    @property
    def config(self):
        return self.folder.config

    @property
    def platform(self):
        return self.folder.platform

    def summary(self) -> dict[str, Any]:
        """The variant for a run's report: shape, port, epilogue, resources, reconfiguration."""
        c, d = self.config, self.folder.descriptor
        synthesis = d.get("synthesis") or {}
        found = synthesis.get("resources")
        resources = None if not isinstance(found, dict) else {
            k.lower(): found.get(k) for k in ("LUT", "FF", "DSP", "BRAM")}
        return {"key": c.key(), "rows": c.rows, "cols": c.cols, "port_bytes": c.port_bytes,
                "epilogue": list(c.epilogue), "window_unit": bool(c.window_unit),
                "resources": resources, "part": synthesis.get("part"),
                "fmax_mhz": synthesis.get("fmax_mhz"),
                "reconfig_cycles": self.reconfig_cycles}


def _fix(path: Path) -> str:
    return f"rebuild the library with 'hwgen variants build -o {path} SPEC...'"


def _variant(root: Path, entry: Any) -> LibraryVariant:
    if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
            and isinstance(entry.get("folder"), str)
            and Path(entry["folder"]).name == entry["folder"]):
        raise ValueError(f"{root / LIBRARY_FILE} has a malformed variant entry {entry!r}; "
                         f"{_fix(root)}")
    folder = open_variant(root / entry["folder"])  # the Verilog's sha256 is checked here
    d = folder.descriptor
    caps, reconfig = d.get("capabilities"), d.get("reconfiguration")
    problem = capability_problem(caps)
    if problem is not None:
        raise ValueError(f"variant {folder.directory}: {problem}; {_fix(root)}")
    if list(caps["stages"]) != list(folder.config.epilogue):
        raise ValueError(f"variant {folder.directory}: its descriptor's capabilities list "
                         f"stages {caps['stages']}, but its Verilog's epilogue is "
                         f"{list(folder.config.epilogue)}; {_fix(root)}")
    if not isinstance(reconfig, dict) or "cycles" not in reconfig:
        raise ValueError(f"variant {folder.directory} has no reconfiguration cost in its "
                         f"descriptor; {_fix(root)}")
    cycles = reconfig["cycles"]
    if cycles is not None and (not isinstance(cycles, int) or isinstance(cycles, bool)
                               or cycles < 0):
        raise ValueError(f"variant {folder.directory} has reconfiguration cycles {cycles!r}, "
                         f"not a count; {_fix(root)}")
    return LibraryVariant(entry["name"], folder, dict(caps), cycles,
                          str(reconfig.get("reason") or ""))


def open_library(path: str | Path) -> list[LibraryVariant]:
    """Read and check a library folder.

    Raises
    ------
    ValueError
        No ``library.json`` or a malformed one, a variant folder that fails its checks
        (:func:`~hwgen.gateware.folder.open_variant`: a Verilog whose hash does not match),
        a descriptor without capabilities or a reconfiguration record, two variants of one name,
        or variants on different board memories; one line naming the fix.
    """
    root = Path(path)
    index = root / LIBRARY_FILE
    check_regular(index, "variant library index")
    if not index.is_file():
        raise ValueError(f"{root} is not a variant library (no {LIBRARY_FILE}); "
                         f"{_fix(root)}")
    try:
        data = json.loads(index.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{index} is not JSON ({exc}); {_fix(root)}") from None
    if not (isinstance(data, dict) and data.get("format") == LIBRARY_FORMAT
            and isinstance(data.get("variants"), list) and data["variants"]):
        raise ValueError(f"{index} is not a variant library of this hwgen (format "
                         f"{LIBRARY_FORMAT!r} with a non-empty variants list); {_fix(root)}")
    variants = [_variant(root, e) for e in data["variants"]]
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"{index} names a variant twice ({', '.join(names)}); {_fix(root)}")
    boards = {v.platform.key() for v in variants}
    if len(boards) > 1:
        raise ValueError(f"the variants of {root} are on {len(boards)} different board "
                         f"memories; a library swaps bitstreams on one board: build it with "
                         f"one --memory")
    return variants


def check_covers(variant: LibraryVariant, kind: str, stages: Sequence[str],
                 kernel: str) -> None:
    """Refuse a kernel placed on ``variant`` whose kind or epilogue stages its descriptor's
    capabilities do not list.

    Raises
    ------
    ValueError
        Naming the kernel, the variant and what is missing.
    """
    why = covers(variant.capabilities, kind, stages)
    if why:
        raise ValueError(f"variant {variant.name} ({variant.folder.directory}) cannot run "
                         f"kernel {kernel}: {why}; its descriptor does not describe what it "
                         f"runs: rebuild it with 'hwgen variants build'")
