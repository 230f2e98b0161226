"""Which files make the gateware, and their digest: part of every build-cache key.

Deliberately free of Amaranth imports, so that finding a cached build stays fast. Every module
of ``hwgen/gateware/`` counts, and so does every contract module of ``hwgen/`` the gateware
may read, except those listed in :data:`NOT_GATEWARE`: a new file is included by default,
because a needless rebuild beats a stale simulation.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

HWGEN = Path(__file__).resolve().parent.parent

#: Modules of ``hwgen/`` (outside ``gateware/``) that do not affect the generated Verilog.
NOT_GATEWARE = frozenset({"asm.py", "reference.py", "presets.py", "atomic.py", "files.py",
                          "platform.py", "ecp5.py", "specs.py", "process.py", "__init__.py"})
#: Modules of ``hwgen/gateware/`` that do not affect the generated Verilog.
NOT_GATEWARE_HERE = frozenset({"sources.py", "folder.py", "fusesoc.py", "__init__.py"})


def gateware_files() -> list[Path]:
    """The ``hwgen/`` sources that make the accelerator's Verilog, sorted."""
    contract = [p for p in HWGEN.glob("*.py") if p.name not in NOT_GATEWARE]
    gateware = [p for p in (HWGEN / "gateware").glob("*.py") if p.name not in NOT_GATEWARE_HERE]
    return sorted(contract + gateware)


def gateware_digest() -> str:
    """A hash of :func:`gateware_files` (16 hex digits)."""
    h = hashlib.sha256()
    for path in gateware_files():
        h.update(path.relative_to(HWGEN).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]
