"""External-memory planning: every buffer of a compiled model gets an address, reused when dead.

The buffers are the kernels' regions (:meth:`fusion.compiler.kernels.KernelSpec.regions`):

- constants (packed weights, bias/requantize groups) live for the whole model;
- a kernel's output lives from its kernel to its last reader;
- an input the host packs (a GEMM's A operand, a pooling plane) lives for its kernel only;
- when a pass reads the previous kernel's result in the same tile layout, it reads the
  producer's output buffer in place (no copy), which extends that buffer's life;
- scratch (a max chain's intermediates) lives for its kernel.

Offsets are assigned greedily, largest buffer first, at the lowest aligned offset that does
not overlap any already placed buffer whose lifetime overlaps (the "greedy by size" arena
planner). The peak is the highest end address.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fusion.compiler.kernels import KernelSpec
from fusion.compiler.lower import CompileError
from hwgen.config import VariantConfig

ALIGN_BYTES = 64


@dataclass
class Buffer:
    """One allocation: a name, a size, a lifetime in steps (inclusive) and its offset."""

    name: str
    nbytes: int
    first: int
    last: int
    role: str
    offset: int = -1
    users: list[str] = field(default_factory=list)  # "kernel.region" that use it

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


@dataclass
class MemoryPlan:
    """Where every region of every kernel lives in external memory."""

    buffers: list[Buffer]
    peak_bytes: int
    placements: dict[str, dict[str, int]]  # kernel -> region -> word address

    @property
    def unshared_bytes(self) -> int:
        """What the buffers would take with no reuse (for comparison)."""
        return sum(_align(b.nbytes) for b in self.buffers)

    def to_dict(self) -> dict:
        return {"peak_bytes": self.peak_bytes, "unshared_bytes": self.unshared_bytes,
                "buffers": [{"name": b.name, "bytes": b.nbytes, "offset": b.offset,
                             "first_step": b.first, "last_step": b.last, "role": b.role,
                             "users": b.users} for b in self.buffers]}


def _align(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES


def _aliases(config: VariantConfig, consumer: KernelSpec, region: str,
             producer: KernelSpec | None) -> bool:
    """Does ``consumer`` read ``producer``'s output buffer in place for ``region``? When
    its kind reads that region as the producer's kind leaves it (tile-blocked, same shape and
    type: :meth:`fusion.kernels.protocol.KernelKind.inputs_in_place`)."""
    if producer is None or region not in consumer.kind.inputs_in_place(consumer.params):
        return False
    wanted = consumer.kind.operands(config, consumer.params)[region]
    return wanted == producer.kind.output(producer.params)


def plan_memory(config: VariantConfig, steps: Sequence[KernelSpec | str],
                regions: dict[str, dict[str, int]], last_use: dict[str, int]) -> MemoryPlan:
    """Plan the buffers of ``steps`` (kernels, and host steps given by name).

    Parameters
    ----------
    config : VariantConfig
    steps : sequence
        Kernels and host steps in execution order.
    regions : dict
        Per kernel name, its regions (name -> bytes).
    last_use : dict
        Per graph tensor, the index of the last step that reads it (the end of the model for
        graph outputs).

    Raises
    ------
    CompileError
        If the peak exceeds the variant's external memory, naming the largest live buffers.
    """
    end = len(steps) - 1
    buffers: list[Buffer] = []
    owner: dict[tuple[str, str], Buffer] = {}
    producer_of: dict[str, tuple[KernelSpec, Buffer]] = {}
    for index, step in enumerate(steps):
        if not isinstance(step, KernelSpec):
            continue
        for region, nbytes in regions[step.name].items():
            role = step.region_role(region)
            if role == "input":
                tensor = _input_tensor(step, region)
                prod = producer_of.get(tensor) if tensor is not None else None
                if prod is not None and _aliases(config, step, region, prod[0]):
                    buf = prod[1]
                    buf.users.append(f"{step.name}.{region}")
                    owner[(step.name, region)] = buf
                    continue
            first, last = (0, end) if role == "const" else (index, index)
            if role == "output":
                last = max(index, last_use.get(step.output, index))
            buf = Buffer(f"{step.name}.{region}", nbytes, first, last, role,
                         users=[f"{step.name}.{region}"])
            buffers.append(buf)
            owner[(step.name, region)] = buf
            if role == "output":
                producer_of[step.output] = (step, buf)
    _assign(buffers)
    peak = max((b.end for b in buffers), default=0)
    capacity = config.mem_words * config.port_bytes
    if peak > capacity:
        worst = max(range(len(steps)), key=lambda i: sum(b.nbytes for b in buffers
                                                         if b.first <= i <= b.last))
        live = sorted((b for b in buffers if b.first <= worst <= b.last),
                      key=lambda b: -b.nbytes)[:4]
        names = ", ".join(f"{b.name} ({b.nbytes:,} B)" for b in live)
        bits = max(config.mem_addr_bits + 1, (-(-peak // config.port_bytes) - 1).bit_length())
        raise CompileError(
            f"the model needs {peak:,} bytes of external memory at its peak but the variant has "
            f"{capacity:,} (mem_addr_bits={config.mem_addr_bits}); the largest live buffers "
            f"are {names}; generate a variant with --mem-addr-bits {bits}")
    placements: dict[str, dict[str, int]] = {}
    for (kernel, region), buf in owner.items():
        placements.setdefault(kernel, {})[region] = buf.offset // config.port_bytes
    return MemoryPlan(buffers, peak, placements)


def _input_tensor(spec: KernelSpec, region: str) -> str | None:
    """The graph tensor an input region holds as is (a pass's ``src``), or None."""
    index = spec.kind.inputs_in_place(spec.params).get(region)
    return spec.inputs[index] if index is not None and index < len(spec.inputs) else None


def _assign(buffers: list[Buffer]) -> None:
    """Greedy by size: each buffer at the lowest offset free during its whole lifetime."""
    placed: list[Buffer] = []
    for buf in sorted(buffers, key=lambda b: (-b.nbytes, b.first, b.name)):
        busy = sorted((b.offset, b.offset + _align(b.nbytes)) for b in placed
                      if b.first <= buf.last and buf.first <= b.last)
        offset = 0
        for lo, hi in busy:
            if offset + _align(buf.nbytes) <= lo:
                break
            offset = max(offset, hi)
        buf.offset = offset
        placed.append(buf)
