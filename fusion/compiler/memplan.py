"""External-memory planning: every buffer of a compiled model gets an address, reused when dead.

The buffers are the kernels' regions (:meth:`fusion.compiler.spec.KernelSpec.regions`):

- constants (packed weights, bias/requantize groups) live for the whole model;
- a kernel's output lives from its kernel to its last reader;
- an input the host packs (a GEMM's A operand, a pooling plane) lives for its kernel only;
- when a kernel reads the previous kernel's result in the layout it was stored in (a pass or
  a residual reading tiles, a GEMM reading a K-major output as its A), it reads the
  producer's output buffer in place (no copy), which extends that buffer's life;
- scratch (a max chain's intermediates) lives for its kernel.

Offsets are assigned greedily, largest buffer first, at the lowest aligned offset that does
not overlap any already placed buffer whose lifetime overlaps (the "greedy by size" arena
planner). The peak is the highest end address.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fusion.compiler.kernels import KernelSpec
from fusion.compiler.lower import CompileError
from fusion.ir.graph import Graph
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

    def in_place(self, kernel: str) -> frozenset[str]:
        """The input regions of ``kernel`` that read an earlier kernel's output buffer where
        it lies: the runtime writes nothing there, the producer's store already did."""
        # a user is "kernel.region"; kernel names may hold dots, region names never do
        return frozenset(user.rsplit(".", 1)[1] for b in self.buffers for user in b.users
                         if user != b.name and user.rsplit(".", 1)[0] == kernel)

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


def aliases(config: VariantConfig, consumer: KernelSpec, region: str,
            producer: KernelSpec | None, shape: tuple[int, ...]) -> bool:
    """Does ``consumer`` read ``producer``'s output buffer in place for ``region``? When
    its kind reads that region as the producer's kind leaves it: the same shape and type
    (:meth:`fusion.kernels.protocol.KernelKind.inputs_in_place`) in the same layout
    (:meth:`~fusion.kernels.protocol.KernelKind.region_layout`: row-major tiles, or a GEMM's
    K-major output read as the next GEMM's A), holding the graph tensor (of ``shape``) the
    same way (:meth:`~fusion.kernels.protocol.KernelKind.region_view`: a max pool gathered on
    the host stores an NCHW tensor's elements in rows of ``cols``, which a window kernel's
    pixel rows are not, though with ``cols`` channels their operands are equal)."""
    if producer is None or region not in consumer.kind.inputs_in_place(consumer.params):
        return False
    wanted = consumer.kind.operands(config, consumer.params)[region]
    return (wanted == producer.kind.output(producer.params)
            and consumer.kind.region_layout(config, consumer.params, region)
            == producer.kind.region_layout(config, producer.params, "out")
            and consumer.kind.region_view(consumer.params, region, shape)
            == producer.kind.region_view(producer.params, "out", shape))


def plan_memory(config: VariantConfig, steps: Sequence[KernelSpec | str],
                regions: dict[str, dict[str, int]], last_use: dict[str, int],
                shapes: Mapping[str, tuple[int, ...]]) -> MemoryPlan:
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
    shapes : mapping
        Per graph tensor a kernel produces, its shape (:func:`aliases`).

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
                if prod is not None and aliases(config, step, region, prod[0],
                                                tuple(shapes[tensor])):
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
    if peak > config.mem_words * config.port_bytes:
        worst = max(range(len(steps)), key=lambda i: sum(b.nbytes for b in buffers
                                                         if b.first <= i <= b.last))
        live = sorted((b for b in buffers if b.first <= worst <= b.last),
                      key=lambda b: -b.nbytes)[:4]
        raise too_big(config, peak, "the model needs", "at its peak", "the largest live "
                      "buffers are " + ", ".join(f"{b.name} ({b.nbytes:,} B)" for b in live))
    placements: dict[str, dict[str, int]] = {}
    for (kernel, region), buf in owner.items():
        placements.setdefault(kernel, {})[region] = buf.offset // config.port_bytes
    return MemoryPlan(buffers, peak, placements)


def too_big(config: VariantConfig, need: int, who: str, when: str, parts: str
            ) -> CompileError:
    """The error for ``need`` bytes of external memory that the variant does not have: the
    figures, what takes them, and the ``--mem-addr-bits`` that would fit (or that none does)."""
    capacity = config.mem_words * config.port_bytes
    bits = max(config.mem_addr_bits + 1, (-(-need // config.port_bytes) - 1).bit_length())
    try:
        dataclasses.replace(config, mem_addr_bits=bits)
        fix = f"generate a variant with --mem-addr-bits {bits}"
    except ValueError as exc:  # more than any variant addresses
        fix = (f"that needs --mem-addr-bits {bits}, which no variant has ({exc}): make the "
               f"model smaller (a smaller batch)")
    return CompileError(f"{who} {need:,} bytes of external memory{' ' * bool(when)}{when} but "
                        f"the variant has "
                        f"{capacity:,} (mem_addr_bits={config.mem_addr_bits}); {parts}; {fix}")


def floor_bytes(regions: dict[str, int], roles: dict[str, str]) -> int:
    """The least external memory a kernel's regions take, whatever the plan (see
    :func:`check_floor`)."""
    inputs = [n for r, n in regions.items() if roles[r] == "input"]
    return sum(n for r, n in regions.items() if roles[r] != "input") + max(inputs, default=0)


def check_floor(config: VariantConfig, kernel: str, regions: dict[str, int],
                roles: dict[str, str]) -> None:
    """Refuse, before anything is priced, a kernel whose own buffers cannot fit: whatever the
    plan, its output, constants and scratch are live with its largest input (its inputs may
    share a buffer with a producer's output, or each other, so only the largest counts).

    Parameters
    ----------
    config : VariantConfig
    kernel : str
        Named in the error.
    regions, roles : dict
        The kernel's regions (name -> bytes) and their roles
        (:meth:`fusion.compiler.spec.KernelSpec.region_role`).

    Raises
    ------
    CompileError
        With the bytes needed and available, and the ``--mem-addr-bits`` that would fit.
    """
    need = floor_bytes(regions, roles)
    if need > config.mem_words * config.port_bytes:
        biggest = sorted(regions.items(), key=lambda item: -item[1])[:3]
        raise too_big(config, need, f"kernel {kernel!r} needs at least", "", "its largest "
                      "regions are " + ", ".join(f"{r} ({n:,} B)" for r, n in biggest))


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


def check_batch_fits(graph: Graph, config: VariantConfig, batch: int) -> None:
    """Refuse, before any work, a batch whose data cannot fit the variant's external
    memory: the largest tensor computed from the inputs, at one byte an element (int8 on
    the accelerator), must fit beside the weights whatever the plan."""
    import math

    if batch == 1:
        return
    weights = sum(int(v.size) for v in graph.initializers.values() if v.ndim >= 2)
    name, largest = max(((n, math.prod(t.shape)) for n, t in graph.tensors.items()
                         if n not in graph.initializers), key=lambda p: p[1])
    need = weights + largest
    if need > config.mem_bytes:
        raise too_big(config, need, f"--batch {batch}: the model needs at least", "",
                      f"its largest tensor {name} has {largest:,} elements at batch {batch} "
                      f"beside {weights:,} B of weights")
