"""The window-convolution kernel kind: ``epilogue(conv2d(x, w))`` with the load engine gathering
the windows (LOADW, implicit im2col; program: :mod:`fusion.kernels.conv.program`).

Operands: ``x`` (the input as the ``N*H*W x Cin`` matrix of its pixels, int8, K-major
``[blocks][cp][R]``: exactly what a GEMM stores with ``kmajor_out``, so the convolution reads
its producer's output where it lies), ``b`` (the ``kh*kw*Cin x Cout`` weights in (ky, kx, c)
order, pre-packed like a GEMM's B with their rows in the A scratchpad's order,
:attr:`~fusion.kernels.conv.params.ConvGeometry.k_order`), and the epilogue's ``bias``,
``mult``/``shift`` and ``residual`` as for a GEMM. The output is the GEMM's ``M x Cout``
tiles (or K-major).

Where it applies (:func:`conv_problem`): variants whose A row is one memory word, a
horizontal stride of 1 or 2, a step's windows in the A scratchpad (a whole output row's
when ``OW`` is a multiple of the array's rows; otherwise at least one block's, whose pixels
may span output rows: one window load per row it spans; in half of it, so that the next
step's loads run during this step's matmuls, or else single buffered), a column block of weights in
B, and a program that fits the instruction memory. Otherwise the compiler gathers the windows
on the host (``im2col``) and runs a GEMM, and the plan says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.ir import windows
from fusion.kernels import layout
from fusion.kernels.conv.features import ConvFeatures
from fusion.kernels.conv.params import ConvParams
from fusion.kernels.conv.program import (
    banked_plan,
    column_chunk,
    conv_regions,
    geometry,
    program_problem,
    schedule,
)
from fusion.kernels.conv.program import program as conv_program
from fusion.kernels.epilogue import epilogue_operands, pack_epilogue
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.program import Kernel, figures
from fusion.kernels.protocol import Build, KernelKind, Operand, Refusal, stage_refusal
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams, gemm_epilogue, output_dtype


@dataclass(frozen=True, eq=False)
class ConvKernel(Kernel):
    """A compiled window convolution."""


def no_window_loads(config: VariantConfig) -> tuple[str, str]:
    """The refusal of every window convolution on a variant without window loads."""
    return ("no_window_loads", f"window loads need an A row of one memory word (port_bytes "
            f"== rows <= 16); this variant has {config.rows} rows and {config.port_bytes}-byte "
            f"words")


def conv_problem(config: VariantConfig, p: ConvParams) -> tuple[str, str] | None:
    """Why the window convolution cannot run ``p`` on ``config``, as ``(reason, text)`` (the
    :class:`~fusion.kernels.protocol.Refusal`'s short name and its sentence); None when it
    can."""
    if not config.window_loads:
        return no_window_loads(config)
    if p.stride[1] not in (1, 2):
        return ("stride", f"the horizontal stride {p.stride[1]} is not a window load's lane "
                f"step (1 or 2)")
    if p.Cin >= 1 << 12:
        return ("channels", f"{p.Cin} input channels exceed a window load's 12-bit row count")
    geo = geometry(config, p)
    # in k chunks over the accumulator banks, a block's windows need not fit A (nor a
    # column block's weights B) at once: banked_plan is only ever a program that fits
    banked = banked_plan(config, p) is not None
    if geo.a_half > config.spad_a_depth and not banked:
        what = "an output row's" if geo.whole_rows else "a block's"
        return ("a_scratchpad", f"{what} windows ({geo.bps} blocks x {geo.Kp} rows) "
                f"do not fit the A scratchpad ({config.spad_a_depth} rows)")
    tn = column_chunk(geo, "residual" in p.stages)
    if tn < 1 and not banked:
        return ("b_scratchpad", f"a column block of weights ({geo.Kp} rows) and its residual "
                f"tiles do not fit the B and epilogue scratchpads")
    if p.kmajor_out:
        if config.rows != config.cols:
            return "kmajor_out", "a K-major store needs a square array"
        if output_dtype(p.stages) != np.int8:
            return "kmajor_out", "a K-major store holds int8 tiles; this output is int32"
    problem = None if banked else program_problem(geo, tn)
    return None if problem is None else ("program_too_long", problem)


class ConvKind(KernelKind):
    """The window convolution (see the module docstring)."""

    name = "conv"
    template = "conv.j2"
    params_type = ConvParams
    kernel_type = ConvKernel
    features_type = ConvFeatures
    const_regions = frozenset({"b", "bias"})

    def variant_refusal(self, config: VariantConfig) -> Refusal | None:
        return None if config.window_loads else Refusal(self.name, *no_window_loads(config))

    def legality(self, config: VariantConfig, params: ConvParams) -> Refusal | None:
        refusal = stage_refusal(self.name, params.stages, config.epilogue)
        if refusal is not None:
            return refusal
        problem = conv_problem(config, params)
        if problem is not None:
            return Refusal(self.name, *problem)
        return None

    def dims(self, params: ConvParams) -> tuple[int, int, int]:
        return params.M, params.K, params.Cout

    def stages(self, params: ConvParams) -> tuple[str, ...]:
        return params.stages

    def epilogue(self, params: ConvParams) -> EpilogueParams:
        return params.epilogue

    def operands(self, config: VariantConfig, params: ConvParams) -> dict[str, Operand]:
        p = params
        return {"x": Operand("int8", (p.N * p.H * p.W, p.Cin)),
                "b": Operand("int8", (p.K, p.Cout)),
                **epilogue_operands(p.stages, p.epilogue, p.M, p.Cout)}

    def output(self, params: ConvParams) -> Operand:
        return Operand(output_dtype(params.stages).name, (params.M, params.Cout))

    def regions(self, config: VariantConfig, params: ConvParams) -> dict[str, int]:
        return conv_regions(config, params)

    def region_layout(self, config: VariantConfig, params: ConvParams, region: str) -> str:
        """``x`` is K-major over ``cp`` channels; ``out`` K-major when stored so."""
        geo = geometry(config, params)
        if region == "x":
            return layout.layout_name("kmajor", geo.cp)
        if region == "out" and params.kmajor_out:
            return layout.layout_name("kmajor", geo.Nb * geo.C)
        return "tiles"

    def inputs_in_place(self, params: ConvParams) -> dict[str, int]:
        return {"x": 0, **({"residual": 1} if "residual" in params.stages else {})}

    def key_params(self, params: ConvParams) -> dict[str, Any]:
        p = params
        return {"input": [p.N, p.Cin, p.H, p.W], "cout": p.Cout, "kernel": [p.kh, p.kw],
                "stride": list(p.stride), "pads": list(p.pads), "fill": p.fill,
                "stages": list(p.stages), "quant": dataclasses.asdict(p.epilogue),
                "kmajor_out": p.kmajor_out}

    def build(self, config: VariantConfig, params: ConvParams,
              regions: Mapping[str, Region]) -> Build:
        geo = geometry(config, params)
        tn = schedule(geo)[0]
        built = conv_program(config, params, regions, what=self.describe(params))
        dims = _dims(config, params)
        return figures(config, built, busy=dims.Mb * dims.Nb * dims.Kp,
                       stored=regions["out"].nbytes,
                       chosen={"column_chunk": tn, "step_blocks": geo.bps})

    def pack(self, config: VariantConfig, params: ConvParams,
             values: Mapping[str, np.ndarray]) -> dict[str, bytes]:
        p, geo = params, geometry(config, params)
        dims = _dims(config, p)
        x = np.zeros((geo.in_blocks * geo.R, geo.cp), np.int8)
        x[: p.N * p.H * p.W, : p.Cin] = values["x"]
        return {"x": x.reshape(geo.in_blocks, geo.R, geo.cp).transpose(0, 2, 1).tobytes(),
                "b": layout.pack_b(dims, np.asarray(values["b"])[geo.k_order]),
                **pack_epilogue(dims, p.stages, p.epilogue, values)}

    def reference(self, params: ConvParams, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """The convolution as windows (``fusion.ir.windows``, padding ``fill``) times the
        weights, through the GEMM epilogue's reference."""
        p = params
        x = np.asarray(values["x"]).reshape(p.N, p.H, p.W, p.Cin).transpose(0, 3, 1, 2)
        cols = windows.windows(x, (p.kh, p.kw), p.stride, (1, 1), p.pads, p.fill)
        # [N, C, kh, kw, OH, OW] -> rows (n, oy, ox), columns (ky, kx, c)
        a = cols.transpose(0, 4, 5, 2, 3, 1).reshape(p.M, p.K)
        extra = {k: v for k, v in values.items() if k not in ("x", "b")}
        return gemm_epilogue(a, values["b"], p.stages, p.epilogue, **extra)

    def features(self, config: VariantConfig, params: ConvParams) -> ConvFeatures:
        return ConvFeatures(config=config, params=params)

    def describe(self, params: ConvParams, ops: str = "") -> str:
        p = params
        kmajor = ", stored K-major" if p.kmajor_out else ""
        return (f"{self.name} {p.N}x{p.Cin}x{p.H}x{p.W} {p.kh}x{p.kw}/{p.stride[0]}x"
                f"{p.stride[1]} -> {p.Cout}{f' [{ops}]' if ops else ''} "
                f"stages={','.join(p.stages) or '-'}, windows gathered by the load "
                f"engine{kmajor}")

    def region_view(self, params: ConvParams, region: str, shape: tuple[int, ...]) -> str:
        """``x`` is pixel rows: of an NCHW tensor, or the rows of a GEMM form as they are
        (:func:`fusion.kernels.layout.nchw_view`)."""
        return layout.nchw_view(shape) if region == "x" else layout.ROWS

    def host_operands(self, config: VariantConfig, params: ConvParams,
                      inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """``x`` from the input tensor: ``N x Cin x H x W``, or the ``N x H*W x Cin`` rows
        of the GEMM that made it (:meth:`region_view`)."""
        p = params
        ops = {"x": layout.pixel_rows(inputs[0], p.Cin)}
        if "residual" in p.stages:
            ops["residual"] = np.asarray(inputs[1]).reshape(p.M, p.Cout)
        return ops


def _dims(config: VariantConfig, p: ConvParams) -> GemmDims:
    return GemmDims(config, p.M, p.K, p.Cout)


CONV = ConvKind()

__all__ = ["CONV", "ConvKernel", "ConvKind", "conv_problem"]
