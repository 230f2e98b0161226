"""The op implementations' registry: what an implementation sees, and the decorator that
registers one.

An *op implementation* is a numpy function ``fn(ctx, *input_values) -> tuple of arrays`` that
runs one graph op (not to be confused with an accelerator kernel, :mod:`fusion.kernels`).
:mod:`fusion.reference.hwgen_ops` and :mod:`fusion.reference.onnx_ops` register theirs here;
:mod:`fusion.reference.executor` imports both and runs graphs with them. Imports only go down:
``registry`` <- op implementations <- ``executor``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.ir.graph import GraphError, Node, Tensor


@dataclass(frozen=True)
class Ctx:
    """What an op implementation sees besides its input values: node, attributes, tensors."""

    node: Node
    attrs: dict[str, Any]
    inputs: tuple[Tensor | None, ...]
    outputs: tuple[Tensor, ...]
    #: compute float32 tensors in float64 (:func:`fusion.reference.executor.run`)
    float64: bool = False

    def error(self, message: str) -> GraphError:
        return GraphError(f"node {self.node.name!r} ({self.node.op}): {message}")


#: An op implementation: ``fn(ctx, *input_values) -> tuple of arrays``, one per output.
OpImpl = Callable[..., tuple[np.ndarray, ...]]
#: Every registered op implementation by op name.
IMPLEMENTATIONS: dict[str, OpImpl] = {}


def implements(*names: str) -> Callable[[OpImpl], OpImpl]:
    """Register ``fn(ctx, *input_values) -> tuple of arrays`` as the implementation of ``names``.

    Raises
    ------
    ValueError
        If one of ``names`` already has an implementation (keep one per op).
    """
    twice = [name for name in names if name in IMPLEMENTATIONS]
    if twice:
        raise ValueError(f"op(s) {', '.join(twice)} already have an implementation; keep one")

    def register(fn: OpImpl) -> OpImpl:
        for name in names:
            IMPLEMENTATIONS[name] = fn
        return fn
    return register
