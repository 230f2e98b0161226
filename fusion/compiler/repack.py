"""Repacks: a kernel's input that an earlier kernel stored, but not as this kernel reads it.

A kernel reads a producer's output where it lies only when the two agree on the operand, the
layout and the view (:func:`fusion.compiler.memplan.aliases`). When they do not (a window
pool stores row-major tiles and the convolutions after it read K-major; one store cannot
serve a reader of each), the runtime writes the reader's region itself, in the reader's
layout: on a board the host reads the producer's buffer over its bus, rearranges it and writes
it back. That is a layout step on the host like a transpose between kernels, though no graph
node asks for it, so the plan lists it (:attr:`fusion.compiler.plan.CompiledModel.repacks`)
and prices it as the host cost model prices any host step (:mod:`fusion.cost.host`): one op
reading and writing the tensor's elements, and the bytes moved over the memory port.

In simulation the testbench writes the region for free (:func:`fusion.runtime.run.run_compiled`
counts its bytes in ``host_written_bytes``); the listing is what says the plan relies on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fusion.cost.host import HostCostModel
from fusion.ir.graph import Graph
from hwgen.config import VariantConfig


@dataclass(frozen=True)
class Repack:
    """One kernel input region the host writes from an earlier kernel's output.

    Attributes
    ----------
    kernel, region : str
        The reader and its input region.
    tensor : str
        The graph tensor the region holds.
    producer : str
        The kernel that stored it.
    stored, wanted : str
        How the producer stored it and how the reader reads it: ``layout/view``
        (:meth:`fusion.kernels.protocol.KernelKind.region_layout` and ``region_view``).
    read_bytes, written_bytes : int
        The producer's output buffer, and the reader's region.
    predicted_seconds : float
        The host cost model's price of the rearrangement (one op over the tensor's elements,
        read and written).
    predicted_cycles : float
        The same in accelerator cycles at the model's clock.
    link_cycles : float
        Moving ``read_bytes + written_bytes`` over the memory port, a word a cycle.
    """

    kernel: str
    region: str
    tensor: str
    producer: str
    stored: str
    wanted: str
    read_bytes: int
    written_bytes: int
    predicted_seconds: float
    predicted_cycles: float
    link_cycles: float

    @property
    def name(self) -> str:
        return f"{self.kernel}.{self.region}"

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "region": self.region, "tensor": self.tensor,
                "producer": self.producer, "stored": self.stored, "wanted": self.wanted,
                "read_bytes": self.read_bytes, "written_bytes": self.written_bytes,
                "predicted_seconds": self.predicted_seconds,
                "predicted_cycles": round(self.predicted_cycles),
                "link_cycles": round(self.link_cycles)}


def find_repacks(graph: Graph, config: VariantConfig, kernels: Sequence[Any],
                 in_place: Mapping[str, frozenset[str]], host: HostCostModel) -> list[Repack]:
    """The repacks of a plan's ``kernels`` (:class:`fusion.compiler.plan.KernelStep`, in plan
    order), given the regions each reads in place (``in_place``: kernel -> regions, from the
    memory plan), priced by ``host``."""
    stored_by = {k.spec.output: k for k in kernels}
    found = []
    for k in kernels:
        spec = k.spec
        for region, index in spec.kind.inputs_in_place(spec.params).items():
            if index >= len(spec.inputs) or region in in_place[spec.name]:
                continue
            tensor = spec.inputs[index]
            producer = stored_by.get(tensor)
            if producer is None:  # the model's input or a host step's output: priced there
                continue
            shape = tuple(graph.tensors[tensor].shape)
            p = producer.spec
            elements = math.prod(shape)
            read = producer.compiled.regions["out"].nbytes
            written = k.compiled.regions[region].nbytes
            seconds = host.seconds_of(2 * elements)
            found.append(Repack(
                k.name, region, tensor, producer.name,
                _how(config, p, "out", shape), _how(config, spec, region, shape),
                read, written, seconds, host.cycles(seconds),
                (read + written) / config.port_bytes))
    return found


def _how(config: VariantConfig, spec: Any, region: str, shape: tuple[int, ...]) -> str:
    return (f"{spec.kind.region_layout(config, spec.params, region)}/"
            f"{spec.kind.region_view(spec.params, region, shape)}")
