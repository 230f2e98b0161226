"""onnxruntime as the reference: a session, a model's output scale, and the 1-LSB check.

Shared by the tests that compare hwgen (its executor, or a run on the simulator) with the real
runtime: ``test_onnxruntime_reference.py``, ``test_real_models.py`` and ``test_examples.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from examples.build_real_models import ort_session as session

__all__ = ["session", "output_scale", "lsb_errors", "check_within_one_lsb"]


def output_scale(model: onnx.ModelProto, output: str) -> float | None:
    """The scale of the ``DequantizeLinear`` that produces ``output`` (through Identity), or
    None for an output that is not a dequantized tensor."""
    producers = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: i for i in model.graph.initializer}
    node = producers.get(output)
    while node is not None and node.op_type == "Identity":
        node = producers.get(node.input[0])
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in inits:
        return None
    scale = numpy_helper.to_array(inits[node.input[1]])
    return float(scale) if scale.size == 1 else None


def lsb_errors(got: np.ndarray, want: np.ndarray, scale: float | None) -> np.ndarray:
    """``got - want`` in output LSBs, flattened: integers as they are, a dequantized float
    output in units of its ``scale``."""
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape}, onnxruntime's {want.shape}")
    if want.dtype.kind in "iu":
        assert got.dtype == want.dtype, f"dtype {got.dtype}, onnxruntime's {want.dtype}"
        return (got.astype(np.int64) - want.astype(np.int64)).ravel()
    assert scale is not None, "a float output that is not dequantized: no LSB to count in"
    return np.rint((got.astype(np.float64) - want.astype(np.float64)) / scale).ravel()


def check_within_one_lsb(errors: np.ndarray, label: str, *, integer: bool) -> str:
    """Assert the bound: integer outputs exact; dequantized outputs within 1 LSB with at least
    99% exact. Returns the figures (also in the assertion message)."""
    worst = int(np.abs(errors).max()) if errors.size else 0
    exact = float(np.mean(errors == 0)) if errors.size else 1.0
    figures = (f"{label}: {errors.size} elements, max |diff| {worst} LSB, "
               f"{100 * exact:.2f}% exact")
    if integer:
        assert worst == 0, f"{figures} (an integer output must be exact)"
    else:
        assert worst <= 1 and exact >= 0.99, f"{figures} (bound: 1 LSB, >= 99% exact)"
    return figures
