"""Where the benchmarks write their figures: ``build/<name>.json``, one place for all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(name: str, results: Any) -> Path:
    """Write ``results`` as JSON to ``build/<name>`` (relative to the working directory, like
    the build caches), say so on stdout, and return the path."""
    out = Path("build") / name
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return out
