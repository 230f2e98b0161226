"""One kernel of a compiled model as the engine chose it: :class:`KernelSpec`, the record
that flows from the engine through the memory plan to the runtime (what
:mod:`fusion.compiler.kernels` makes of a chain's segments)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.compiler.lower import from_lanes, to_lanes
from fusion.ir.graph import Graph
from fusion.kernels.cache import KernelCache
from fusion.kernels.program import Kernel, compile_kernel
from fusion.kernels.protocol import KernelKind
from hwgen.config import VariantConfig

__all__ = ["KernelSpec"]


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """One kernel as the engine chose it (no program yet).

    Attributes
    ----------
    name : str
        Unique in the plan: its first node's name.
    kind : KernelKind
    params
        The kind's params (shapes, stages, quantization, tiling...).
    nodes : tuple of str
        The graph nodes it computes, in order.
    inputs : tuple of str
        The graph tensors it reads (activations; constants are in ``consts``).
    output : str
        The graph tensor it produces.
    consts : dict of str to ndarray
        Constant operands: ``b``, ``bias``, ``mult``, ``shift``.
    note : str
        What :meth:`describe` adds about how the graph made it (a weight split along K).
    """

    name: str
    kind: KernelKind
    params: Any
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    output: str
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    note: str = ""

    @property
    def fused_ops(self) -> int:
        return len(self.nodes)

    def describe(self) -> str:
        """One line: the kind, the ops, the shape and what the kind adds (stages, tiling)."""
        text = self.kind.describe(self.params, "+".join(n.rsplit("/", 1)[-1]
                                                        for n in self.nodes))
        return f"{text}; {self.note}" if self.note else text

    def with_params(self, params: Any) -> KernelSpec:
        """The same kernel with other params of its kind (another tiling)."""
        return dataclasses.replace(self, params=params)

    def regions(self, config: VariantConfig) -> dict[str, int]:
        """Region name -> bytes, before any program is built."""
        return self.kind.regions(config, self.params)

    def weight_bytes(self, config: VariantConfig) -> int:
        """Bytes of its constant GEMM weights: the ``b`` region, padded to whole tiles as it
        sits in memory; 0 for a kind that has none."""
        return self.regions(config)["b"] if "b" in self.kind.const_regions else 0

    def region_role(self, region: str) -> str:
        """``const`` (weights, bias groups), ``output``, ``scratch`` or ``input``."""
        return self.kind.region_role(region)

    def compile(self, config: VariantConfig, placement: Mapping[str, int] | None,
                cache: KernelCache | None) -> Kernel:
        """The compiled kernel at ``placement``, through the kernel cache."""
        return compile_kernel(self.kind, config, self.params, placement=placement, cache=cache)

    def operands(self, graph: Graph, env: Mapping[str, np.ndarray], config: VariantConfig
                 ) -> dict[str, np.ndarray]:
        """The kernel's operand arrays (lane values) from the tensors' values ``env``."""
        xs = [to_lanes(env[name], graph.tensors[name].dtype) for name in self.inputs]
        return {**self.kind.host_operands(config, self.params, xs), **self.consts}

    def result(self, graph: Graph, out2d: np.ndarray) -> np.ndarray:
        """The output tensor's value from the kernel's ``M x N`` lanes (a kernel that lays
        its output over the array's columns pads the tail, which is dropped)."""
        t = graph.tensors[self.output]
        flat = np.asarray(out2d).reshape(-1)[:math.prod(t.shape)]
        return from_lanes(self.kind.tensor_of(self.params, flat, t.shape), t.dtype)
