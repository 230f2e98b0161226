"""onnxruntime as the reference: a session, a model's output scale, and the 1-LSB check.

Shared by the tests that compare hwgen (its executor, or a run on the simulator) with the real
runtime: ``test_onnxruntime_reference.py``, ``test_real_models.py`` and ``test_examples.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from examples.build_real_models import ort_session as session
from examples.real_check import lsb_errors, output_scale, within_one_lsb

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


def check_within_one_lsb(errors: np.ndarray, label: str, *, integer: bool) -> str:
    """Assert the bound (:func:`examples.real_check.within_one_lsb`): integer outputs exact;
    dequantized outputs within 1 LSB with at least 99% exact. Returns the figures (also in the
    assertion message)."""
    ok, figures = within_one_lsb(errors, label, integer=integer)
    bound = "an integer output must be exact" if integer else "bound: 1 LSB, >= 99% exact"
    assert ok, f"{figures} ({bound})"
    return figures
