"""onnxruntime as the reference: a session, a model's output scale, and the 1-LSB check.

Shared by the tests that compare hwgen (its executor, or a run on the simulator) with the real
runtime: ``test_onnxruntime_reference.py``, ``test_real_models.py`` and ``test_examples.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from examples.build_real_models import ort_session as session

__all__ = ["session", "integer_session", "quantized_tensors", "output_scale", "lsb_errors",
           "check_within_one_lsb"]


def integer_session(path):
    """An onnxruntime CPU session on ``path`` with every graph optimization on.

    onnxruntime then fuses each ``DequantizeLinear -> op -> QuantizeLinear`` group into its
    integer kernels (``QLinearConv``, ``QGemm``, ``QLinearGlobalAveragePool``...): integer
    accumulators, requantized by one float multiply and a round half to even. That is the
    arithmetic hwgen does, where :func:`session` (optimizations off) runs the graph as written,
    summing float32 products, whose rounding can flip a value within float32 error of a
    half.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def quantized_tensors(model: onnx.ModelProto, feeds: dict) -> dict[str, tuple[np.ndarray, float]]:
    """Every ``QuantizeLinear`` output of ``model`` run by onnxruntime (optimizations off),
    by name: ``(integer value, its float input in units of the output scale)``.

    The float value shows how close to a rounding half onnxruntime stood. Only
    ``QuantizeLinear`` nodes with a per-tensor scale initializer are listed.
    """
    import onnxruntime as ort

    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[1] in inits and inits[n.input[1]].size == 1]
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    del exposed.graph.output[:]
    for name in [n.output[0] for n in nodes] + [n.input[0] for n in nodes]:
        exposed.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    run = ort.InferenceSession(exposed.SerializeToString(), options,
                               providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in exposed.graph.output], run.run(None, feeds), strict=True))
    return {n.output[0]: (values[n.output[0]],
                          values[n.input[0]].astype(np.float64) / float(inits[n.input[1]]))
            for n in nodes}


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
