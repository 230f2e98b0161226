"""Imported ONNX models kept as hwgen JSON graphs, so that a command run again on the same
model neither imports the ``onnx`` library (0.6 s of start-up alone, most of it ``ml_dtypes``
registering its types with numpy) nor parses the model again.

An import is a pure function of the model file, the input shapes, the batch and the importer
(the ``fusion`` package, which :func:`fusion.kernels.cache.codegen_version` hashes): its
entry, ``<root>/<digest>.json``, is named by the digest of all four and holds the graph as
:func:`fusion.frontend.json_format.save_json` writes it. An entry is read back through
:func:`~fusion.frontend.json_format.load_json` and :func:`~fusion.ir.validation.validate`; one
that does not read back is imported again and replaced, and one that cannot be written is not
an error (the cache only saves time). A model that does not import is never kept: its error
comes from the importer every time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from fusion.frontend.load import load_model
from fusion.ir.graph import Graph, GraphError

__all__ = ["ImportCache"]


class ImportCache:
    """Imported graphs under ``root``, one file per :meth:`key`."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @staticmethod
    def key(path: Path, input_shapes: Mapping[str, Sequence[int]], batch: int) -> str:
        """The digest of what decides the import of the model file ``path``."""
        from fusion.compiler.plan_folder import file_sha256
        from fusion.kernels.cache import codegen_version

        parts = {"model": file_sha256(path), "batch": batch, "importer": codegen_version(),
                 "input_shapes": {name: list(shape) for name, shape in input_shapes.items()}}
        text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def load(self, path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
             batch: int = 1, *, keep: bool = True) -> Graph:
        """:func:`fusion.frontend.load.load_model` of an ONNX model, from this cache when it
        was imported before (any other model file is loaded as it is). With ``keep`` False a
        new import is not stored (a command that may still refuse the model stores it with
        :meth:`keep` once it has not).

        Raises
        ------
        GraphError
            As :func:`~fusion.frontend.load.load_model`.
        """
        path = Path(path)
        shapes = dict(input_shapes or {})
        if path.suffix.lower() != ".onnx" or not path.is_file():
            return load_model(path, shapes, batch)  # its own checks and errors
        entry = self.root / f"{self.key(path, shapes, batch)}.json"
        if entry.is_file():
            graph = _read(entry)
            if graph is not None:
                return graph
        graph = load_model(path, shapes, batch)
        if keep:
            _write(entry, graph)
        return graph

    def keep(self, path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None,
             batch: int, graph: Graph) -> None:
        """Store ``graph``, the import of ONNX model ``path``, unless it is stored already."""
        path = Path(path)
        if path.suffix.lower() == ".onnx":
            entry = self.root / f"{self.key(path, dict(input_shapes or {}), batch)}.json"
            if not entry.is_file():
                _write(entry, graph)


def _read(entry: Path) -> Graph | None:
    from fusion.frontend.json_format import load_json
    from fusion.ir.validation import validate

    try:
        graph = load_json(entry)
        validate(graph)
    except (GraphError, OSError, ValueError):
        return None  # imported again, and replaced
    return graph


def _write(entry: Path, graph: Graph) -> None:
    from fusion.frontend.json_format import GraphFormatError, to_dict
    from hwgen.atomic import write_file

    try:
        text = json.dumps(to_dict(graph), allow_nan=False, separators=(",", ":"))
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_file(entry, text.encode())
    except (GraphFormatError, OSError, ValueError):
        pass  # not kept: the next run imports the model again
