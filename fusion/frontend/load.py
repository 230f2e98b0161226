"""Load a model file by its extension: an ONNX model or an hwgen JSON graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fusion.ir.graph import Graph, GraphError
from fusion.ir.validation import validate
from hwgen.files import check_regular

#: Model file types :func:`load_model` reads, by extension.
MODEL_TYPES = {".onnx": "ONNX", ".json": "hwgen JSON graph"}


def load_model(path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
               batch: int = 1) -> Graph:
    """Read an ONNX model or an hwgen JSON graph (by extension).

    Parameters
    ----------
    path : str or Path
    input_shapes : mapping of str to sequence of int, optional
        Static shapes for ONNX inputs with dynamic dimensions.
    batch : int
        Inferences per run, the leading dimension of every ONNX input
        (:mod:`fusion.frontend.batch`); 1 reads the model as it is.

    Raises
    ------
    GraphError
        For an unknown extension, an unreadable or invalid model (checked by
        :func:`fusion.ir.validation.validate`), a model that computes nothing (no outputs, no
        nodes, or only graph inputs and constants as outputs), or input shapes given for a
        JSON graph (whose shapes are static already), or a batch that the model cannot take.
    """
    path = Path(path)
    kind = MODEL_TYPES.get(path.suffix.lower())
    if kind is None:
        raise GraphError(f"{path} is neither an ONNX model (.onnx) nor an hwgen JSON graph "
                         f"(.json); give one of those")
    check_regular(path, "model")
    if not path.is_file():
        raise GraphError(f"no {kind}{' model' if kind == 'ONNX' else ''} at {path}")
    if kind == "ONNX":
        from fusion.frontend.onnx_import import import_onnx

        graph = import_onnx(path, input_shapes=input_shapes, batch=batch)  # validated
    else:
        if batch != 1:
            raise GraphError(f"--batch applies to ONNX models; the hwgen JSON graph {path} "
                             f"has static shapes: build it with the batch you want")
        if input_shapes:
            raise GraphError(f"--input-shape applies to ONNX models; the hwgen JSON graph "
                             f"{path} has static shapes already")
        from fusion.frontend.json_format import load_json

        graph = load_json(path)
        try:
            validate(graph)  # the file format checks fields, not ops, arities or attributes
        except GraphError as exc:
            raise GraphError(f"{path}: {exc}") from None
    _check_computes(graph, path)
    return graph


def _check_computes(graph: Graph, path: Path) -> None:
    """Refuse a model that computes nothing: protobuf reads a 0-byte file as an empty model."""
    if not graph.outputs:
        raise GraphError(f"{path}: the model has no outputs; is it the model you meant?")
    if not graph.nodes:
        raise GraphError(f"{path}: the model has no nodes: there is nothing to compute")
    computed = {o for node in graph.nodes for o in node.outputs}
    if not computed & set(graph.outputs):
        raise GraphError(f"{path}: the model computes none of its outputs "
                         f"({', '.join(graph.outputs)}: graph inputs or constants)")
