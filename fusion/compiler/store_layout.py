"""Which layout each kernel stores its output in, so that the next kernels read it in place.

A GEMM stores row-major tiles by default: what an epilogue pass, a residual or the host reads.
A following GEMM reads its A operand K-major, so a GEMM feeding GEMMs stores its tiles
transposed instead (``kmajor_out``, MATMUL ``tr``; :mod:`fusion.kernels.layout`), and the
memory planner then lets those GEMMs read the producer's buffer where it lies
(:func:`fusion.compiler.memplan.aliases`): the activation never leaves the accelerator's memory
between the two kernels, and the host neither reads nor repacks it.

The rule, per producing GEMM: store K-major when the kernels that would read the output in
place that way read more bytes of it than those that would read it in place as tiles. A
reader the store does not serve gets its region from the host, which rewrites the tensor in
its layout between the kernels (a repack, :mod:`fusion.compiler.repack`, priced by the
bytes it moves): Inception's joins feed three 1x1 convolutions (K-major) and a max pool
(tiles), and one repack is cheaper than three. On a tie the tiles stay. Host steps and graph
outputs read whichever layout it is (the runtime decodes it), so they do not vote. A producer the
hardware cannot store transposed (its kind's legality with ``kmajor_out``: a non-square
array, an int32 or unfused output) keeps its tiles. GEMMs and window convolutions
(:mod:`fusion.kernels.conv`) both store K-major, and both read it: a GEMM as its A, a
convolution as the input it gathers windows from. A channel join (:mod:`fusion.kernels.
concat`) reads and stores either layout, the same for its inputs and its output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from fusion.compiler.kernels import KernelSpec
from fusion.compiler.memplan import aliases
from hwgen.config import VariantConfig


def with_kmajor(spec: KernelSpec) -> KernelSpec:
    """``spec`` storing its output K-major."""
    return spec.with_params(dataclasses.replace(spec.params, kmajor_out=True))


def kmajor_producers(config: VariantConfig, specs: Sequence[KernelSpec],
                     shapes: Mapping[str, tuple[int, ...]]) -> set[str]:
    """The names of the GEMMs of ``specs`` that should store their output K-major (see the
    module docstring); ``shapes`` holds the shape of each graph tensor a kernel produces.

    A join (:mod:`fusion.kernels.concat`) stores its output in the layout it reads its
    inputs in, so its readers' vote reaches its producers through it: the rule runs again
    with the choices made so far until none changes (a producer's choice never changes the
    votes of the readers downstream of it, so it settles)."""
    chosen: set[str] = set()
    while True:
        current = [with_kmajor(s) if s.name in chosen else s for s in specs]
        found = _one_round(config, specs, current, shapes)
        if found == chosen:
            return chosen
        chosen = found


def _one_round(config: VariantConfig, specs: Sequence[KernelSpec],
               current: Sequence[KernelSpec], shapes: Mapping[str, tuple[int, ...]]
               ) -> set[str]:
    """The rule for each of ``specs`` (as planned, tiles), with its readers as ``current``
    has them."""
    readers: dict[str, list[tuple[KernelSpec, str]]] = {}
    for spec in current:
        for region, index in spec.kind.inputs_in_place(spec.params).items():
            if index < len(spec.inputs):
                readers.setdefault(spec.inputs[index], []).append((spec, region))
    chosen = set()
    for spec in specs:
        if not hasattr(spec.params, "kmajor_out"):
            continue
        turned = with_kmajor(spec)
        if turned.kind.legality(config, turned.params) is not None:
            continue
        reads = readers.get(spec.output, [])
        shape = tuple(shapes[spec.output])
        # the bytes each store would spare the host repacking (a reader's region, as it reads it)
        as_kmajor = sum(reader.regions(config)[region] for reader, region in reads
                        if aliases(config, reader, region, turned, shape))
        as_tiles = sum(reader.regions(config)[region] for reader, region in reads
                       if aliases(config, reader, region, spec, shape))
        if as_kmajor > as_tiles:
            chosen.add(spec.name)
    return chosen
