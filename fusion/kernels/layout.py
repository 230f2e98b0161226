"""Memory layouts of the GEMM kernels (the regions they lie in: :mod:`fusion.kernels.regions`,
re-exported here).

External memory is word-addressed (``config.port_bytes`` bytes a word, little-endian inside a
word), and every region starts on a word boundary. With R = ``config.rows`` and
C = ``config.cols``, an M x K by K x N GEMM is padded to

- ``Kp``: K rounded up to a multiple of ``config.k_align``, so that every operand block (and
  every k-tile of it) is a whole number of words;
- ``Mb = ceil(M / R)`` row blocks and ``Nb = ceil(N / C)`` column blocks.

A grouped GEMM (``kgroup > 0``, a grouped or depthwise convolution) has a block-diagonal B:
column block ``j`` reads only rows ``[j*kgroup, (j+1)*kgroup)`` of K. Its tiles then reduce
over ``Kp`` = ``kgroup`` rounded up to ``k_align`` only (not K): A keeps every row of K, one
``Kp`` slice per column block (``a_Kp = Nb * Kp``), and B holds only the diagonal blocks.
Where a group's rows are whole k steps and the groups tile K and N
(:attr:`GemmDims.a_direct`), A is the plain K-major layout (``a_Kp = K`` rounded up to whole
column blocks, as a producer stores K channels): a column block's rows are one run of every
row block, where a producer's K-major store put them.

All padding is zeros. The layouts, outermost index first:

``A``  ``[Mb][a_Kp][R]`` int8
    Blocked and K-major: block ``i`` holds ``A[i*R:(i+1)*R, :]`` transposed, so one k step of
    a block is one A scratchpad row, and a k-tile of a block is one contiguous segment.
    Grouped, slice ``[j*Kp, (j+1)*Kp)`` of a block holds the rows column block ``j`` reads.
``B``  ``[Nb][Kp][C]`` int8
    Block ``j`` holds ``B[:, j*C:(j+1)*C]``: one k step is one B scratchpad row. Grouped, it
    holds ``B[j*kgroup:(j+1)*kgroup, j*C:(j+1)*C]``.
``bias``  ``[Nb][C]`` int32, padded to whole words
    Loaded with ``e32``: one epilogue scratchpad row per column block.
``bias`` per channel  ``[Nb][3][C]`` int32, padded to whole words
    With per-channel requantize, a group of three rows per column block: the bias (zeros when
    the bias stage does not run), the multipliers and the shifts (:func:`pack_bias_group`);
    the hardware reads them at the beat's bias row plus the offsets the stage specs declare
    (``hwgen.stages.BIAS_ROW``, ``REQ_MULT_ROW``, ``REQ_SHIFT_ROW``).
``tiles``  ``[Mb][Nb][R][C]`` int8 or int32
    Outputs, the residual and the unfused int32 intermediates: tile ``(i, j)`` is one
    contiguous ``R x C`` block, exactly what one drained output tile stores, and ``R`` rows of
    the epilogue scratchpad when loaded (``e32`` for int32, ``e8`` for int8).
``kmajor``  ``[Mb][Nb][C][R]`` = ``[Mb][Nb*C][R]`` int8
    An output stored transposed, tile by tile (MATMUL ``tr``, square arrays): each tile's
    columns one after the other. It is A's layout for a GEMM whose K is this N, when that
    GEMM's ``Kp`` is ``Nb * C`` (:func:`layout_name`): the next GEMM reads it where it lies.

:func:`layout_name` names a region's layout; two regions hold the same bytes for the same
tensor exactly when their names (and operands) agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# the regions, where every kernel's layout lies: re-exported, their home is fusion.kernels.regions
from fusion.kernels.regions import Allocator as Allocator
from fusion.kernels.regions import Region as Region
from fusion.kernels.regions import place as place
from hwgen.config import VariantConfig
from hwgen.stages import BIAS_GROUP_ROWS, BIAS_ROW, REQ_MULT_ROW, REQ_SHIFT_ROW


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up (whole blocks, words, tiles)."""
    return -(-a // b)


def bias_group(per_channel: bool) -> int:
    """Epilogue rows per column block of the bias region: ``hwgen.stages.BIAS_GROUP_ROWS``
    (bias, multipliers, shifts) per channel, else 1."""
    return BIAS_GROUP_ROWS if per_channel else 1


@dataclass(frozen=True)
class GemmDims:
    """The padded geometry of an M x K by K x N GEMM on one variant."""

    config: VariantConfig
    M: int
    K: int
    N: int
    #: Grouped GEMM: the K rows each column block reads (0: dense). Column block ``j`` (output
    #: columns ``[j*C, (j+1)*C)``) reads only rows ``[g*kgroup, (g+1)*kgroup)`` of A and B,
    #: ``g = j // kblocks`` its group.
    kgroup: int = 0
    #: Column blocks per group (grouped only): 1 when a column block holds whole groups; more
    #: when a group's output channels are several column blocks (ShuffleNet's 3 groups of 80).
    kblocks: int = 1

    def __post_init__(self) -> None:
        for name in ("M", "K", "N"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        problem = kgroup_problem(self.config, self.K, self.N, self.kgroup, self.kblocks)
        if problem is not None:
            raise ValueError(problem)

    @property
    def grouped(self) -> bool:
        """Each column block reads its own ``kgroup`` rows of K (a grouped GEMM)."""
        return self.kgroup > 0

    @property
    def R(self) -> int:  # noqa: N802 - the array's rows, as in the layout docs
        return self.config.rows

    @property
    def C(self) -> int:  # noqa: N802
        return self.config.cols

    @property
    def W(self) -> int:  # noqa: N802
        return self.config.port_bytes

    @property
    def Kp(self) -> int:  # noqa: N802
        """The reduction steps of one output tile: K (grouped, ``kgroup``) rounded up to a
        multiple of ``config.k_align``; B's layout is ``[Nb][Kp][C]``."""
        align = self.config.k_align
        return ceil_div(self.kgroup or self.K, align) * align

    @property
    def a_direct(self) -> bool:
        """A grouped GEMM whose A is the plain K-major layout ``[Mb][K][R]``: each group's
        ``kgroup`` rows are whole k steps (a multiple of ``k_align``, so ``Kp == kgroup``)
        and the groups tile K and N exactly, so the rows a column block reads are one
        contiguous run of every row block, where a producer's K-major store put them. With
        one column block a group this is the slice-per-block layout byte for byte; with
        more, the kernel runs a part per group (:func:`fusion.kernels.gemm.parts.
        program_parts`), each a dense GEMM over its group's rows, instead of reading a copy
        of the group's rows per column block (which no kernel stores: the host wrote it)."""
        if not self.grouped or self.kgroup % self.config.k_align or self.N % self.C:
            return False
        if self.kblocks == 1:
            return self.K == self.Nb * self.kgroup
        return self.Nb % self.kblocks == 0 and self.K == self.Nb // self.kblocks * self.kgroup

    @property
    def a_Kp(self) -> int:  # noqa: N802
        """A's padded width: :attr:`Kp`, or grouped ``Nb * Kp`` (one ``Kp`` slice per column
        block), or where A is K-major as it is (:attr:`a_direct`) K rounded up to whole
        column blocks: the width a producer's K-major store of K channels has (its ``Nb *
        C``), so that it reads that store where it lies (ShuffleNet's 60 channels, stored as
        64 rows); no part loads the padding rows. A's layout is ``[Mb][a_Kp][R]``."""
        if self.a_direct:
            return ceil_div(self.K, self.C) * self.C
        return self.Nb * self.Kp if self.grouped else self.Kp

    def a_rows_at(self, nb: int) -> int:
        """The first row of A's ``[a_Kp]`` rows that column block ``nb`` reads: its slice,
        or (:attr:`a_direct`) its group's first row of K."""
        if self.a_direct:
            return nb // self.kblocks * self.kgroup
        return nb * self.Kp if self.grouped else 0

    def k_rows(self, nb: int) -> tuple[int, int]:
        """The rows ``[lo, hi)`` of K that column block ``nb`` reads (all of K when dense)."""
        if not self.grouped:
            return 0, self.K
        g = nb // self.kblocks
        return min(g * self.kgroup, self.K), min((g + 1) * self.kgroup, self.K)

    @property
    def Mb(self) -> int:  # noqa: N802
        return ceil_div(self.M, self.R)

    @property
    def Nb(self) -> int:  # noqa: N802
        return ceil_div(self.N, self.C)

    def tile_bytes(self, itemsize: int) -> int:
        """Bytes of one R x C tile of ``itemsize``-byte elements (always whole words)."""
        return self.R * self.C * itemsize

    def tile_words(self, itemsize: int) -> int:
        return self.tile_bytes(itemsize) // self.W

    @property
    def bias_rows(self) -> int:
        """Epilogue scratchpad rows a bias load writes: ``Nb``, plus padding to a whole word."""
        return self.bias_region_rows(False)

    def bias_region_rows(self, per_channel: bool = False) -> int:
        """Epilogue scratchpad rows the bias region fills when loaded: ``bias_group(pc) * Nb``
        rows, plus padding to a whole word."""
        row, rows = self.config.e_row_bytes, bias_group(per_channel) * self.Nb
        return ceil_div(rows * row, self.W) * self.W // row if row < self.W else rows


def kgroup_problem(config: VariantConfig, K: int, N: int, kgroup: int,  # noqa: N803
                   kblocks: int = 1) -> str | None:
    """Why ``kgroup`` (with ``kblocks`` column blocks a group) cannot group an M x K by K x N
    GEMM on ``config``; None if it can.

    Column block ``j`` reads rows ``[g*kgroup, (g+1)*kgroup)`` of group ``g = j // kblocks``:
    every group but the last reads a full ``kgroup`` rows and the last reads the rest, at
    least one row, so ``(G - 1) * kgroup < K <= G * kgroup`` for the ``G`` groups; one group
    (``kgroup >= K``) is dense.
    """
    if not isinstance(kgroup, int) or isinstance(kgroup, bool) or kgroup < 0:
        return f"kgroup must be a non-negative integer (0: dense), not {kgroup!r}"
    if not isinstance(kblocks, int) or isinstance(kblocks, bool) or kblocks < 1:
        return f"kblocks must be a positive integer (column blocks a group), not {kblocks!r}"
    if kgroup == 0:
        return None
    nb = ceil_div(N, config.cols)
    groups = ceil_div(nb, kblocks)
    if not (groups - 1) * kgroup < K <= groups * kgroup or groups < 2:
        if kblocks == 1:
            need = "at least two column blocks and (Nb-1)*kgroup < K <= Nb*kgroup"
            per = ""
        else:
            need = "at least two groups and (G-1)*kgroup < K <= G*kgroup for its G groups"
            per = f" in groups of {kblocks}"
        return (f"kgroup={kgroup} does not split K={K} over the {nb} column block(s){per} of "
                f"N={N} (cols={config.cols}): a grouped GEMM needs {need}; use kgroup=0 "
                f"(dense)")
    return None


def bias_region_bytes(dims: GemmDims, params: Any = None) -> int:
    """Bytes of a kernel's bias region: :attr:`GemmDims.bias_region_rows` epilogue rows.

    That is :func:`pack_bias`'s ``[Nb][C]`` rows, or with per-channel requantize
    (``params.per_channel``, ``params`` an ``EpilogueParams``) :func:`pack_bias_group`'s
    ``[Nb][3][C]`` groups. The kernels and the memory planner both size the region here.
    """
    per_channel = bool(getattr(params, "per_channel", False))
    return dims.bias_region_rows(per_channel) * dims.config.e_row_bytes


def _check(x: np.ndarray, shape: tuple[int, ...], dtype: type, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, not {x.shape}")
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array, not {x.dtype}")
    info = np.iinfo(dtype)
    if x.size and (x.min() < info.min or x.max() > info.max):
        raise ValueError(f"{name} has values outside {np.dtype(dtype).name} "
                         f"({int(x.min())}..{int(x.max())})")
    return x.astype(dtype)


def pack_a(dims: GemmDims, a: np.ndarray) -> bytes:
    """A (M x K int8) in the ``[Mb][a_Kp][R]`` layout.

    Grouped, column block ``j``'s rows of K (:meth:`GemmDims.k_rows`) start at
    ``j * Kp``, each slice zero padded to ``Kp`` (unless :attr:`GemmDims.a_direct`: then A
    is K-major as it is).
    """
    a = _check(a, (dims.M, dims.K), np.int8, "a")
    padded = np.zeros((dims.Mb * dims.R, dims.a_Kp), np.int8)
    if dims.grouped and not dims.a_direct:
        for nb in range(dims.Nb):
            lo, hi = dims.k_rows(nb)
            padded[: dims.M, nb * dims.Kp: nb * dims.Kp + hi - lo] = a[:, lo:hi]
    else:
        padded[: dims.M, : dims.K] = a
    return padded.reshape(dims.Mb, dims.R, dims.a_Kp).transpose(0, 2, 1).tobytes()


def pack_b(dims: GemmDims, b: np.ndarray) -> bytes:
    """B (K x N int8) in the ``[Nb][Kp][C]`` layout.

    Grouped, block ``j`` holds only B's rows :meth:`GemmDims.k_rows` ``(j)`` of its columns
    (the diagonal blocks), so B must be zero elsewhere.

    Raises
    ------
    ValueError
        Grouped, when B has a non-zero entry outside the diagonal blocks (naming the first).
    """
    b = _check(b, (dims.K, dims.N), np.int8, "b")
    if not dims.grouped:
        padded = np.zeros((dims.Kp, dims.Nb * dims.C), np.int8)
        padded[: dims.K, : dims.N] = b
        return padded.reshape(dims.Kp, dims.Nb, dims.C).transpose(1, 0, 2).tobytes()
    blocks = np.zeros((dims.Nb, dims.Kp, dims.C), np.int8)
    off = b.astype(bool)
    for nb in range(dims.Nb):
        (lo, hi), cols = dims.k_rows(nb), slice(nb * dims.C, (nb + 1) * dims.C)
        blocks[nb, : hi - lo, : b[lo:hi, cols].shape[1]] = b[lo:hi, cols]
        off[lo:hi, cols] = False
    if off.any():
        k, n = (int(i[0]) for i in np.nonzero(off))
        raise ValueError(f"b[{k}, {n}] = {int(b[k, n])} lies outside the diagonal blocks of a "
                         f"grouped GEMM (kgroup={dims.kgroup}, kblocks={dims.kblocks}: column "
                         f"block {n // dims.C} reads "
                         f"rows {dims.k_rows(n // dims.C)}); use kgroup=0 (dense) for this B")
    return blocks.tobytes()


def pack_bias(dims: GemmDims, bias: np.ndarray) -> bytes:
    """The bias (N int32) in the ``[Nb][C]`` layout, padded to :attr:`GemmDims.bias_rows`."""
    bias = _check(bias, (dims.N,), np.int32, "bias")
    padded = np.zeros(dims.bias_rows * dims.C, "<i4")
    padded[: dims.N] = bias
    return padded.tobytes()


def pack_bias_group(dims: GemmDims, bias: np.ndarray | None, mult: np.ndarray,
                    shift: np.ndarray) -> bytes:
    """The per-channel bias region: ``[Nb][3][C]`` int32 groups (bias, multipliers, shifts).

    Parameters
    ----------
    dims : GemmDims
        The problem.
    bias : ndarray or None
        N int32 values; None (the bias stage does not run) stores zeros.
    mult : ndarray
        N signed 32-bit requantize multipliers, one per output column.
    shift : ndarray
        N requantize shifts, 0..63.

    Returns
    -------
    bytes
        ``dims.bias_region_rows(True)`` rows of ``C`` little-endian int32; padded columns and
        rows are zeros.

    Raises
    ------
    ValueError
        Naming the operand whose shape or values do not fit.
    """
    g = BIAS_GROUP_ROWS
    rows = np.zeros((g, dims.Nb * dims.C), "<i4")
    if bias is not None:
        rows[BIAS_ROW, : dims.N] = _check(bias, (dims.N,), np.int32, "bias")
    rows[REQ_MULT_ROW, : dims.N] = _check(mult, (dims.N,), np.int32, "mult")
    shift = _check(shift, (dims.N,), np.int32, "shift")
    if shift.size and (shift.min() < 0 or shift.max() > 63):
        raise ValueError(f"shift has values outside 0..63 ({int(shift.min())}.."
                         f"{int(shift.max())}); a requantize shift is 0 to 63")
    rows[REQ_SHIFT_ROW, : dims.N] = shift
    padded = np.zeros((dims.bias_region_rows(True), dims.C), "<i4")
    padded[: g * dims.Nb] = rows.reshape(g, dims.Nb, dims.C).transpose(1, 0, 2).reshape(-1, dims.C)
    return padded.tobytes()


def pack_tiles(dims: GemmDims, x: np.ndarray, dtype: type = np.int8) -> bytes:
    """An M x N tensor in the tile-blocked ``[Mb][Nb][R][C]`` layout."""
    x = _check(x, (dims.M, dims.N), dtype, "tensor")
    padded = np.zeros((dims.Mb * dims.R, dims.Nb * dims.C), np.dtype(dtype).newbyteorder("<"))
    padded[: dims.M, : dims.N] = x
    return padded.reshape(dims.Mb, dims.R, dims.Nb, dims.C).transpose(0, 2, 1, 3).tobytes()


def unpack_tiles(dims: GemmDims, data: bytes, dtype: type = np.int8) -> np.ndarray:
    """The M x N tensor back from its ``[Mb][Nb][R][C]`` bytes (extra trailing bytes ignored)."""
    dt = np.dtype(dtype).newbyteorder("<")
    need = dims.Mb * dims.Nb * dims.tile_bytes(dt.itemsize)
    if len(data) < need:
        raise ValueError(f"a {dims.M} x {dims.N} {dt.name} tile-blocked tensor needs {need} "
                         f"bytes, got {len(data)}")
    tiles = np.frombuffer(bytes(data[:need]), dt).reshape(dims.Mb, dims.Nb, dims.R, dims.C)
    full = tiles.transpose(0, 2, 1, 3).reshape(dims.Mb * dims.R, dims.Nb * dims.C)
    return full[: dims.M, : dims.N].astype(np.dtype(dtype).newbyteorder("="))


def layout_name(kind: str, width: int = 0) -> str:
    """The name of a region layout: ``"tiles"``, or ``"kmajor/W"`` for a K-major ``[Mb][W][R]``
    int8 matrix (an A operand of padded width ``W``, or an output stored transposed)."""
    return kind if kind == "tiles" else f"{kind}/{width}"


#: How a region's ``M x N`` matrix holds its graph tensor (:meth:`fusion.kernels.protocol.
#: KernelKind.region_view`): the tensor's elements in row-major order, or an NCHW tensor's
#: pixel rows (``N*H*W x C``: one pixel's channels a row).
ROWS, PIXELS = "rows", "pixels"


def nchw_view(shape: Sequence[int]) -> str:
    """The view of a matrix of pixel rows holding a tensor of ``shape``: :data:`PIXELS` for
    an NCHW tensor, :data:`ROWS` for any other (the rows themselves, ``N x H*W x C``) and for
    an NCHW tensor whose pixel rows are its row-major order (one channel, or one pixel an
    image)."""
    if len(shape) == 4 and shape[1] > 1 and shape[2] * shape[3] > 1:
        return PIXELS
    return ROWS


def pixel_rows(x: np.ndarray, channels: int) -> np.ndarray:
    """The ``N*H*W x C`` pixel rows of ``x`` (``C = channels``): an NCHW tensor transposed,
    any other (the rows themselves) as it is, by :func:`nchw_view`."""
    x = np.asarray(x)
    if nchw_view(x.shape) == PIXELS:
        x = x.transpose(0, 2, 3, 1)
    return x.reshape(-1, channels)


def unpack_kmajor(dims: GemmDims, data: bytes) -> np.ndarray:
    """The M x N int8 tensor back from its transposed tiles (``[Mb][Nb][C][R]``)."""
    need = dims.Mb * dims.Nb * dims.tile_bytes(1)
    if len(data) < need:
        raise ValueError(f"a {dims.M} x {dims.N} int8 K-major tensor needs {need} bytes, got "
                         f"{len(data)}")
    tiles = np.frombuffer(bytes(data[:need]), np.int8).reshape(dims.Mb, dims.Nb, dims.C, dims.R)
    full = tiles.transpose(0, 3, 1, 2).reshape(dims.Mb * dims.R, dims.Nb * dims.C)
    return full[: dims.M, : dims.N].copy()


def unpack_output(dims: GemmDims, outputs, dtype: type | np.dtype, *,
                  kmajor: bool = False) -> np.ndarray:
    """The M x N result of a kernel from what the simulator read back.

    ``outputs`` maps ``"out"`` to its bytes (bytes, bytearray or a uint8 array), or is those
    bytes itself; ``kmajor``: stored transposed, tile by tile (int8, :func:`unpack_kmajor`).
    """
    data = outputs["out"] if isinstance(outputs, Mapping) else outputs
    if not isinstance(data, bytes | bytearray | memoryview):
        data = np.asarray(data, np.uint8).tobytes()
    if kmajor:
        return unpack_kmajor(dims, bytes(data))
    return unpack_tiles(dims, bytes(data), dtype)
