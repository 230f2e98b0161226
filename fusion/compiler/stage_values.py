"""What the epilogue ops of a chain become on the accelerator: stages, their parameters and
their constant operands (bias vectors, per-channel multipliers and shifts).

Each epilogue op is one stage (``STAGE_OF``, from the stage specs of :mod:`hwgen.stages`). A
node becomes its stage's parameters (fields of :class:`~hwgen.reference.EpilogueParams`) and
constant operands: by a converter in :data:`CONVERTERS` where the graph op's attributes need
translating (lane offsets of uint8 tensors, per-channel vectors, a constant bias input), and
otherwise by taking the node's attributes named as the stage's parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np

from fusion.compiler.lower import CompileError, lanes_offset
from fusion.ir.graph import Graph, Node
from hwgen.reference import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, EpilogueParams
from hwgen.stages import SPECS

#: (parameters, constant operands) of one epilogue op.
Values = tuple[dict[str, Any], dict[str, np.ndarray]]


def _bias(graph: Graph, node: Node) -> Values:
    return {}, {"bias": graph.initializers[node.inputs[1]].astype(np.int64)}


def _requant(graph: Graph, node: Node) -> Values:
    y = graph.tensors[node.outputs[0]]
    mult, shift = node.attr("mult"), node.attr("shift")
    zp = int(node.attr("zp", 0)) - lanes_offset(y.dtype)
    if isinstance(mult, tuple):
        return ({"zp": zp, "per_channel": True},
                {"mult": np.array(mult, np.int32), "shift": np.array(shift, np.int32)})
    return {"zp": zp, "mult": int(mult), "shift": int(shift)}, {}


def _clamp(graph: Graph, node: Node) -> Values:
    x = graph.tensors[node.inputs[0]]
    off = lanes_offset(x.dtype)
    lo, hi = (INT8_MIN, INT8_MAX) if x.dtype in ("int8", "uint8") else (INT32_MIN, INT32_MAX)
    return {"clamp_lo": min(max(int(node.attr("lo")) - off, lo), hi),
            "clamp_hi": min(max(int(node.attr("hi")) - off, lo), hi)}, {}


#: Stage -> how a node of its graph op becomes the stage's parameters and constants, for the
#: stages whose op's attributes are not simply its parameters.
CONVERTERS: dict[str, Callable[[Graph, Node], Values]] = {
    "bias": _bias, "requant": _requant, "clamp": _clamp}


def stage_values(graph: Graph, node: Node, stage: str) -> Values:
    """The parameters (``EpilogueParams`` fields) and constant operands of one epilogue op."""
    if stage in CONVERTERS:
        return CONVERTERS[stage](graph, node)
    params = SPECS[stage].params
    names = [f.name for f in fields(params)] if params is not None else []
    attrs = node.attr_dict
    return {name: attrs[name] for name in names if name in attrs}, {}


def assemble_stages(graph: Graph, items: list[tuple[Node, str | None]], n_cols: int,
                    extra_bias: np.ndarray | None) -> tuple[tuple[str, ...], EpilogueParams,
                                                            dict[str, np.ndarray]]:
    """Stages, params and constants of a run of epilogue ops (plus a zero-point bias)."""
    stages: list[str] = []
    params: dict[str, Any] = {}
    consts: dict[str, np.ndarray] = {}
    bias = extra_bias
    if extra_bias is not None:
        stages.append("bias")
    for node, stage in items:
        if stage is None:
            continue
        values, operands = stage_values(graph, node, stage)
        if stage == "bias":  # bias ops add up, with the input zero-point correction
            bias = operands["bias"] if bias is None else bias + operands["bias"]
            if "bias" not in stages:
                stages.append("bias")
            continue
        if stage in stages:
            raise CompileError(f"node {node.name!r}: a second {stage} stage in one kernel")
        stages.append(stage)
        consts.update(operands)
        params.update(values)
    if bias is not None:
        if bias.min() < INT32_MIN or bias.max() > INT32_MAX:
            raise CompileError(f"the bias of kernel {items[0][0].name!r} with the input "
                               f"zero-point correction leaves int32")
        consts["bias"] = bias.astype(np.int32)
    result = EpilogueParams(**params)
    if result.per_channel:
        for k in ("mult", "shift"):
            if consts[k].shape != (n_cols,):
                raise CompileError(f"the per-channel requantize of kernel {items[0][0].name!r} "
                                   f"has {consts[k].shape[0]} values for {n_cols} columns")
    return tuple(stages), result, consts
