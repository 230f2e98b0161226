"""What a GEMM kernel's program depends on: its shape, epilogue, quantization and tiling."""

from __future__ import annotations

from dataclasses import dataclass, field

from fusion.kernels.protocol import check_epilogue, check_sizes
from fusion.kernels.tiling import Tiling
from hwgen.reference import EpilogueParams


@dataclass(frozen=True, kw_only=True)
class GemmParams:
    """``epilogue(a @ b)`` for an ``M x K`` int8 ``a`` and a ``K x N`` int8 ``b``.

    Parameters
    ----------
    M, K, N : int
        The GEMM shape (positive).
    stages : tuple of str
        Epilogue stages to apply, in the variant's chain order (checked against the variant
        by the kind's legality check).
    fused : bool
        Fuse the stages into the GEMM's drain, or run them as separate passes.
    epilogue : EpilogueParams
        Requantize, clamp and residual CSR values (identity defaults). With
        ``per_channel``, the requantize multipliers and shifts are the ``mult`` and ``shift``
        operands (the fields of the same names are unused; ``zp`` applies to every channel),
        and the requant stage must be one of ``stages``.
    tiling : Tiling, optional
        Super tiles; by default the best-ranked tiling whose program fits the instruction
        memory (:func:`fusion.kernels.tiling.ranked_tilings`).
    kgroup : int
        0 (dense), or a grouped GEMM: ``b`` is block-diagonal and column block ``j`` of the
        array (output columns ``[j*cols, (j+1)*cols)``) reads only rows
        ``[j*kgroup, (j+1)*kgroup)`` of ``a`` and ``b`` (:mod:`fusion.kernels.layout`), so each
        output tile reduces over ``kgroup`` rows, not K. The operands are the same as dense.
        Whether it splits K on a variant is the kind's legality check.
    kblocks : int
        Grouped only: column blocks per group, so column block ``j`` reads the rows of group
        ``j // kblocks`` (1: every column block a group of its own, or several whole groups).
    kmajor_out : bool
        Store the output transposed, tile by tile (MATMUL ``tr``): the ``kmajor`` layout of
        :mod:`fusion.kernels.layout`, which a following GEMM reads as its A operand where it
        lies. Needs a fused int8 output and a square array (the kind's legality check).
    blocks : tuple of tuple of int, optional
        What the compiler knows of constant weights with all-zero blocks: per column block,
        the K blocks (:func:`fusion.kernels.gemm.sparse.block_rows` rows each) that hold a
        non-zero weight (:func:`fusion.kernels.gemm.sparse.weight_blocks`). It lets
        :meth:`~fusion.kernels.gemm.kind.GemmKind.variants` offer the block-sparse program;
        a dense kernel ignores it.
    skip_zp : int, optional
        A's zero point, whose share ``-skip_zp * colsum(b)`` the ``bias`` holds folded (the
        lowering's): what the zero-skipping program needs.
    flags : tuple of tuple of bool, optional
        What a data profile says of A (a run's input): its ``[Mb][Kb]`` tile flags
        (:func:`fusion.kernels.gemm.skip.tile_flags`). With ``skip_zp`` it lets
        :meth:`~fusion.kernels.gemm.kind.GemmKind.variants` offer the zero-skipping program,
        priced for these flags; the program itself does not depend on them.
    skip : bool
        Run the zero-skipping program (:mod:`fusion.kernels.gemm.skip`): the loads and
        MATMULs of A tiles flagged all zero point are jumped over at run time, A's zero point
        subtracted at the array's edge (the bias unfolded for it). ``a``'s tile flags are an
        operand (``a_flags``, the host's for an input it wrote). Needs ``skip_zp``.
    out_flags : bool
        Zero-skipping only: also store the output's tile flags (``out_flags``, for a next
        zero-skipping GEMM).
    sparse : bool
        Run the block-sparse program (:mod:`fusion.kernels.gemm.sparse`): B holds only the
        ``blocks``, and the program never loads or multiplies the others. Needs ``blocks``.

    Raises
    ------
    ValueError
        A non-positive dimension, stages that are not a sequence, per-channel requantize
        without the requant stage, or a negative ``kgroup``.
    """

    M: int
    K: int
    N: int
    stages: tuple[str, ...] = ()
    fused: bool = True
    epilogue: EpilogueParams = field(default_factory=EpilogueParams)
    tiling: Tiling | None = None
    kgroup: int = 0
    kmajor_out: bool = False
    kblocks: int = 1
    blocks: tuple[tuple[int, ...], ...] | None = None
    sparse: bool = False
    skip_zp: int | None = None
    flags: tuple[tuple[bool, ...], ...] | None = None
    skip: bool = False
    out_flags: bool = False

    def __post_init__(self) -> None:
        check_sizes(M=self.M, K=self.K, N=self.N)
        if not isinstance(self.kgroup, int) or isinstance(self.kgroup, bool) or self.kgroup < 0:
            raise ValueError(f"kgroup must be a non-negative integer (0: dense), not "
                             f"{self.kgroup!r}")
        if not isinstance(self.kblocks, int) or isinstance(self.kblocks, bool) or \
                self.kblocks < 1:
            raise ValueError(f"kblocks must be a positive integer, not {self.kblocks!r}")
        if isinstance(self.stages, str):
            raise ValueError(f"stages must be a sequence of stage names, not the string "
                             f"{self.stages!r}")
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "fused", bool(self.fused))
        object.__setattr__(self, "kmajor_out", bool(self.kmajor_out))
        object.__setattr__(self, "sparse", bool(self.sparse))
        if self.blocks is not None:
            object.__setattr__(self, "blocks", tuple(tuple(int(k) for k in col)
                                                     for col in self.blocks))
            if any(not col or list(col) != sorted(set(col)) or col[0] < 0
                   for col in self.blocks):
                raise ValueError("blocks must hold, per column block, the increasing indices "
                                 "of at least one K block")
        if self.skip_zp is not None and (not isinstance(self.skip_zp, int)
                                         or isinstance(self.skip_zp, bool)):
            raise ValueError(f"skip_zp must be an integer (A's zero point), not "
                             f"{self.skip_zp!r}")
        object.__setattr__(self, "skip", bool(self.skip))
        object.__setattr__(self, "out_flags", bool(self.out_flags))
        if self.skip and self.sparse:
            raise ValueError("a GEMM is block-sparse or zero-skipping, not both")
        if self.skip and self.skip_zp is None:
            raise ValueError("a zero-skipping GEMM needs A's zero point (skip_zp)")
        if self.out_flags and not self.skip:
            raise ValueError("out_flags belongs to the zero-skipping program (skip)")
        if self.flags is not None:
            object.__setattr__(self, "flags", tuple(tuple(bool(f) for f in row)
                                                    for row in self.flags))
        if self.sparse and self.blocks is None:
            raise ValueError("a sparse GEMM needs its weights' blocks (GemmParams.blocks)")
        check_epilogue(self.stages, self.epilogue)

