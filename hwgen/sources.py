"""Which files make the gateware, and their digest: part of every build-cache key.

Deliberately free of Amaranth imports, so that finding a cached build stays fast. Every
``hwgen/*.py`` counts except the modules listed in :data:`NOT_GATEWARE`: a new gateware file
is included by default, because a needless rebuild beats a stale simulation.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

HWGEN = Path(__file__).parent

#: Modules of ``hwgen/`` that do not affect the generated Verilog.
NOT_GATEWARE = frozenset({"cli.py", "asm.py", "reference.py", "sources.py", "__init__.py"})


def gateware_files() -> list[Path]:
    """The ``hwgen/`` sources that make the accelerator's Verilog, sorted."""
    return sorted(p for p in HWGEN.glob("*.py") if p.name not in NOT_GATEWARE)


def gateware_digest() -> str:
    """A hash of :func:`gateware_files` (16 hex digits)."""
    h = hashlib.sha256()
    for path in gateware_files():
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]
