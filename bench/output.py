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


def verdict(outside: list[str]) -> int:
    """The exit status of a benchmark that compares outputs with the exact reference: 1, after
    naming them, when ``outside`` lists runs beyond its 1-LSB bound; else 0."""
    if outside:
        print(f"outside the 1-LSB bound against the exact reference: {', '.join(outside)}")
        return 1
    return 0
