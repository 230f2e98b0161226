"""What a window-unit kernel's program depends on, and the geometry derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fusion.kernels.layout import GemmDims, ceil_div
from fusion.kernels.protocol import check_epilogue, check_sizes
from hwgen.config import VariantConfig
from hwgen.isa import WMode
from hwgen.reference import EpilogueParams, WindowGeometry, output_dtype

#: The window unit's largest window side (WCFG ``kh``/``kw``) and stride.
MAX_KERNEL = 3
MAX_STRIDE = 3
#: Weight rows a channel block takes in the epilogue scratchpad: tap (ky, kx) at row
#: ``3*ky + kx`` (WINDOW ``w``), whatever the kernel's size.
WEIGHT_ROWS = MAX_KERNEL * MAX_KERNEL
#: The modes, by name (WCFG ``mode``).
MODES = tuple(m.name.lower() for m in WMode)



@dataclass(frozen=True, kw_only=True)
class WindowParams:
    """``epilogue(window(x))`` of an int8 ``x`` (``N x C x H x W``), one channel a lane.

    Parameters
    ----------
    N, H, W, C : int
        Batch, input height and width, channels (input and output: one output channel per
        input channel).
    kh, kw : int
        The window's height and width (1..3).
    stride : int
        The window's step in both axes (1..3).
    pads : (int, int, int, int)
        Top, left, bottom and right padding (ONNX ``pads`` order), read as ``fill``. A
        negative bottom or right pad crops: no window reaches those last rows or columns,
        which the input holds (its producer computed whole blocks of columns) but the pool
        does not read (:mod:`fusion.compiler.whole_rows`).
    fill : int
        The int8 lane value padding reads: the input's zero point for a convolution.
    mode : str
        ``"mac"``: a depthwise convolution (operand ``w``: ``kh*kw x C`` int8 taps, tap
        ``(ky, kx)`` at row ``ky*kw + kx``); ``"max"``: a max pool; ``"sum"``: the sum of
        each image's whole plane (a global pool: the window is ``H x W``, no padding, so one
        output pixel an image).
    stages, epilogue, kmajor_out
        As for :class:`fusion.kernels.gemm.params.GemmParams` (the epilogue is fused).
    chunk : int
        Output tiles per chunk of the A scratchpad (one LOAD each); 0: as many as fit.
        Smaller chunks start computing sooner and reload more halo rows: the kind offers a
        few as variants, and the cost model picks one.
    """

    N: int
    H: int
    W: int
    C: int
    kh: int
    kw: int
    stride: int = 1
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    fill: int = 0
    mode: str = "mac"
    stages: tuple[str, ...] = ()
    epilogue: EpilogueParams = field(default_factory=EpilogueParams)
    kmajor_out: bool = False
    chunk: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.chunk, int) or isinstance(self.chunk, bool) or self.chunk < 0:
            raise ValueError(f"chunk must be an integer >= 0 (0: as many tiles as fit), not "
                             f"{self.chunk!r}")
        check_sizes(N=self.N, H=self.H, W=self.W, C=self.C, kh=self.kh, kw=self.kw,
                    stride=self.stride)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in self.pads) or \
                len(self.pads) != 4 or min(self.pads[:2]) < 0 or self.pads[2] <= -self.H \
                or self.pads[3] <= -self.W:
            raise ValueError(f"pads must be 4 integers (top, left, bottom, right), the top and "
                             f"left >= 0, a negative bottom or right cropping less than the "
                             f"input, not {self.pads!r}")
        object.__setattr__(self, "pads", tuple(self.pads))
        if not -128 <= self.fill <= 127:
            raise ValueError(f"fill is an int8 lane value, not {self.fill!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.mode == "sum" and ((self.kh, self.kw) != (self.H, self.W) or any(self.pads)):
            raise ValueError(f"a sum covers the whole {self.H}x{self.W} plane without padding, "
                             f"not a {self.kh}x{self.kw} window with pads {self.pads}")
        if self.OH < 1 or self.OW < 1:
            raise ValueError(f"a {self.kh}x{self.kw} window does not fit the {self.H}x{self.W} "
                             f"input with pads {self.pads}")
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "kmajor_out", bool(self.kmajor_out))
        check_epilogue(self.stages, self.epilogue)

    @property
    def OH(self) -> int:  # noqa: N802 - the customary names
        return (self.H + self.pads[0] + self.pads[2] - self.kh) // self.stride + 1

    @property
    def OW(self) -> int:  # noqa: N802
        return (self.W + self.pads[1] + self.pads[3] - self.kw) // self.stride + 1

    @property
    def M(self) -> int:  # noqa: N802
        """Output pixels, in raster order over the batch: the output's rows."""
        return self.N * self.OH * self.OW

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    @property
    def out_dtype(self) -> np.dtype:
        """The stored element type: the stages' (:func:`hwgen.reference.output_dtype`), or
        int8 for a max without stages (the largest of int8 lanes: its low byte is exact)."""
        if self.mode == "max" and not self.stages:
            return np.dtype(np.int8)
        return output_dtype(self.stages)

    def geometry(self) -> WindowGeometry:
        """The window unit's geometry (one WCFG) for this kernel (a sum's window is its
        plane, ``hin x win``: WCFG's 2-bit ``kh``, ``kw`` do not apply and are 1)."""
        if self.mode == "sum":
            return WindowGeometry(win=self.W, hin=self.H, kh=1, kw=1, mode="sum")
        return WindowGeometry(win=self.W, hin=self.H, kh=self.kh, kw=self.kw,
                              stride=self.stride, pt=self.pads[0], pl=self.pads[1],
                              fill=self.fill & 0xFF, mode=self.mode)


@dataclass(frozen=True)
class WindowLayout:
    """How a window kernel lies on a variant.

    The input is the ``N*H*W x C`` pixel matrix in tiles (``[Mb_in][Nb][R][C]``: a GEMM's
    output), one pixel's channel block a memory word and an A scratchpad row; the output the
    ``M x C`` matrix in tiles (or K-major). The A scratchpad holds two halves, each the input
    rows of one *chunk* (consecutive output tiles of one image); the epilogue scratchpad the
    bias region from row 0, then two regions of :data:`WEIGHT_ROWS` weight rows (the channel
    blocks alternate between them).
    """

    config: VariantConfig
    params: WindowParams

    @property
    def R(self) -> int:  # noqa: N802
        return self.config.rows

    @property
    def dims(self) -> GemmDims:
        """The output's tile geometry (``M x C``; no reduction)."""
        return GemmDims(self.config, self.params.M, 1, self.params.C)

    @property
    def in_dims(self) -> GemmDims:
        """The input's tile geometry (``N*H*W x C``)."""
        p = self.params
        return GemmDims(self.config, p.N * p.H * p.W, 1, p.C)

    @property
    def Nb(self) -> int:  # noqa: N802
        return ceil_div(self.params.C, self.config.cols)

    @property
    def a_half(self) -> int:
        """A scratchpad rows of one half."""
        return self.config.spad_a_depth // 2
