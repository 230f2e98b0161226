"""What the epilogue ops of a chain become on the accelerator: stages, their control-register
values and their constant operands (bias vectors, per-channel multipliers and shifts)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fusion.compiler.lower import CompileError, lanes_offset
from fusion.ir.graph import Graph, Node
from hwgen.reference import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, EpilogueParams


def stage_values(graph: Graph, node: Node, stage: str) -> dict[str, Any]:
    """The params fields and constant operands of one epilogue op."""
    x = graph.tensors[node.inputs[0]]
    y = graph.tensors[node.outputs[0]]
    if stage == "bias":
        return {"bias": graph.initializers[node.inputs[1]].astype(np.int64)}
    if stage == "requant":
        mult, shift = node.attr("mult"), node.attr("shift")
        zp = int(node.attr("zp", 0)) - lanes_offset(y.dtype)
        if isinstance(mult, tuple):
            return {"zp": zp, "per_channel": True,
                    "mult": np.array(mult, np.int32), "shift": np.array(shift, np.int32)}
        return {"zp": zp, "req_mult": int(mult), "req_shift": int(shift)}
    if stage == "clamp":
        off = lanes_offset(x.dtype)
        lo, hi = (INT8_MIN, INT8_MAX) if x.dtype in ("int8", "uint8") else (INT32_MIN, INT32_MAX)
        return {"clamp_lo": min(max(int(node.attr("lo")) - off, lo), hi),
                "clamp_hi": min(max(int(node.attr("hi")) - off, lo), hi)}
    return {}


def assemble_stages(graph: Graph, items: list[tuple[Node, str | None]], n_cols: int,
              extra_bias: np.ndarray | None) -> tuple[tuple[str, ...], EpilogueParams,
                                                      dict[str, np.ndarray]]:
    """Stages, params and constants of a run of epilogue ops (plus a zero-point bias)."""
    stages: list[str] = []
    fields: dict[str, Any] = {}
    consts: dict[str, np.ndarray] = {}
    bias = extra_bias
    if extra_bias is not None:
        stages.append("bias")
    for node, stage in items:
        if stage is None:
            continue
        values = stage_values(graph, node, stage)
        if stage == "bias":
            bias = values["bias"] if bias is None else bias + values["bias"]
            if "bias" not in stages:
                stages.append("bias")
            continue
        if stage in stages:
            raise CompileError(f"node {node.name!r}: a second {stage} stage in one kernel")
        stages.append(stage)
        for k in ("mult", "shift"):
            if k in values:
                consts[k] = values.pop(k)
        fields.update(values)
    if bias is not None:
        if bias.min() < INT32_MIN or bias.max() > INT32_MAX:
            raise CompileError(f"the bias of kernel {items[0][0].name!r} with the input "
                               f"zero-point correction leaves int32")
        consts["bias"] = bias.astype(np.int32)
    params = EpilogueParams(
        mult=fields.get("req_mult", 1), shift=fields.get("req_shift", 0), zp=fields.get("zp", 0),
        clamp_lo=fields.get("clamp_lo", INT32_MIN), clamp_hi=fields.get("clamp_hi", INT32_MAX),
        per_channel=bool(fields.get("per_channel", False)))
    if params.per_channel:
        for k in ("mult", "shift"):
            if consts[k].shape != (n_cols,):
                raise CompileError(f"the per-channel requantize of kernel {items[0][0].name!r} "
                                   f"has {consts[k].shape[0]} values for {n_cols} columns")
    return tuple(stages), params, consts
