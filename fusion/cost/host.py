"""The host's cost model: what an op the reference executor runs between kernels costs.

A *host op* runs in numpy on the machine that drives the accelerator
(:mod:`fusion.compiler.lower`). The engine weighs it against accelerator kernels for the ops
both can run (an int8 ``maxpool``, a standalone epilogue pass), so its price is given in
accelerator cycles:

    seconds = SECONDS_PER_OP + SECONDS_PER_ELEMENT * (elements read + elements written)
    cycles  = seconds * clock_hz

The two constants were measured on the development machine (one x86-64 core, numpy 2) with
the reference executor's ``evaluate_node``, for ``relu``, ``requant`` and ``maxpool`` on 16
to 262,144 elements: a call costs 7 to 74 us before any element (Python dispatch,
attribute merging, the implementation's set-up), and an element 1 to 24 ns. The constants
are in the middle of those ranges, so a prediction is within a factor of about 5 of the
measured time; ``hwgen run`` reports both, per host op. The clock is
:data:`hwgen.timing.DEFAULT_CLOCK_HZ` unless a model is given another.

A host op between kernels also moves its operands: it reads its inputs from the
accelerator's memory and writes its outputs back. The engine adds those bytes at the memory
port's width, one word a cycle (:meth:`HostCostModel.link_cycles`): the fastest any host
bus on that port could move them, so the host is never priced above what it costs. That term
decides the layout steps: a host im2col writes nine times the bytes it reads (a 3x3 window),
where the window convolution gathers the same windows on the accelerator. (In simulation the
testbench moves the bytes for free; a board's host bus will not.) A kernel's cycles do not
count the host's work to pack its constant operands, which happens once, at compile time. At
the default constants one host op is worth 2,000 cycles before its first element, so the
accelerator keeps every op it can run in the bundled examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusion.ir.graph import Graph, Node
from hwgen.timing import DEFAULT_CLOCK_HZ

#: Predicted seconds of one host op before its first element (see the module docstring).
SECONDS_PER_OP = 20e-6
#: Predicted seconds per element a host op reads or writes.
SECONDS_PER_ELEMENT = 10e-9


@dataclass(frozen=True)
class HostCostModel:
    """Predicted host seconds of a node, and the accelerator cycles they are worth."""

    seconds_per_op: float = SECONDS_PER_OP
    seconds_per_element: float = SECONDS_PER_ELEMENT
    clock_hz: float = DEFAULT_CLOCK_HZ

    def __post_init__(self) -> None:
        for name in ("seconds_per_op", "seconds_per_element", "clock_hz"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0) or (name == "clock_hz" and
                                                              value == 0):
                raise ValueError(f"{name} must be a finite positive number, not {value!r}")

    @staticmethod
    def elements(graph: Graph, node: Node) -> int:
        """Elements ``node`` reads (its non-constant inputs) and writes."""
        reads = sum(math.prod(graph.tensors[n].shape) for n in node.inputs
                    if n and n not in graph.initializers)
        return reads + sum(math.prod(graph.tensors[n].shape) for n in node.outputs)

    def seconds(self, graph: Graph, node: Node) -> float:
        """Predicted wall seconds of ``node`` on the host."""
        return self.seconds_of(self.elements(graph, node))

    def seconds_of(self, elements: int) -> float:
        """Predicted wall seconds of one host op that reads and writes ``elements`` in all
        (a node, or a repack between kernels: :mod:`fusion.compiler.repack`)."""
        return self.seconds_per_op + self.seconds_per_element * elements

    @staticmethod
    def link_cycles(graph: Graph, node: Node, port_bytes: int) -> float:
        """Cycles to move ``node``'s operands between the accelerator's memory and the host:
        the bytes it reads (its non-constant inputs) and writes, one ``port_bytes`` word a
        cycle."""
        moved = sum(math.prod(graph.tensors[n].shape) * np.dtype(graph.tensors[n].dtype).itemsize
                    for n in (*(i for i in node.inputs if i and i not in graph.initializers),
                              *node.outputs))
        return moved / port_bytes

    def cycles(self, seconds: float) -> float:
        """``seconds`` in accelerator cycles at :attr:`clock_hz`."""
        return seconds * self.clock_hz
