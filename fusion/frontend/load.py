"""Load a model file by its extension: an ONNX model or an hwgen JSON graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fusion.ir.graph import Graph, GraphError

#: Model file types :func:`load_model` reads, by extension.
MODEL_TYPES = {".onnx": "ONNX", ".json": "hwgen JSON graph"}


def load_model(path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None
               ) -> Graph:
    """Read an ONNX model or an hwgen JSON graph (by extension).

    Parameters
    ----------
    path : str or Path
    input_shapes : mapping of str to sequence of int, optional
        Static shapes for ONNX inputs with dynamic dimensions.

    Raises
    ------
    GraphError
        For an unknown extension, an unreadable or invalid model, or input shapes given for a
        JSON graph (whose shapes are static already).
    """
    path = Path(path)
    kind = MODEL_TYPES.get(path.suffix.lower())
    if kind is None:
        raise GraphError(f"{path} is neither an ONNX model (.onnx) nor an hwgen JSON graph "
                         f"(.json); give one of those")
    if not path.is_file():
        raise GraphError(f"no {kind}{' model' if kind == 'ONNX' else ''} at {path}")
    if kind == "ONNX":
        from fusion.frontend.onnx_import import import_onnx

        return import_onnx(path, input_shapes=input_shapes)
    if input_shapes:
        raise GraphError(f"--input-shape applies to ONNX models; the hwgen JSON graph {path} "
                         f"has static shapes already")
    from fusion.frontend.json_format import load_json

    return load_json(path)
