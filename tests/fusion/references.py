"""The references hwgen's results are checked against, and the 1-LSB check.

Shared by the tests that compare hwgen (its executor, or a run on the simulator) with something
independent of it: ``test_onnxruntime_reference.py``, ``test_real_models.py``,
``test_quantizer_options.py``, ``test_examples.py`` and the QLinear node tests.

- :func:`session`: the exact reference (:mod:`examples.exact_reference`: ONNX's reference
  evaluator, float64 between DequantizeLinear and QuantizeLinear, onnxruntime's
  ``com.microsoft`` operators from their documentation). The pass/fail reference everywhere.
- :func:`float_path`: onnxruntime, the runtime people deploy these models with, with its graph
  optimizations off, for a model in which that runs no integer kernel (QDQ). Its float32
  sums may land a few ulps on the other side of a rounding half, which the 1-LSB bound
  allows for.

onnxruntime's integer kernels (``QLinearConv``, ``MatMulInteger``, ``QGemm`` and the QDQ
fusions its optimizations make) are never a reference: without VNNI they sum u8 x s8 products
in pairs in saturating int16 (``test_references.py`` shows both).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from examples.exact_reference import reference_session as session
from examples.real_check import lsb_errors, output_scale, within_one_lsb

__all__ = ["session", "float_path", "as_written", "references", "integer_kernel_nodes",
           "quantized_tensors", "output_scale", "lsb_errors", "check_within_one_lsb"]

#: Standard operators onnxruntime runs with integer kernels even with its optimizations off.
INTEGER_KERNEL_OPS = frozenset({"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger",
                                "DynamicQuantizeLinear"})


def integer_kernel_nodes(model: onnx.ModelProto) -> list[str]:
    """``domain::op`` of each node onnxruntime runs with an integer kernel even with its graph
    optimizations off (every ``com.microsoft`` node and :data:`INTEGER_KERNEL_OPS`)."""
    return [f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in model.graph.node
            if n.domain not in ("", "ai.onnx") or n.op_type in INTEGER_KERNEL_OPS]


def float_path(model: onnx.ModelProto | str):
    """An onnxruntime CPU session on a QDQ ``model`` with every graph optimization off, so
    that nothing fuses into an integer kernel.

    Raises
    ------
    ValueError
        If the model has a node onnxruntime runs with an integer kernel anyway: such a session
        is not exact on every CPU.
    """
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    integer = integer_kernel_nodes(proto)
    if integer:
        raise ValueError(f"onnxruntime runs {integer[0]} with an integer kernel, which is not "
                         f"exact on every CPU: use the exact reference (session)")
    return as_written(proto)


def as_written(model: onnx.ModelProto):
    """An onnxruntime CPU session running ``model``'s nodes as written (every graph
    optimization off, so that nothing is fused); its integer kernels still run integer
    nodes (:func:`float_path` refuses those)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def references(model: onnx.ModelProto | str) -> list[tuple[str, object]]:
    """``(label, session)`` of each reference ``model`` is checked against: the exact one, and
    onnxruntime's float path where it runs no integer kernel."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    found = [("exact reference", session(proto))]
    if not integer_kernel_nodes(proto):
        found.append(("onnxruntime float path", float_path(proto)))
    return found


def quantized_tensors(model: onnx.ModelProto, feeds: dict) -> dict[str, tuple[np.ndarray, float]]:
    """Every ``QuantizeLinear`` output of ``model`` by the exact reference, by name:
    ``(integer value, its float input in units of the output scale)``.

    The float value shows how close to a rounding half the reference stood. Only
    ``QuantizeLinear`` nodes with a per-tensor scale initializer are listed.
    """
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[1] in inits and inits[n.input[1]].size == 1]
    names = [n.output[0] for n in nodes] + [n.input[0] for n in nodes]
    values = dict(zip(names, session(model).run(names, feeds), strict=True))
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
