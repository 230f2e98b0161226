"""The window-unit kernel kind: ``epilogue(window(x))`` computed by the window unit (WINDOW,
WCFG in :mod:`hwgen.isa`), one channel a lane: a depthwise convolution (``mac``) or a max
pool (``max``). Program: :mod:`fusion.kernels.window.program`.

Operands: ``x`` (the input as the ``N*H*W x C`` matrix of its pixels, int8, in tiles
``[Mb][Nb][R][C]``: exactly what a GEMM stores, so the kernel reads its producer's output
where it lies), in mac mode ``w`` (the ``kh*kw x C`` taps, tap ``(ky, kx)`` at row
``ky*kw + kx``), and the epilogue's ``bias``, ``mult``/``shift`` as for a GEMM. The output is
the ``M x C`` tiles (or K-major, for a GEMM reading it).

Where it applies (:func:`window_problem`): variants with the window unit, windows up to 3x3,
one stride up to 3 in both axes, pads smaller than the window, images of whole output tiles
in a batch, a tile's input rows in half the A scratchpad, no residual stage (WINDOW reads no
residual), and a program that fits the instruction memory. Otherwise the compiler runs what
it ran before (a grouped GEMM of host-gathered windows), and the plan says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.ir import windows
from fusion.kernels import layout
from fusion.kernels.epilogue import epilogue_operands, pack_epilogue
from fusion.kernels.layout import Region
from fusion.kernels.program import Kernel, figures
from fusion.kernels.protocol import Build, KernelKind, Operand, Refusal, stage_refusal
from fusion.kernels.window.features import WindowFeatures
from fusion.kernels.window.params import (
    MAX_KERNEL,
    MAX_STRIDE,
    WEIGHT_ROWS,
    WindowLayout,
    WindowParams,
)
from fusion.kernels.window.program import (
    chunk_fits,
    chunk_tiles,
    chunks,
    e_rows,
    most_tiles,
    program_problem,
    window_regions,
)
from fusion.kernels.window.program import program as window_program
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, epilogue, to_dtype

#: The refusal of every window kernel on a variant without the unit.
NO_WINDOW_UNIT = ("no_window_unit", "the variant has no window unit; generate one with "
                  "--window-unit (port_bytes == rows == cols <= 16)")
#: WCFG's and WINDOW's field limits: input width and height, output row width.
MAX_WIN, MAX_HIN, MAX_OW = 4095, 4095, 2047


@dataclass(frozen=True, eq=False)
class WindowKernel(Kernel):
    """A compiled window-unit kernel."""


def window_problem(config: VariantConfig, p: WindowParams) -> tuple[str, str] | None:
    """Why the window unit cannot run ``p`` on ``config``, as ``(reason, text)``; None when it
    can."""
    if not config.window_unit:
        return NO_WINDOW_UNIT
    if p.mode != "sum" and (p.kh > MAX_KERNEL or p.kw > MAX_KERNEL):
        return ("kernel", f"a {p.kh}x{p.kw} window is larger than the window unit's "
                f"{MAX_KERNEL}x{MAX_KERNEL}")
    if p.stride > MAX_STRIDE:
        return ("stride", f"stride {p.stride} is beyond the window unit's 1..{MAX_STRIDE}")
    if p.pads[0] >= p.kh or p.pads[2] >= p.kh or p.pads[1] >= p.kw or p.pads[3] >= p.kw:
        return ("pads", f"pads {p.pads} are not all smaller than the {p.kh}x{p.kw} window")
    if p.W > MAX_WIN or p.H > MAX_HIN or p.OW > MAX_OW:
        return ("size", f"a {p.H}x{p.W} input ({p.OW} output columns) exceeds the window "
                f"unit's {MAX_HIN}x{MAX_WIN} ({MAX_OW})")
    if "residual" in p.stages:
        return ("residual", "WINDOW reads no residual tile; the residual add runs as a pass")
    if p.mode == "sum" and p.H * p.W * 128 >= 2**31:
        return ("size", f"a sum of {p.H * p.W} int8 values could leave int32")
    if p.mode != "sum" and p.N > 1 and (p.OH * p.OW) % config.rows:
        return ("image_tiles", f"an image's {p.OH * p.OW} output pixels are not whole tiles "
                f"of {config.rows}: a tile would span two images of the batch")
    lay = WindowLayout(config, p)
    size = chunk_tiles(lay)
    if size < 1:
        return ("a_scratchpad", f"{p.chunk or 'one'} output tile(s)' input rows do not fit "
                f"half the A scratchpad ({config.spad_a_depth} rows)")
    if e_rows(lay) > config.spad_e_depth:
        return ("e_scratchpad", f"the bias region and two regions of {WEIGHT_ROWS} weight rows "
                f"need {e_rows(lay)} epilogue scratchpad rows, more than its "
                f"{config.spad_e_depth}")
    if p.kmajor_out and p.out_dtype != np.int8:
        return "kmajor_out", "a K-major store holds int8 tiles; this output is int32"
    problem = program_problem(lay, size)
    return None if problem is None else ("program_too_long", problem)


class WindowKind(KernelKind):
    """The window-unit kernel (see the module docstring)."""

    name = "window"
    template = "window.j2"
    params_type = WindowParams
    kernel_type = WindowKernel
    features_type = WindowFeatures
    const_regions = frozenset({"w", "bias"})
    variants_label = "chunks"

    def variant_refusal(self, config: VariantConfig) -> Refusal | None:
        return None if config.window_unit else Refusal(self.name, *NO_WINDOW_UNIT)

    def legality(self, config: VariantConfig, params: WindowParams) -> Refusal | None:
        refusal = stage_refusal(self.name, params.stages, config.epilogue)
        if refusal is not None:
            return refusal
        problem = window_problem(config, params)
        if problem is not None:
            return Refusal(self.name, *problem)
        return None

    def variants(self, config: VariantConfig, params: WindowParams) -> list[WindowParams]:
        """Chunk sizes worth pricing: as many tiles as fit, then halves of it down to about
        two output rows (smaller chunks start sooner but reload more halo rows), each one
        that fits and whose program fits the instruction memory."""
        lay = WindowLayout(config, params)
        most = most_tiles(lay)
        floor = max(1, min(most, 2 * -(-params.OW // config.rows)))
        sizes, size = [], most
        while size >= floor and len(sizes) < 5:
            sizes.append(size)
            size = -(-size // 2) if size > 1 else 0
        out = []
        for size in dict.fromkeys(sizes):
            p = dataclasses.replace(params, chunk=size)
            if chunk_fits(lay, size) and program_problem(WindowLayout(config, p), size) is None:
                out.append(p)
        return out or [params]

    def variant_label(self, params: WindowParams) -> str:
        return f"chunk={params.chunk or 'most'} tiles"

    def dims(self, params: WindowParams) -> tuple[int, int, int]:
        return params.M, params.taps if params.mode == "mac" else 1, params.C

    def stages(self, params: WindowParams) -> tuple[str, ...]:
        return params.stages

    def epilogue(self, params: WindowParams) -> EpilogueParams:
        return params.epilogue

    def operands(self, config: VariantConfig, params: WindowParams) -> dict[str, Operand]:
        p = params
        ops = {"x": Operand("int8", (p.N * p.H * p.W, p.C))}
        if p.mode == "mac":
            ops["w"] = Operand("int8", (p.taps, p.C))
        return {**ops, **epilogue_operands(p.stages, p.epilogue, p.M, p.C)}

    def output(self, params: WindowParams) -> Operand:
        return Operand(params.out_dtype.name, (params.M, params.C))

    def regions(self, config: VariantConfig, params: WindowParams) -> dict[str, int]:
        return window_regions(config, params)

    def region_layout(self, config: VariantConfig, params: WindowParams, region: str) -> str:
        """``x`` is in tiles; ``out`` K-major when stored so."""
        if region == "out" and params.kmajor_out:
            return layout.layout_name("kmajor", WindowLayout(config, params).Nb * config.cols)
        return "tiles"

    def inputs_in_place(self, params: WindowParams) -> dict[str, int]:
        return {"x": 0}

    def key_params(self, params: WindowParams) -> dict[str, Any]:
        p = params
        return {"input": [p.N, p.C, p.H, p.W], "kernel": [p.kh, p.kw], "stride": p.stride,
                "pads": list(p.pads), "fill": p.fill, "mode": p.mode,
                "stages": list(p.stages), "quant": dataclasses.asdict(p.epilogue),
                "kmajor_out": p.kmajor_out, "chunk": p.chunk}

    def build(self, config: VariantConfig, params: WindowParams,
              regions: Mapping[str, Region]) -> Build:
        lay = WindowLayout(config, params)
        size = chunk_tiles(lay)
        built = window_program(config, params, regions, what=self.describe(params))
        windows_run = lay.Nb * sum(len(ch.tiles) for ch in chunks(lay, size))
        return figures(config, built, busy=windows_run * config.rows,
                       stored=regions["out"].nbytes, chosen={"chunk_tiles": size})

    def pack(self, config: VariantConfig, params: WindowParams,
             values: Mapping[str, np.ndarray]) -> dict[str, bytes]:
        p, lay = params, WindowLayout(config, params)
        out = {"x": layout.pack_tiles(lay.in_dims, values["x"], np.int8)}
        if p.mode == "mac":
            taps = np.zeros((lay.Nb, WEIGHT_ROWS, config.cols), np.int8)
            w = np.zeros((p.kh, p.kw, lay.Nb * config.cols), np.int8)
            w[:, :, : p.C] = np.asarray(values["w"]).reshape(p.kh, p.kw, p.C)
            for ky in range(p.kh):  # tap (ky, kx) at row 3*ky + kx (WINDOW ``w``)
                for kx in range(p.kw):
                    taps[:, MAX_KERNEL * ky + kx] = w[ky, kx].reshape(lay.Nb, config.cols)
            out["w"] = taps.tobytes()
        return {**out, **pack_epilogue(lay.dims, p.stages, p.epilogue, values)}

    def reference(self, params: WindowParams, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """The windows (``fusion.ir.windows``, padding ``fill``) reduced per channel (the
        taps' weighted sum, or their max), through the epilogue's reference."""
        p = params
        x = np.asarray(values["x"]).reshape(p.N, p.H, p.W, p.C).transpose(0, 3, 1, 2)
        cols = windows.windows(x.astype(np.int64), (p.kh, p.kw), (p.stride, p.stride),
                               (1, 1), p.pads, p.fill)  # [N, C, kh, kw, OH, OW]
        if p.mode == "mac":
            w = np.asarray(values["w"], np.int64).reshape(p.kh, p.kw, p.C)
            acc = np.einsum("ncyxhw,yxc->nhwc", cols, w)
        elif p.mode == "sum":
            acc = cols.sum(axis=(2, 3)).transpose(0, 2, 3, 1)
        else:
            acc = cols.max(axis=(2, 3)).transpose(0, 2, 3, 1)
        acc = ((acc.reshape(p.M, p.C) + 2**31) % 2**32 - 2**31)  # the accumulators wrap
        extra = {k: v for k, v in values.items() if k not in ("x", "w")}
        return to_dtype(epilogue(acc, p.stages, p.epilogue, **extra), p.out_dtype)

    def features(self, config: VariantConfig, params: WindowParams) -> WindowFeatures:
        return WindowFeatures(config=config, params=params)

    def describe(self, params: WindowParams, ops: str = "") -> str:
        p = params
        what = "depthwise conv" if p.mode == "mac" else f"{p.mode} pool"
        kmajor = ", stored K-major" if p.kmajor_out else ""
        return (f"{self.name} {what} {p.N}x{p.C}x{p.H}x{p.W} {p.kh}x{p.kw}/{p.stride}"
                f"{f' [{ops}]' if ops else ''} stages={','.join(p.stages) or '-'}, on the "
                f"window unit{kmajor}")

    def region_view(self, params: WindowParams, region: str, shape: tuple[int, ...]) -> str:
        """``x`` and ``out`` are pixel rows: of an NCHW tensor (``x``'s ``N x C x H x W``, a
        pool's ``N x C x OH x OW`` output) or the rows of a GEMM form as they are
        (:func:`fusion.kernels.layout.nchw_view`)."""
        p = params
        if region == "x" or (region == "out" and tuple(shape) == (p.N, p.C, p.OH, p.OW)):
            return layout.nchw_view(shape)
        return layout.ROWS

    def tensor_of(self, params: WindowParams, out: np.ndarray, shape: tuple[int, ...]
                  ) -> np.ndarray:
        """The output tensor from the ``M x C`` pixel rows: an ``N x C x OH x OW`` tensor
        (a pool's) transposed, the rows of a GEMM form (a depthwise convolution's
        ``N x OH*OW x C``) as they are (:meth:`region_view`)."""
        p = params
        if self.region_view(p, "out", shape) == layout.PIXELS:
            return np.asarray(out).reshape(p.N, p.OH, p.OW, p.C).transpose(0, 3, 1, 2)
        return super().tensor_of(params, out, shape)

    def host_operands(self, config: VariantConfig, params: WindowParams,
                      inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """``x`` from the input tensor: ``N x C x H x W``, or the ``N x H*W x C`` rows of the
        GEMM that made it (:meth:`region_view`)."""
        return {"x": layout.pixel_rows(inputs[0], params.C)}


WINDOW = WindowKind()

__all__ = ["WINDOW", "WindowKernel", "WindowKind", "window_problem"]
