"""ONNX's own backend node tests as hwgen models: collection and constant promotion.

``onnx.backend.test.case.node.collect_testcases`` builds every node test in memory (model,
inputs, expected outputs; nothing is downloaded). Two harnesses use them: the frontend's
(``tests/helpers/onnx_node_cases.py``: import and run on the reference executor) and the
conformance runner (:mod:`sim.conformance`: compile and run on the simulated accelerator).
What they share is here: collecting the cases, the op a case is counted under, and moving
inputs that a deployed model holds as constants into initializers.

A node test feeds every operand as a graph input; a deployed quantized model holds its
weights, scales and zero points as initializers. hwgen needs them constant (a GEMM's weight,
a requantize's scale), so both harnesses promote them before import: the same values, the
same meaning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from fusion.ir import ops


def collect(keep: Callable[[Any], bool] | None = None) -> list:
    """The node test cases that have a model with nodes (and pass ``keep``, if given).

    About 10 s: onnx builds every node test in memory.
    """
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return [c for c in cases if c.model is not None and c.model.graph.node
            and (keep is None or keep(c))]


def main_op(case: Any) -> str:
    """The op a case is counted under: its first non-Identity op (Identity alone otherwise)."""
    names = [n.op_type for n in case.model.graph.node]
    return next((n for n in names if n != "Identity"), "Identity")


def first_input_dtype(case: Any) -> str:
    """The numpy name of the element type of a case's first graph input (``"?"`` without
    one, or if it is not a tensor)."""
    if not case.model.graph.input:
        return "?"
    t = case.model.graph.input[0].type
    if not t.HasField("tensor_type"):
        return "?"
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type)).name


def _tensor(value: Any, name: str) -> onnx.TensorProto:
    """``value`` as an initializer called ``name``. The cases of element types numpy lacks
    (FP8, int4, int2, float4) hold their inputs as ``TensorProto`` already: kept as they are,
    so that the importer sees the type and refuses it by name."""
    if isinstance(value, onnx.TensorProto):
        t = onnx.TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    return numpy_helper.from_array(np.asarray(value), name)


def _promote(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], names: set[str]
             ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    keep = [v for v in model.graph.input if v.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    for name in sorted(names):
        model.graph.initializer.append(_tensor(feeds[name], name))
    return model, {k: v for k, v in feeds.items() if k not in names}


def promote_constants(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
                      ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Move the graph inputs that fill constant slots (scales, zero points, shapes) to
    initializers; the activations and weights stay inputs. Returns the new model and the
    remaining feeds."""
    const = {name for node in model.graph.node for slot, name in
             zip(ops.get(node.op_type).slots, node.input, strict=False)
             if name and slot in ops.get(node.op_type).const}
    return _promote(model, feeds, const & set(feeds))


def promote_all_but_first(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
                          ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Move every graph input but the first (the activation) to an initializer, as a deployed
    model holds its weights, scales, zero points and constant operands. Returns the new model
    and the one remaining feed."""
    names = {v.name for v in model.graph.input[1:]} & set(feeds)
    return _promote(model, feeds, names)


def feeds_of(case: Any, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """A data set's inputs by graph input name."""
    names = [v.name for v in case.model.graph.input]
    return dict(zip(names, inputs, strict=False))
