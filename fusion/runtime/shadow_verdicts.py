"""Verdicts of the directed shadow sets, kept so that a kernel program is put through them once
per simulation build.

The directed input sets (:mod:`fusion.runtime.shadow_inputs`) test the hardware running one
program: its stages' edge cases, both paths of its branches. Once a program has passed them on
a build, running them again on the same build says nothing new, and they are two thirds of a
model's simulated cycles at the default ``--shadow-inputs 2``. A verdict is one file named by
the digest of what decides it: the program's words, the build's digest
(:attr:`sim.build.BuildInfo.digest`: the Verilog, the toolchain and the memory system), the
number of sets and their seed. A change of either the program or the build is another name,
so an old verdict is never used for them. Only passes are recorded; a file that cannot be read
as one is not trusted (the sets run again and the file is written anew).

The model's own values are checked on every run, whatever the verdicts say.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

#: The ``format`` of a verdict file.
FORMAT = "hwgen-shadow-verdict"


class VerdictStore:
    """Passed directed shadow sets, one small JSON file each under ``root``.

    Parameters
    ----------
    root : Path or str
        The folder (made when the first verdict is written); ``hwgen run`` keeps it in the
        kernel cache's folder (``shadow_verdicts``).
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @staticmethod
    def key(program: Sequence[int], build_digest: str, sets: int, seed: int) -> str:
        """The name of the verdict on ``program`` run on the build of ``build_digest``
        through ``sets`` directed sets drawn from ``seed``."""
        h = hashlib.sha256()
        h.update(f"{FORMAT}\n{build_digest}\n{sets}\n{seed}\n".encode())
        h.update(b"".join(int(w).to_bytes(8, "little") for w in program))
        return h.hexdigest()

    def passed(self, key: str) -> bool:
        """Whether the sets of ``key`` passed before (a verdict file that reads back)."""
        try:
            data = json.loads((self.root / f"{key}.json").read_text())
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and data.get("format") == FORMAT and \
            data.get("key") == key and data.get("passed") is True

    def record(self, key: str) -> None:
        """Record that the sets of ``key`` passed. A verdict that cannot be written is not
        an error: the sets run again next time."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"format": FORMAT, "key": key, "passed": True}, f)
            os.replace(tmp, self.root / f"{key}.json")
        except OSError:
            pass
