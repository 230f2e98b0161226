"""The block-sparse GEMM: weights with all-zero blocks, specialized when the model is compiled.

Pruned models (block or channel pruning) keep their weights as constants, so which blocks of
B are all zero is known before anything runs. B is cut into blocks of
:func:`block_rows` K rows by one column block (``cols`` columns: what one MATMUL slice of one
output tile reads); :func:`weight_blocks` lists, per column block, the K blocks that hold a
non-zero weight. The block-sparse program (``gemm_sparse.j2``) stores only those blocks, and
never loads or multiplies the others: the index of the blocks is the program itself (the
scratchpad rows its MATMULs read), so nothing is looked up while it runs. A column block whose
weights are all zero keeps its first block, so that its tiles still drain (the bias alone).

Memory: A is the dense GEMM's ``[Mb][a_Kp][R]``; B is *compact*: column block ``n``'s
non-zero blocks one after the other (``[sum of their rows][C]``, in column-block order), so
each column block is one contiguous LOAD.

Schedule: A stays resident in groups of ``tm`` row blocks (as many as the A scratchpad holds,
a divisor of ``Mb``); per group, the column blocks run in order, their weights streaming
through a ring of ``q`` slots of the B scratchpad (:func:`slots`), ``q - 1`` column blocks
ahead, as the streamed GEMM's chunks do (:mod:`fusion.kernels.gemm.stream`):

    column n:  wait LOAD (left q-2)     # its weights are in; newer loads may still run
               for each row block: one MATMUL per run of consecutive non-zero blocks
               (the tile's last run ends the tile and drains it through the epilogue)
               wait FEED (left: its own jobs, at most 15)   # column n-1 has read its slot
               load weights(n+q-1) into that slot

so the port keeps loading while the array works, even at one row block (a GEMV), where a
column block's loads take as long as its matmuls.

Consecutive non-zero blocks are one MATMUL (they are consecutive in A and in compact B).
Registers, besides those of ``common.j2``: r15 the current row block's first A row, r5 the
row-block counter, r6 and r7 a run's A and B rows, r8 the output tile, r9 its bias row,
r12 A's address, r11 the group counter, r1 and r2 a weight load's address and row.

The analytical model prices this program by running it through
:class:`~fusion.cost.machine.Machine` (:func:`fusion.cost.analytical.estimate_program`): its
shape follows the weights, so no fixed walk of phases describes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fusion.kernels.codegen import FIELD_MAX, check_load
from fusion.kernels.epilogue import DT_BYTES, bias_load, csr_writes
from fusion.kernels.layout import GemmDims, Region, bias_group, ceil_div, pack_b
from fusion.kernels.tiling import Tiling
from hwgen.config import VariantConfig
from hwgen.isa import MAX_LEFT, Dst
from hwgen.reference import EpilogueParams

Blocks = tuple[tuple[int, ...], ...]


def block_rows(config: VariantConfig) -> int:
    """K rows of one weight block: the array's rows (a square block on a square array),
    rounded to whole memory words of B and A (``config.k_align``)."""
    return math.lcm(config.rows, config.k_align)


def k_blocks(dims: GemmDims) -> list[tuple[int, int]]:
    """The rows ``[lo, hi)`` of the padded K (``Kp``) of each weight block; the last one may
    be shorter."""
    kb = block_rows(dims.config)
    return [(lo, min(lo + kb, dims.Kp)) for lo in range(0, dims.Kp, kb)]


def weight_blocks(config: VariantConfig, w: np.ndarray) -> Blocks | None:
    """Per column block of the ``K x N`` weights ``w``, the K blocks that hold a non-zero
    weight (at least one each: a column block of zeros keeps its first block); None when no
    block is all zero (the dense program is the one to run)."""
    K, N = w.shape  # noqa: N806
    dims = GemmDims(config, 1, K, N)
    kb, C = block_rows(config), dims.C  # noqa: N806
    nkb = ceil_div(dims.Kp, kb)
    padded = np.zeros((nkb * kb, dims.Nb * C), bool)
    padded[:K, :N] = np.asarray(w) != 0
    nonzero = padded.reshape(nkb, kb, dims.Nb, C).any(axis=(1, 3))  # [k block, column block]
    if nonzero.all():
        return None
    return tuple(tuple(int(j) for j in np.flatnonzero(col)) or (0,) for col in nonzero.T)


def sparse_blocks(config: VariantConfig, w: np.ndarray) -> Blocks:
    """:func:`weight_blocks`, or every block when none is all zero: the blocks of ``w`` for
    a block-sparse kernel asked for whatever the weights (``hwgen gemm --prune``)."""
    blocks = weight_blocks(config, w)
    if blocks is not None:
        return blocks
    dims = GemmDims(config, 1, *np.shape(w))
    return tuple(tuple(range(len(k_blocks(dims)))) for _ in range(dims.Nb))


def kept_rows(dims: GemmDims, blocks: Blocks) -> list[int]:
    """Rows of B each column block keeps (the rows of its non-zero blocks)."""
    spans = k_blocks(dims)
    return [sum(spans[j][1] - spans[j][0] for j in col) for col in blocks]


def group_rows(dims: GemmDims) -> int:
    """Row blocks of A resident at once: the largest divisor of ``Mb`` whose rows fit the A
    scratchpad (0 when one row block does not)."""
    fit = dims.config.spad_a_depth // dims.a_Kp
    return max((g for g in range(1, dims.Mb + 1) if dims.Mb % g == 0 and g <= fit), default=0)


def sparse_tiling(dims: GemmDims) -> Tiling:
    """The tiling the block-sparse program records: ``tm`` row blocks of A resident, one
    column block at a time over the whole K, its weights through a ring of slots."""
    return Tiling(tm=max(1, group_rows(dims)), tn=1, kt=dims.Kp, order="nm",
                  double_buffer=True)


def sparse_problems(dims: GemmDims, blocks: Blocks, stages: tuple[str, ...], *,
                    fused: bool, per_channel: bool) -> list[str]:
    """Why the block-sparse program cannot run this GEMM; empty if it can."""
    cfg = dims.config
    problems = []
    if dims.grouped:
        problems.append("a grouped GEMM already skips the blocks off its diagonal")
    if len(blocks) != dims.Nb or any(j >= len(k_blocks(dims)) for col in blocks for j in col):
        problems.append(f"the weight blocks name {len(blocks)} column block(s) and K blocks "
                        f"up to {max(max(col) for col in blocks)}; this GEMM has {dims.Nb} "
                        f"column blocks of {len(k_blocks(dims))} K blocks")
    if "residual" in stages:
        problems.append("the block-sparse program loads no residual tiles: leave the "
                        "residual stage out")
    if not fused and stages:
        problems.append("the block-sparse program runs its epilogue fused only")
    if group_rows(dims) == 0:
        problems.append(f"one row block of A ({dims.a_Kp} rows) does not fit the A "
                        f"scratchpad ({cfg.spad_a_depth} rows)")
    if not problems:
        most = max(kept_rows(dims, blocks))
        if slots(dims, blocks) < 2:
            problems.append(f"a column block keeps {most} rows of weights, more than half the "
                            f"B scratchpad ({cfg.spad_b_depth // 2})")
        if most * dims.C // dims.W > FIELD_MAX or dims.a_Kp * dims.R // dims.W > FIELD_MAX:
            problems.append(f"a load exceeds the 16-bit len field ({FIELD_MAX} words)")
        words = program_bound(dims, blocks)
        if words > cfg.imem_depth:
            problems.append(f"its program takes up to {words} words, more than the "
                            f"instruction memory's {cfg.imem_depth}")
    problem = bias_rows_problem(dims, stages, per_channel)
    return problems + ([problem] if problem else [])


def bias_rows_problem(dims: GemmDims, stages: tuple[str, ...], per_channel: bool) -> str | None:
    """Why every column block's bias rows cannot sit in the epilogue scratchpad at once (what
    the block-sparse and zero-skipping programs load before their first column block); None
    when they can, or when the kernel reads no bias region."""
    cfg = dims.config
    has_bias = "bias" in stages or (per_channel and "requant" in stages)
    if has_bias and dims.bias_region_rows(per_channel) > cfg.spad_e_depth:
        return (f"the bias rows of all {dims.Nb} column blocks "
                f"({dims.bias_region_rows(per_channel)}) do not fit the epilogue scratchpad "
                f"({cfg.spad_e_depth} rows)")
    return None


#: Instructions outside the column blocks, at most: the prologue (CSR writes, the bias load,
#: the register setup), a group's loop and A and first weight loads, and the final wait and
#: halt.
_FIXED_WORDS = 48


def program_bound(dims: GemmDims, blocks: Blocks) -> int:
    """Instructions of the block-sparse program, at most (``gemm_sparse.j2``): per column
    block its load and counters (at most 10) and three per MATMUL."""
    return _FIXED_WORDS + sum(10 + 3 * len(runs(dims, col)) for col in blocks)


#: Weight slots of the B scratchpad at most: loads of up to three column blocks ahead.
MAX_SLOTS = 4


def slots(dims: GemmDims, blocks: Blocks) -> int:
    """Column blocks' weights the B scratchpad holds at once (a ring of equal slots, each as
    large as the largest column block's), at most :data:`MAX_SLOTS`."""
    return min(MAX_SLOTS, dims.config.spad_b_depth // max(kept_rows(dims, blocks)))


def sparse_b_bytes(dims: GemmDims, blocks: Blocks) -> int:
    """Bytes of the compact B region."""
    return sum(kept_rows(dims, blocks)) * dims.C


def pack_sparse_b(dims: GemmDims, blocks: Blocks, b: np.ndarray) -> bytes:
    """B (``K x N`` int8) in the compact layout: column block by column block, the rows of
    its kept blocks.

    Raises
    ------
    ValueError
        When B has a non-zero weight in a block the program skips (naming the first): the
        blocks were made for other weights.
    """
    dense = np.frombuffer(pack_b(dims, b), np.int8).reshape(dims.Nb, dims.Kp, dims.C)
    spans, parts = k_blocks(dims), []
    for n, col in enumerate(blocks):
        keep = np.zeros(dims.Kp, bool)
        for j in col:
            keep[spans[j][0]:spans[j][1]] = True
        skipped = dense[n][~keep]
        if skipped.any():
            row, c = (int(i[0]) for i in np.nonzero(dense[n] * ~keep[:, None]))
            raise ValueError(f"b[{row}, {n * dims.C + c}] = {int(dense[n, row, c])} lies in "
                             f"a weight block the block-sparse kernel skips (column block "
                             f"{n} keeps K blocks {list(col)}): compile the kernel for these "
                             f"weights")
        parts.append(dense[n][keep])
    return np.concatenate(parts).tobytes()


def runs(dims: GemmDims, col: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """A column block's MATMULs: ``(A row, compact B row, k)`` of each run of consecutive
    kept blocks."""
    spans, out, b = k_blocks(dims), [], 0
    for j in col:
        lo, hi = spans[j]
        if out and out[-1][0] + out[-1][2] == lo:
            a0, b0, k = out[-1]
            out[-1] = (a0, b0, k + hi - lo)
        else:
            out.append((lo, b, hi - lo))
        b += hi - lo
    return out


def kept_macs(dims: GemmDims, blocks: Blocks) -> int:
    """Multiply-accumulates of the unpadded problem that the kept blocks hold."""
    spans = k_blocks(dims)
    return dims.M * sum(sum(max(0, min(spans[j][1], dims.K) - spans[j][0]) for j in col)
                        * min(dims.C, dims.N - nb * dims.C) for nb, col in enumerate(blocks))


def busy_slices(dims: GemmDims, blocks: Blocks) -> int:
    """Slices fed through the array (the ``array_busy`` counter): each row block's tiles
    over their kept rows only."""
    return dims.Mb * sum(kept_rows(dims, blocks))


def sparse_context(dims: GemmDims, blocks: Blocks, stages: tuple[str, ...],
                   regions: Mapping[str, Region], *, params: EpilogueParams, out: Region,
                   out_dt: str, prefix: str = "gemm", halt: bool = True,
                   transposed: bool = False) -> dict[str, Any]:
    """The context of ``gemm_sparse.j2`` (see the module docstring; the arguments as for
    :func:`fusion.kernels.gemm.loops.gemm_context`)."""
    cfg = dims.config
    problems = sparse_problems(dims, blocks, stages, fused=True,
                               per_channel=params.per_channel)
    if problems:
        raise ValueError("; ".join(problems))
    has_bias = "bias" in stages or (params.per_channel and "requant" in stages)
    if has_bias and "bias" not in regions:
        raise ValueError("the kernel reads a bias region (the bias stage, or per-channel "
                         "requantize's multipliers and shifts) but none was given")
    rows = group_rows(dims)
    kept = kept_rows(dims, blocks)
    q = slots(dims, blocks)
    slot_rows = cfg.spad_b_depth // q
    ext = [regions["b"].addr]
    for r in kept:
        ext.append(ext[-1] + r * dims.C // dims.W)

    def weights(n: int) -> dict[str, Any]:
        words = kept[n] * dims.C // dims.W
        check_load(cfg, 1, words, Dst.B)
        return {"ext": ext[n], "spad": (n % q) * slot_rows, "len": words}

    out_tw = dims.tile_words(DT_BYTES[out_dt])
    out_pitch = dims.Nb * out_tw
    a_seg = dims.a_Kp * dims.R // dims.W
    check_load(cfg, rows, a_seg, Dst.A)
    columns = []
    for n, col in enumerate(blocks):
        spad = (n % q) * slot_rows
        matmuls = runs(dims, col)
        ahead = n + q - 1
        columns.append({
            "n": n, "label": f"{prefix}_c{n}",
            "what": f"K blocks {list(col)} of {len(k_blocks(dims))}",
            # the loads issued after this column's own that may still be pending
            "left": min(q - 2, dims.Nb - 1 - n),
            # every job of the column block before is older than this one's newest
            "feed_left": min(rows * len(matmuls), MAX_LEFT),
            "load": weights(ahead) if ahead < dims.Nb else None,
            "runs": [{"a": a0, "b": spad + b0, "k": k, "last": i == len(matmuls) - 1}
                     for i, (a0, b0, k) in enumerate(matmuls)],
        })
    groups = dims.Mb // rows
    kept_blocks = sum(map(len, blocks))
    return {
        "prefix": prefix, "halt": halt, "csrs": csr_writes(stages, params),
        "bias_load": bias_load(dims, regions["bias"], params.per_channel) if has_bias else None,
        "setup": [("r12", regions["a"].addr), ("r8", out.addr)]
        + ([("r9", 0)] if has_bias else []),
        "kept": kept_blocks, "total": dims.Nb * len(k_blocks(dims)),
        "groups": groups, "rows": rows, "kp": dims.Kp, "a_seg": a_seg,
        "a_step": rows * a_seg, "first": [weights(n) for n in range(min(q - 1, dims.Nb))],
        "columns": columns, "slots": q,
        "has_bias": has_bias, "mask": f"{sum(cfg.stage_bit(s) for s in stages):#b}",
        "dt": out_dt, "tr": int(transposed), "a_pitch": dims.a_Kp, "out_pitch": out_pitch,
        "out_step": out_tw, "out_back": out_tw - rows * out_pitch,
        "group_out": (rows - 1) * out_pitch, "bias_step": bias_group(params.per_channel),
    }
