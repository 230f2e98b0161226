"""The streamed GEMM's program: the context of ``gemm_stream.j2``.

A GEMM of one row block (a GEMV, or a batch up to ``rows``) is bound by streaming B: every
weight is used once. The super-tile loop of ``gemm.j2`` waits for each block's load before the
next starts (``wait LOAD+FEED`` between super tiles), so the port idles for a load's latency
per column block, and the last block's matmuls run with the port idle. Streamed (tiling
``stream`` = q), A is loaded once, and B flows through a ring of ``q`` scratchpad slots of
``kc = Kp / q`` rows, one chunk of a column block each:

    chunk i:  wait LOAD (left q-2)    # chunk i is in; chunks i+1 .. i+q-2 may still load
              matmul  (A rows and slot of chunk i; the column block's last chunk ends the tile)
              wait FEED (left 1)      # chunk i-1 has read its slot (chunk i may still read)
              load chunk i+q-1 into that slot

so ``q - 1`` loads are queued or in flight whenever the array works, and only the last chunk's
matmul and the tile's drain run after the port's last word. Chunk ``s`` of every column block
reads A rows and B slot ``s*kc``, so a column block is the loop body, unrolled over its
chunks; the last column block is peeled, its later chunks loading nothing and waiting with a
smaller ``left``.

With the residual stage, chunk 0 of each column block waits for the epilogue (the tile before
has read the residual rows) and loads the block's residual tile into the epilogue scratchpad
rows after the bias rows; its last chunk's counted WAIT, which leaves at most q - 2 newer
loads pending, so waits for it too. The wait costs the array nothing while chunk 0 computes
for longer than the tile before takes to drain (ResNet-50's 1x1 convolutions of 256 to 2,048
channels at one row block, whose residual add ran as a pass of its own).

Registers, besides those of ``common.j2``: r6 the chunk's A row and B slot, r7 the slot a
load fills, r8 the output tile's address, r9 its bias row (group), r10 the residual tile's
row, r13 the next residual tile's address, r14 the next chunk's B address, r15 A's address,
r4 the column-block counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fusion.kernels.codegen import check_load
from fusion.kernels.epilogue import DT_BYTES, bias_load, csr_writes
from fusion.kernels.layout import GemmDims, Region, bias_group
from fusion.kernels.tiling import Tiling
from hwgen.isa import Dst
from hwgen.reference import EpilogueParams


def stream_context(dims: GemmDims, tiling: Tiling, stages: tuple[str, ...],
                   regions: Mapping[str, Region], *, params: EpilogueParams, out: Region,
                   out_dt: str, prefix: str = "gemm", halt: bool = True,
                   transposed: bool = False) -> dict[str, Any]:
    """The context of ``gemm_stream.j2`` (arguments as for
    :func:`fusion.kernels.gemm.loops.gemm_context`; ``tiling.stream`` is the chunk count)."""
    cfg, q = dims.config, tiling.stream
    kc = dims.Kp // q
    has_bias = "bias" in stages or (params.per_channel and "requant" in stages)
    if has_bias and "bias" not in regions:
        raise ValueError("the kernel reads a bias region (the bias stage, or per-channel "
                         "requantize's multipliers and shifts) but none was given")
    chunk_words = kc * dims.C // dims.W
    a_words = dims.Kp * dims.R // dims.W
    check_load(cfg, 1, chunk_words, Dst.B)
    check_load(cfg, 1, a_words, Dst.A)
    has_res = "residual" in stages
    res_words = dims.tile_words(1)
    if has_res:
        check_load(cfg, 1, res_words, Dst.E8)

    def chunk(s: int, *, left: int, load: bool) -> dict[str, Any]:
        # chunk 0 also loads its column block's residual tile: q - 2 loads or fewer come
        # after it before the last chunk's counted WAIT, which so waits for it too
        return {"row": s * kc, "left": left, "last": s == q - 1,
                "load": ((s - 1) % q) * kc if load else None, "res_load": has_res and s == 0}

    # every chunk of a column block that has q-1 chunks after it loads the one q-1 ahead
    body = [chunk(s, left=q - 2, load=True) for s in range(q)]
    # the last column block: chunk 0 loads its last chunk; then fewer loads are left
    final = [chunk(s, left=min(q - 2, q - 1 - s), load=s == 0) for s in range(q)]
    return {
        "prefix": prefix, "halt": halt, "q": q, "kc": kc, "chunk_words": chunk_words,
        "csrs": csr_writes(stages, params),
        "bias_load": bias_load(dims, regions["bias"], params.per_channel) if has_bias else None,
        "setup": [("r15", regions["a"].addr), ("r14", regions["b"].addr), ("r8", out.addr)]
        + ([("r9", 0)] if has_bias else [])
        # the residual tile's rows follow the bias rows in the epilogue scratchpad
        + ([("r13", regions["residual"].addr),
            ("r10", dims.bias_region_rows(params.per_channel) if has_bias else 0)]
           if has_res else []),
        "a_words": a_words, "prologue_slots": [s * kc for s in range(q - 1)],
        "blocks": dims.Nb, "body": body, "final": final, "has_bias": has_bias,
        "has_res": has_res, "res_words": res_words,
        "mask": f"{sum(cfg.stage_bit(s) for s in stages):#b}", "dt": out_dt,
        "tr": int(transposed), "out_step": dims.tile_words(DT_BYTES[out_dt]),
        "bias_step": bias_group(params.per_channel),
        "refill": False, "window": None, "load_a": True,
    }
