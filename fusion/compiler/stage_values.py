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
from typing import Any, NamedTuple

import numpy as np

from fusion.compiler.lower import (
    BOUNDS_QADD,
    CompileError,
    lanes_offset,
    residual_input,
    tensor_zp,
)
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
    even = bool(node.attr("round_even", 0))
    if isinstance(mult, tuple):
        return ({"zp": zp, "per_channel": True, "round_even": even},
                {"mult": np.array(mult, np.int32), "shift": np.array(shift, np.int32)})
    return {"zp": zp, "mult": int(mult), "shift": int(shift), "round_even": even}, {}


def _clamp(graph: Graph, node: Node) -> Values:
    x = graph.tensors[node.inputs[0]]
    off = lanes_offset(x.dtype)
    lo, hi = (INT8_MIN, INT8_MAX) if x.dtype in ("int8", "uint8") else (INT32_MIN, INT32_MAX)
    return {"clamp_lo": min(max(int(node.attr("lo")) - off, lo), hi),
            "clamp_hi": min(max(int(node.attr("hi")) - off, lo), hi)}, {}


def _bounds(graph: Graph, node: Node) -> tuple[int, int]:
    """The lane bounds of a ``relu`` or ``clamp`` node (``[0, +inf)`` for relu)."""
    if node.op == "relu":
        return 0, INT32_MAX
    values, _ = _clamp(graph, node)
    return values["clamp_lo"], values["clamp_hi"]


def _qadd(graph: Graph, node: Node, running: str) -> Values:
    """A ``qadd`` as the residual stage's scaled add: ``x`` is ``running`` (the chain's
    result so far), the residual its other input."""
    other = residual_input(node, running)
    x_is_a = node.inputs[0] == running
    a_mult, b_mult = int(node.attr("a_mult")), int(node.attr("b_mult"))
    y = graph.tensors[node.outputs[0]]
    x_zp, r_zp = (tensor_zp(graph.tensors[n], node) for n in (running, other))
    return {"residual_op": "scaled", "res_x_mult": a_mult if x_is_a else b_mult,
            "res_r_mult": b_mult if x_is_a else a_mult, "res_shift": int(node.attr("shift")),
            "res_x_zp": x_zp, "res_r_zp": r_zp,
            "res_zp": int(node.attr("zp", 0)) - lanes_offset(y.dtype),
            "res_lo": INT8_MIN, "res_hi": INT8_MAX}, {}  # a relu or clamp after narrows them


#: Stage -> how a node of its graph op becomes the stage's parameters and constants, for the
#: stages whose op's attributes are not simply its parameters.
CONVERTERS: dict[str, Callable[[Graph, Node], Values]] = {
    "bias": _bias, "requant": _requant, "clamp": _clamp}


class Assembled(NamedTuple):
    """A run of epilogue ops as stages: their names in order, their parameters, their constant
    operands, and the graph tensor the residual stage reads (None without one)."""

    stages: tuple[str, ...]
    params: EpilogueParams
    consts: dict[str, np.ndarray]
    residual: str | None


def stage_values(graph: Graph, node: Node, stage: str) -> Values:
    """The parameters (``EpilogueParams`` fields) and constant operands of one epilogue op."""
    if stage in CONVERTERS:
        return CONVERTERS[stage](graph, node)
    params = SPECS[stage].params
    names = [f.name for f in fields(params)] if params is not None else []
    attrs = node.attr_dict
    return {name: attrs[name] for name in names if name in attrs}, {}


def assemble_stages(graph: Graph, items: list[tuple[Node, str | None]], n_cols: int,
                    extra_bias: np.ndarray | None, source: str | None = None) -> Assembled:
    """Stages, params and constants of a run of epilogue ops (plus a zero-point bias).

    ``source`` is the tensor flowing into the first item (an anchor's output; by default the
    first item's first input): a ``qadd`` takes the chain's running tensor as ``x`` and its
    other input as the residual. A ``relu`` or ``clamp`` after a ``qadd`` narrows the
    residual stage's output bounds instead of running its own stage.
    """
    stages: list[str] = []
    params: dict[str, Any] = {}
    consts: dict[str, np.ndarray] = {}
    bias = extra_bias
    residual = None
    running = source if source is not None else (items[0][0].inputs[0] if items else None)
    if extra_bias is not None:
        stages.append("bias")
    for node, stage in items:
        if stage is None:
            running = node.outputs[0]
            continue
        if "residual" in stages and node.op in BOUNDS_QADD:
            lo, hi = _bounds(graph, node)
            params["res_lo"] = min(max(params["res_lo"], lo), hi)
            params["res_hi"] = min(max(params["res_hi"], lo), hi)
            running = node.outputs[0]
            continue
        if node.op == "qadd":
            values, operands = _qadd(graph, node, running)
            residual = residual_input(node, running)
        else:
            values, operands = stage_values(graph, node, stage)
        running = node.outputs[0]
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
    return Assembled(tuple(stages), result, consts, residual)
