"""Compiled plans kept by what decides them, so that ``hwgen run`` of a model compiled before
reads its plan instead of pricing every candidate again.

The kernel cache (:mod:`fusion.kernels.cache`) keeps programs; the choices between them
(covers, tilings, loop orders, layouts, memory plan) are priced anew on every compile, which
is most of a warm ``hwgen run``'s time (ResNet-8 on an 8x8: 2.5 s of pricing for a 1.3 s
simulation). A plan is a pure function of the model file, how it is loaded (input shapes,
batch), the variant (its config and gateware), the board's memory, the compile options and
settings, what prices the candidates, the code generator, and what is known of the data
(:mod:`fusion.compiler.data_hints`): its entry is named by the digest of all of them
(:meth:`PlanCache.key`), and holds the plan folder that ``hwgen compile -o`` writes
(:func:`fusion.compiler.plan_folder.write_plan`), read back through the same checks as ``hwgen
run --plan`` (:func:`fusion.compiler.plan_reader.read_plan`). An entry that does not read back
is compiled again and replaced; one that cannot be written is not an error.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fusion.compiler.plan import CompiledModel
from hwgen.config import VariantConfig


class PlanCache:
    """Plan folders under ``root``, one per :meth:`key`."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @staticmethod
    def key(parts: Mapping[str, Any]) -> str:
        """The digest of what decides a plan (JSON-able ``parts``)."""
        text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str, config: VariantConfig, variant: Path | str) -> CompiledModel | None:
        """The plan of ``key`` read back for the variant folder ``variant``, or None (none
        kept, or one that does not read back: it is compiled again)."""
        from fusion.compiler.plan_reader import read_plan

        folder = self.root / key
        if not (folder / "plan.json").is_file():
            return None
        try:
            return read_plan(folder, config, variant=variant)
        except (ValueError, OSError):
            return None

    def put(self, key: str, compiled: CompiledModel, source: Path | str) -> None:
        """Keep ``compiled`` (compiled from the model file ``source``) under ``key``."""
        from fusion.compiler.plan_folder import write_plan

        folder = self.root / key
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(dir=self.root, prefix=".new-"))
            write_plan(compiled, scratch / "plan", source=source)
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
            (scratch / "plan").rename(folder)
            shutil.rmtree(scratch, ignore_errors=True)
        except (OSError, ValueError):
            pass
