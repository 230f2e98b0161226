"""The zero-skipping GEMM: all-zero-point tiles of A jumped over at run time, in hardware.

Which tiles of an activation are all zero point is known only when it runs (ReLU zeros, the
padded samples of a batch). A is cut into *tiles* of one row block (``R`` rows) by
:func:`~fusion.kernels.gemm.sparse.block_rows` K rows: the rows one MATMUL slice of one
output tile reads. Each tile has a *flag* word, 1 when every element of the tile is A's zero
point: the words ``[Mb][Kb]`` of the ``a_flags`` region, written by whoever produced A
(the host for a model's input, :func:`tile_flags`; a kernel's store unit for the tiles it
stores with MATMUL ``zf``: the ``out_flags`` of this kernel, ``[Mb][Nb]``, one per output
tile, 1 when every stored byte is the output zero point).

The program (``gemm_skip.j2``) reads the flags into the sequencer's tile-flag queue
(``load dst=z``) and branches over the LOAD and the MATMUL of each flagged tile (``bzt``):
conditional execution on data. A skipped tile must contribute exactly nothing, so the A zero
point is subtracted from every A operand at the array's edge (CSR ``a_zp``, 9-bit operands)
instead of being folded into the bias as ``-za * colsum(B)``: with the fold, a skipped tile
would leave its ``za * colsum`` share in the bias, and correcting it per skipped tile would
cost a MATMUL's worth of work. Each row block's last tile is never skipped: its MATMUL
drains the output tile through the epilogue.

Schedule: A stays resident in groups of row blocks (:func:`group_rows`): per group, its
flags, then a LOAD per tile that is not flagged; then the column blocks in order, their
weights (and their copy of the group's flags) double buffered in two slots of the B
scratchpad::

    column n:  wait LOAD                    # its flags and weights are in
               wait FEED                    # column n-1 has read the other slot
               load flags(n+1); load weights(n+1) into the other slot
               for each row block:
                   for each tile but the last: bzt over; A and B rows; MATMUL
                   the last tile's MATMUL, draining the output tile

so the next column block's loads run while this one computes. The tiles
are unrolled, so a skipped tile costs the sequencer one cycle (its BZT) and a tile that runs
four; pairs of column blocks (one per slot) are a hardware loop.

Registers, besides those of ``common.j2``: r1 the next weights' address, r2 a load's row,
r3 ``Kb`` (the flag loads' stride), r4 the A phase's tile counter, r5 the row-block
counter, r6 and r7 a tile's A and B rows (a LOAD's address and row in the A phase), r8 the
output tile, r9 its bias row, r10 its flag word, r11 the group counter, r12 A's address,
r13 the group's flags, r14 the column-pair counter, r15 the row block's first A row.

The analytical model prices the program by running it through
:class:`~fusion.cost.machine.Machine` with the flags (:func:`fusion.cost.analytical.
estimate_program`): its cycles depend on the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fusion.kernels.codegen import FIELD_MAX, check_load
from fusion.kernels.epilogue import DT_BYTES, bias_load, csr_writes
from fusion.kernels.gemm.sparse import bias_rows_problem, block_rows, k_blocks
from fusion.kernels.layout import GemmDims, Region, bias_group
from fusion.kernels.tiling import Tiling
from hwgen.isa import Dst
from hwgen.reference import EpilogueParams
from hwgen.timing import ZQ_DEPTH

#: The range of the ``a_zp`` CSR (9 bits, signed): an int8 zero point, or a uint8 one moved
#: to int8.
A_ZP_RANGE = (-256, 255)


def tiles(dims: GemmDims) -> tuple[int, int]:
    """A's tiles: ``(Mb, Kb)`` row blocks by K blocks."""
    return dims.Mb, len(k_blocks(dims))


def group_rows(dims: GemmDims) -> int:
    """Row blocks of A resident at once: the largest divisor of ``Mb`` whose rows fit the A
    scratchpad and whose flags fit the tile-flag queue twice (a column block's and the next
    one's, loaded while it runs); 0 when one row block does not."""
    cfg, (_, kb) = dims.config, tiles(dims)
    fit = min(cfg.spad_a_depth // dims.a_Kp, ZQ_DEPTH // (2 * max(1, kb - 1)))
    return max((g for g in range(1, dims.Mb + 1) if dims.Mb % g == 0 and g <= fit), default=0)


def skip_tiling(dims: GemmDims) -> Tiling:
    """The tiling the program records: ``tm`` row blocks of A resident, one column block at
    a time over the whole K, its weights double buffered."""
    return Tiling(tm=max(1, group_rows(dims)), tn=1, kt=dims.Kp, order="nm",
                  double_buffer=True)


#: Instructions outside the column blocks' code, at most: the prologue, a group's A phase
#: and loop, and the end.
_FIXED_WORDS = 64


def program_bound(dims: GemmDims) -> int:
    """Instructions of the program, at most: its fixed part and up to four copies of a
    column block's code (two in the loop over pairs of column blocks, two after it), each
    four a tile and at most 24 more."""
    _, kb = tiles(dims)
    return _FIXED_WORDS + 4 * (4 * kb + 24)


def tile_flags(dims: GemmDims, a: np.ndarray, zp: int) -> np.ndarray:
    """``[Mb][Kb]`` bools: whether every element of each A tile of the ``M x K`` int8 ``a``
    is ``zp``. Padding counts as zero point: its rows of B are zero (K) or its outputs are
    not kept (M), so a tile of real zero points and padding contributes nothing either."""
    mb, kb = tiles(dims)
    br = block_rows(dims.config)
    same = np.ones((mb * dims.R, kb * br), bool)
    same[:dims.M, :dims.K] = np.asarray(a) == zp
    return same.reshape(mb, dims.R, kb, br).all(axis=(1, 3))


def unfolded_bias(bias: np.ndarray, b: np.ndarray, zp: int) -> np.ndarray:
    """The bias without A's zero-point share: the lowering folds ``-zp * colsum(b)`` into a
    GEMM's bias; the zero-skipping program subtracts ``zp`` from A at the array's edge
    instead, so its bias is ``bias + zp * colsum(b)`` (exact, and refused outside int32)."""
    out = np.asarray(bias).astype(np.int64) + zp * np.asarray(b).astype(np.int64).sum(axis=0)
    if out.size and (out.min() < -(1 << 31) or out.max() >= 1 << 31):
        raise ValueError(f"the bias without A's zero-point share ({zp} x the weights' column "
                         f"sums) leaves int32: the zero-skipping program cannot run it")
    return out.astype(np.int32)


def pack_flags(dims: GemmDims, flags: np.ndarray) -> bytes:
    """The flag words of ``flags`` (``[rows][cols]`` bools), one little-endian memory word
    each, in row-major order: the ``a_flags`` region."""
    words = np.zeros((flags.size, dims.W), np.uint8)
    words[:, 0] = np.asarray(flags, bool).reshape(-1)
    return words.tobytes()


def flags_consumed(dims: GemmDims, flags: np.ndarray) -> list[bool]:
    """The flags the program's flag loads read, in order, from the ``[Mb][Kb]`` ``flags``
    (every tile but each row block's last): per group, once for its A loads and once per
    column block. For :func:`fusion.cost.analytical.estimate_program`."""
    rows = group_rows(dims)
    out: list[bool] = []
    for g in range(dims.Mb // rows):
        group = [bool(f) for r in range(g * rows, (g + 1) * rows) for f in flags[r][:-1]]
        out += group * (1 + dims.Nb)
    return out


def skipped_tiles(dims: GemmDims, flags: np.ndarray) -> int:
    """BZTs the program takes (the ``tiles_skipped`` counter): each flagged tile but a row
    block's last, once for its load and once per column block."""
    return int(np.asarray(flags)[:, :-1].sum()) * (1 + dims.Nb)


def skip_problems(dims: GemmDims, stages: tuple[str, ...], *, fused: bool,
                  per_channel: bool, a_zp: int, out_flags: bool) -> list[str]:
    """Why the zero-skipping program cannot run this GEMM; empty if it can."""
    cfg = dims.config
    problems = []
    if dims.grouped:
        problems.append("a grouped GEMM is not zero-skipping")
    if "bias" not in stages:
        problems.append("the zero-skipping program subtracts A's zero point at the array's "
                        "edge, a register of the bias stage: it needs the bias stage")
    if "residual" in stages:
        problems.append("the zero-skipping program loads no residual tiles: leave the "
                        "residual stage out")
    if not fused and stages:
        problems.append("the zero-skipping program runs its epilogue fused only")
    if not A_ZP_RANGE[0] <= a_zp <= A_ZP_RANGE[1]:
        problems.append(f"A's zero point {a_zp} is outside the a_zp register's "
                        f"{A_ZP_RANGE[0]}..{A_ZP_RANGE[1]}")
    if out_flags and "requant" not in stages:
        problems.append("output flags compare the stored bytes with the requantized output's "
                        "zero point: they need the requant stage")
    rows = group_rows(dims)
    _, kb = tiles(dims)
    if rows == 0:
        problems.append(f"one row block of A ({dims.a_Kp} rows, {kb} tiles) does not fit the "
                        f"A scratchpad ({cfg.spad_a_depth} rows) with its flags twice in the "
                        f"tile-flag queue ({ZQ_DEPTH})")
    if program_bound(dims) > cfg.imem_depth:
        problems.append(f"its program takes up to {program_bound(dims)} words, more than the "
                        f"instruction memory's {cfg.imem_depth}")
    if dims.a_Kp != kb * block_rows(cfg):
        problems.append(f"A's rows ({dims.a_Kp}) are not whole tiles of {block_rows(cfg)}")
    if 2 * dims.Kp > cfg.spad_b_depth:
        problems.append(f"a column block's weights ({dims.Kp} rows) do not fit twice in the "
                        f"B scratchpad ({cfg.spad_b_depth} rows)")
    if dims.Kp * dims.C // dims.W > FIELD_MAX:
        problems.append(f"a load exceeds the 16-bit len field ({FIELD_MAX} words)")
    problem = bias_rows_problem(dims, stages, per_channel)
    return problems + ([problem] if problem else [])


def flag_bytes(dims: GemmDims, out: bool = False) -> int:
    """Bytes of the ``a_flags`` region (``[Mb][Kb]`` words) or of ``out_flags``
    (``[Mb][Nb]``)."""
    mb, kb = tiles(dims)
    return mb * (dims.Nb if out else kb) * dims.W


def skip_context(dims: GemmDims, stages: tuple[str, ...], regions: Mapping[str, Region], *,
                 params: EpilogueParams, out: Region, out_dt: str, a_zp: int,
                 prefix: str = "gemm", halt: bool = True,
                 transposed: bool = False) -> dict[str, Any]:
    """The context of ``gemm_skip.j2`` (see the module docstring). ``regions`` holds ``a``,
    ``b`` (``[Nb][Kp][C]``), ``a_flags``, ``bias`` when read, and ``out_flags`` when the
    output's tile flags are stored."""
    cfg = dims.config
    out_flags = "out_flags" in regions
    problems = skip_problems(dims, stages, fused=True, per_channel=params.per_channel,
                             a_zp=a_zp, out_flags=out_flags)
    if problems:
        raise ValueError("; ".join(problems))
    rows = group_rows(dims)
    mb, kb = tiles(dims)
    br = block_rows(cfg)
    spans = k_blocks(dims)
    tile_words = br * dims.R // dims.W
    col_words = dims.Kp * dims.C // dims.W
    check_load(cfg, 1, tile_words, Dst.A)
    check_load(cfg, 1, col_words, Dst.B)
    out_tw = dims.tile_words(DT_BYTES[out_dt])
    out_pitch = dims.Nb * out_tw
    slot_rows = cfg.spad_b_depth // 2
    # columns 0 .. Nb-2 load the next column's weights; the last loads nothing
    pairs, odd = divmod(dims.Nb - 1, 2)
    copies = [{"slot": s * slot_rows, "next": (1 - s) * slot_rows, "load": True,
               "label": f"{prefix}_p{s}"} for s in range(2)]
    tail = ([{"slot": 0, "next": slot_rows, "load": True, "label": f"{prefix}_t0"}]
            if odd else [])
    last_slot = (dims.Nb - 1) % 2
    tail.append({"slot": last_slot * slot_rows, "next": 0, "load": False,
                 "label": f"{prefix}_t{len(tail)}"})
    has_bias = "bias" in stages or (params.per_channel and "requant" in stages)
    groups = dims.Mb // rows
    return {
        "prefix": prefix, "halt": halt, "csrs": csr_writes(stages, params) + [("a_zp", a_zp)],
        "bias_load": bias_load(dims, regions["bias"], params.per_channel) if has_bias else None,
        "setup": [("r12", regions["a"].addr), ("r13", regions["a_flags"].addr),
                  ("r8", out.addr), ("r1", regions["b"].addr), ("r3", kb)]
        + ([("r9", 0)] if has_bias else [])
        + ([("r10", regions["out_flags"].addr)] if out_flags else []),
        "b_addr": regions["b"].addr,
        "groups": groups, "rows": rows, "kb": kb, "br": br, "last_k": spans[-1][1] - spans[-1][0],
        "tile_words": tile_words, "col_words": col_words, "a_pitch": dims.a_Kp,
        "a_step": rows * dims.a_Kp * dims.R // dims.W, "flag_step": rows * kb,
        "pairs": pairs, "copies": copies, "tail": tail,
        "has_bias": has_bias, "mask": f"{sum(cfg.stage_bit(s) for s in stages):#b}",
        "dt": out_dt, "tr": int(transposed), "zf": int(out_flags),
        "out_pitch": out_pitch, "out_back": out_tw - rows * out_pitch,
        "group_out": (rows - 1) * out_pitch, "bias_step": bias_group(params.per_channel),
        "zf_back": 1 - rows * dims.Nb, "zf_group": rows * dims.Nb - dims.Nb,
        "nb": dims.Nb, "tiles": mb * kb,
    }
