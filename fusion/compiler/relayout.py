"""Relayout copies: the accelerator copies a tensor into the layout some readers take,
instead of the host repacking it between kernels.

One store cannot serve every reader (:mod:`fusion.compiler.store_layout`): a ResNet block's
input is the residual of its last convolution (row-major tiles, read by the epilogue) and the
A operand of its first (K-major); a ShuffleNet unit's, the same. The reader the store does not
serve gets its region from the host (a repack, :mod:`fusion.compiler.repack`: a host op, and
the tensor over the bus twice). A GEMM can make the other layout itself: A read K-major, times
the identity, requantized by 1, stored as tiles. Each output is its input, less and plus the
zero point (exact), and with the identity's blocks as groups of one channel
(:func:`fusion.compiler.kernels.grouping`) each tile reduces over 8 rows: a few cycles a tile,
where the repack costs the host a call and every element. Its multiply-accumulates are not the
model's (``qmatmul asked=0``, as for a channel shuffle), so utilization does not count them.
The other way, an NCHW tensor stored as tiles (Inception's stride-2 max pools, read by the
branch's max pool and by three convolutions) is copied K-major by a 1x1 max pool on the window
unit, which reads tiles and stores K-major: the max of one element is that element.

The compiler plans the model, asks :func:`requests` which repacked tensors a copy would serve
(the producer can store K-major, and both layouts have in-place readers), inserts the copies
with :func:`fusion.passes.relayout_copy.apply` (the readers of tiles read the copy; the
producer's store then serves the rest K-major, and the copy reads it in place) and plans
again; it keeps the plan predicted
cheaper, kernels and host together. The plan records its copies (``plan.json``
``relayouts``), so that reading it with its model applies them to the graph the passes give.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fusion.compiler.memplan import aliases
from fusion.kernels import layout
from fusion.passes.relayout_copy import BY as BY
from fusion.passes.relayout_copy import Relayout as Relayout
from fusion.passes.relayout_copy import apply as apply
from fusion.passes.relayout_copy import copy_problem, reads


def requests(compiled: Any) -> list[Relayout]:
    """The copies that would spare ``compiled`` (a :class:`fusion.compiler.plan.
    CompiledModel`) its repacks: for each repacked tensor whose producer can store it K-major,
    that it holds as GEMM rows, and that kernels read in place both ways, a copy for the graph
    nodes of the kernels that read it as tiles."""
    config, graph = compiled.config, compiled.graph
    window = config.window_unit and compiled.options.window_unit
    stored_by = {k.spec.output: k.spec for k in compiled.kernels}
    found = []
    for tensor in dict.fromkeys(r.tensor for r in compiled.repacks):
        spec = stored_by[tensor]
        if not hasattr(spec.params, "kmajor_out"):
            continue
        tiles = spec.with_params(dataclasses.replace(spec.params, kmajor_out=False))
        kmajor = spec.with_params(dataclasses.replace(spec.params, kmajor_out=True))
        shape = tuple(graph.tensors[tensor].shape)
        as_tiles, as_kmajor = [], []
        for k in compiled.kernels:
            regions = [region for region, index in
                       k.spec.kind.inputs_in_place(k.spec.params).items()
                       if index < len(k.spec.inputs) and k.spec.inputs[index] == tensor]
            reads_kmajor = any(aliases(config, k.spec, r, kmajor, shape) for r in regions)
            reads_tiles = any(aliases(config, k.spec, r, tiles, shape) for r in regions)
            # a kernel reading it both ways (a GEMM whose residual is its own A) has nodes
            # that a copy cannot tell apart: it stays repacked
            if reads_kmajor != reads_tiles:
                nodes = [n for n in k.spec.nodes if reads(graph, graph.node(n), tensor)]
                (as_kmajor if reads_kmajor else as_tiles).extend(nodes)
        if not (as_tiles and as_kmajor):
            continue
        if copy_problem(graph, tensor, "gemm") is None and \
                kmajor.kind.legality(config, kmajor.params) is None and \
                tiles.kind.region_view(tiles.params, "out", shape) == layout.ROWS:
            found.append(Relayout(tensor, tuple(dict.fromkeys(as_tiles)), "gemm"))
        elif window and copy_problem(graph, tensor, "window") is None:
            found.append(Relayout(tensor, tuple(dict.fromkeys(as_kmajor)), "window"))
    return found
