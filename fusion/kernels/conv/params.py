"""What a window convolution's program depends on, and the geometry derived from it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fusion.kernels.layout import ceil_div
from fusion.kernels.protocol import check_epilogue, check_sizes
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams


@dataclass(frozen=True, kw_only=True)
class ConvParams:
    """``epilogue(conv2d(x, w))`` of an int8 ``x`` (``N x Cin x H x W``) and int8 weights.

    Parameters
    ----------
    N, H, W, Cin, Cout : int
        Batch, input height and width, input and output channels.
    kh, kw : int
        The kernel's height and width.
    stride : (int, int)
        Vertical and horizontal stride; the horizontal one is the window load's lane step,
        1 or 2 (the kind's legality check).
    pads : (int, int, int, int)
        Top, left, bottom and right padding (ONNX ``pads`` order), filled with ``fill``.
    fill : int
        The input's zero point as an int8 lane value: what padding reads.
    stages, epilogue, kmajor_out
        As for :class:`fusion.kernels.gemm.params.GemmParams` (the epilogue is fused).

    The weights are the ``K x Cout`` matrix with ``K = kh*kw*Cin`` in (ky, kx, c) order, c
    fastest: the order the window loads fill the A scratchpad in.
    """

    N: int
    H: int
    W: int
    Cin: int
    Cout: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    fill: int = 0
    stages: tuple[str, ...] = ()
    epilogue: EpilogueParams = field(default_factory=EpilogueParams)
    kmajor_out: bool = False

    def __post_init__(self) -> None:
        check_sizes(N=self.N, H=self.H, W=self.W, Cin=self.Cin, Cout=self.Cout, kh=self.kh,
                    kw=self.kw)
        for name, value, least in (("stride", self.stride, 1), ("pads", self.pads, 0)):
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= least
                       for v in value):
                raise ValueError(f"{name} must be integers >= {least}, not {value!r}")
        object.__setattr__(self, "stride", tuple(self.stride))
        object.__setattr__(self, "pads", tuple(self.pads))
        if len(self.stride) != 2 or len(self.pads) != 4:
            raise ValueError(f"a 2-D convolution has 2 strides and 4 pads, not {self.stride!r} "
                             f"and {self.pads!r}")
        if not -128 <= self.fill <= 127:
            raise ValueError(f"fill is an int8 lane value, not {self.fill!r}")
        if self.OH < 1 or self.OW < 1:
            raise ValueError(f"a {self.kh}x{self.kw} window does not fit the {self.H}x{self.W} "
                             f"input with pads {self.pads}")
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "kmajor_out", bool(self.kmajor_out))
        check_epilogue(self.stages, self.epilogue)

    @property
    def OH(self) -> int:  # noqa: N802 - the customary names
        return (self.H + self.pads[0] + self.pads[2] - self.kh) // self.stride[0] + 1

    @property
    def OW(self) -> int:  # noqa: N802
        return (self.W + self.pads[1] + self.pads[3] - self.kw) // self.stride[1] + 1

    @property
    def M(self) -> int:  # noqa: N802
        """Output pixels: the GEMM's rows."""
        return self.N * self.OH * self.OW

    @property
    def K(self) -> int:  # noqa: N802
        """The reduction: ``kh * kw * Cin``."""
        return self.kh * self.kw * self.Cin


@dataclass(frozen=True)
class ConvGeometry:
    """How a window convolution lies on a variant: blocks, steps, scratchpad halves, chunks.

    The output is the GEMM ``M x Cout`` (``M = N*OH*OW`` pixels in raster order) in blocks of
    ``R`` pixels, taken ``bps`` blocks a *step*: a whole output row's ``bpr`` blocks when
    ``OW`` is a multiple of ``R``; otherwise a block may span output rows (and images), and a
    step is ``bps`` consecutive blocks, a divisor of the period after which the blocks' places
    in the output rows repeat (:attr:`period`), as large as half the A scratchpad holds (one
    block when not even that: :attr:`single_buffered`). The
    input is the K-major ``[blocks][cp][R]`` matrix of its ``N*H*W`` pixels, ``cp`` its
    channels padded to the array's columns (what a GEMM stores K-major). The A scratchpad
    holds two halves (a step's blocks, ``Kp`` rows each), or one step when two do not fit;
    B holds ``tn`` column blocks of
    weights at a time (the chunks); the epilogue scratchpad holds the bias region, then two
    halves of residual tiles.
    """

    config: VariantConfig
    params: ConvParams
    #: Blocks per step when output rows are not whole blocks (:attr:`bps`).
    step_blocks_given: int | None = None
    #: In k chunks over the accumulator banks, a step's windows load whole, once, and stay
    #: in the A scratchpad while every column chunk's weights stream past them (they fit:
    #: ``bps * Kp`` rows; a step deeper than the scratchpad keeps each block's first rows
    #: and streams the rest, :meth:`kept_rows`), rather than with the weights, chunk by
    #: chunk (:func:`fusion.kernels.conv.banked.banked_body`).
    resident: bool = False

    @property
    def R(self) -> int:  # noqa: N802
        return self.config.rows

    @property
    def C(self) -> int:  # noqa: N802
        return self.config.cols

    @property
    def cp(self) -> int:
        """The input's K-major width: Cin padded to whole column blocks."""
        return ceil_div(self.params.Cin, self.C) * self.C

    @property
    def in_blocks(self) -> int:
        return ceil_div(self.params.N * self.params.H * self.params.W, self.R)

    @property
    def Kp(self) -> int:  # noqa: N802
        align = self.config.k_align
        return ceil_div(self.params.K, align) * align

    @property
    def Nb(self) -> int:  # noqa: N802
        return ceil_div(self.params.Cout, self.C)

    @property
    def Mb(self) -> int:  # noqa: N802
        return ceil_div(self.params.M, self.R)

    @property
    def whole_rows(self) -> bool:
        """Output rows of whole blocks: every block lies in one output row."""
        return self.params.OW % self.R == 0

    @property
    def bpr(self) -> int:
        """Output blocks per output row (whole rows only)."""
        return self.params.OW // self.R

    @property
    def period(self) -> int:
        """Blocks after which the blocks' places in the output rows repeat:
        ``lcm(OW, R) / R``."""
        return self.params.OW // math.gcd(self.params.OW, self.R)

    @property
    def step_choices(self) -> list[int]:
        """The step sizes (blocks) possible when output rows are not whole blocks: 1 up to
        :attr:`period`, as many as half the A scratchpad holds (at least 1); and all of them,
        one step, where the A scratchpad holds every block's windows (single buffered: no
        step follows to load). A small plane's windows then load once and its weights
        stream past them (Inception-v1's 3x3 of 96 to 208 channels at 4x4: 52,948 cycles in
        one step, 87,148 in two, which reload the weights)."""
        half = self.config.spad_a_depth // (2 * self.Kp)
        choices = list(range(1, max(1, min(self.period, half)) + 1))
        if self.Mb > choices[-1] and self.Mb * self.Kp <= self.config.spad_a_depth:
            choices.append(self.Mb)
        return choices

    @property
    def bps(self) -> int:
        """Blocks per step: the step size given (the fastest is :func:`fusion.kernels.conv.
        program.geometry`'s; in k chunks over the accumulator banks, whole rows too may
        go several to a step), or a whole row's."""
        if self.step_blocks_given is not None:
            return self.step_blocks_given
        if not self.whole_rows:
            raise ValueError("output rows that are not whole blocks go in steps of a given "
                             "size: build the geometry with fusion.kernels.conv.program."
                             "geometry")
        return self.bpr

    @property
    def steps(self) -> int:
        """The blocks in steps of ``bps`` (whole rows a step: the ``N * OH`` output rows)."""
        return ceil_div(self.Mb, self.bps)

    def step_blocks(self, s: int) -> range:
        """The blocks of step ``s``."""
        return range(s * self.bps, min(self.Mb, (s + 1) * self.bps))

    @property
    def row_class(self) -> int:
        """Kernel rows ``ky`` and ``ky + q`` (this ``q``) are ``lcm(W, R)`` input pixels
        apart: a whole number of blocks, so their windows have the same lanes' bytes."""
        return self.R // math.gcd(self.params.W, self.R)

    @property
    def class_words(self) -> int:
        """Words from one kernel row's window to the next of its class (:attr:`row_class`)."""
        return self.row_class * self.params.W // self.R * self.cp

    @property
    def channel_major(self) -> bool:
        """Window loads fill one input channel's rows at a time (its ``(ky, kx)`` positions in
        groups of a column ``kx``'s rows of one :attr:`row_class`, a LOADW's rows
        ``class_words`` apart), rather than one kernel position's ``Cin`` channels (rows one
        word apart): with one channel, and where that takes fewer loads, ``Cin * kw *
        row_class`` against ``kh * kw`` (a 7x7 stem of 3 channels: 21 loads a block, not 49;
        each is a fixed cost beside its few bytes, and two instructions)."""
        p = self.params
        return p.Cin == 1 or p.Cin * min(self.row_class, p.kh) < p.kh

    @property
    def groups(self) -> list[tuple[int | None, list[tuple[int, int]]]]:
        """The kernel positions ``(ky, kx)`` in the A scratchpad's order (and the weights'
        K order), in groups one window load fills, each with its channel: channel-major
        (:attr:`channel_major`), channel ``c``'s column ``kx``'s rows of one :attr:`row_class`;
        otherwise each position alone, in ``(ky, kx)`` order, all ``Cin`` channels (None)."""
        p = self.params
        if not self.channel_major:
            return [(None, [(ky, kx)]) for ky in range(p.kh) for kx in range(p.kw)]
        q = min(self.row_class, p.kh)
        return [(c, [(ky, kx) for ky in range(a, p.kh, self.row_class)])
                for c in range(p.Cin) for kx in range(p.kw) for a in range(q)]

    @property
    def row_words(self) -> int:
        """Words from one row of a window load to the next (r3): ``class_words``
        channel-major, else one (the next channel)."""
        return self.class_words if self.channel_major else 1

    @property
    def k_order(self) -> list[int]:
        """The weights' rows in A scratchpad order: row ``i`` of the packed weights is row
        ``k_order[i]`` of the ``(ky, kx, c)``-ordered ``K x Cout`` matrix."""
        p = self.params
        return [(ky * p.kw + kx) * p.Cin + c for ch, g in self.groups for ky, kx in g
                for c in (range(p.Cin) if ch is None else (ch,))]

    def kept_rows(self, part: int) -> int:
        """Resident (:attr:`resident`), in k chunks of ``part`` rows, the window rows of each
        block of a step that stay in the A scratchpad: all ``Kp`` where the step's windows
        fit it (:attr:`deep` is False); else the most whole k chunks that leave two halves
        of a streamed chunk of every block after them. ResNet-50's 3x3 of 256 channels at
        2x2 (one block, 2,304 rows) keeps 1,920 in k chunks of 128; DenseNet's of 128
        channels at 8x8 in steps of two blocks (2 x 1,152 rows) keeps 768 of each in k
        chunks of 128."""
        if not self.deep:
            return self.Kp
        return (self.config.spad_a_depth - 2 * self.bps * part) // self.bps // part * part

    @property
    def deep(self) -> bool:
        """A step's windows (``bps * Kp`` rows) are deeper than the A scratchpad: only k
        chunks over the accumulator banks can run it."""
        return self.bps * self.Kp > self.config.spad_a_depth

    @property
    def a_half(self) -> int:
        """A scratchpad rows of one half: a step's blocks."""
        return self.bps * self.Kp

    @property
    def single_buffered(self) -> bool:
        """A step's windows fill more than half the A scratchpad: the next step's loads wait
        for this step's matmuls, into the same rows (:mod:`fusion.kernels.conv.program`)."""
        return 2 * self.a_half > self.config.spad_a_depth

    @property
    def split_rows(self) -> int:
        """Single buffered, the window rows of each block that still load while the step
        before computes: the first ``split_rows`` of the ``Kp``, double buffered in the rows
        the step's windows leave free (a multiple of ``k_align``); the rest load after it
        (a window load across the split is cut in two: :mod:`fusion.kernels.conv.program`).
        0 when the step is double buffered, or no such rows fit."""
        if not self.single_buffered:
            return 0
        align = self.config.k_align
        rows = (self.config.spad_a_depth // self.bps - self.Kp) // align * align
        return rows if 0 < rows < self.Kp else 0
