"""A pass's regions and program from its fields (:mod:`fusion.kernels.epipass.kind` builds
with them; :class:`~fusion.kernels.epipass.features.PassFeatures` prices a DRAM port with
them, which must not import the kind above it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fusion.kernels import layout
from fusion.kernels.codegen import assemble_program, render
from fusion.kernels.epilogue import pass_context, reads_bias_region
from fusion.kernels.epipass.columns import TEMPLATE as COLUMNS_TEMPLATE
from fusion.kernels.epipass.columns import columns_context, needs_columns
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.program import figures, tensor_bytes
from fusion.kernels.protocol import Build
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams

#: Element types of a pass's input and output, and their names in the templates.
DTYPES = {"int8": "i8", "int32": "i32"}
#: The pass's microcode template.
TEMPLATE = "epilogue_pass.j2"


def pass_dims(config: VariantConfig, M: int, N: int) -> GemmDims:  # noqa: N803
    """The geometry of an ``M x N`` pass: an ``M x 1 x N`` GEMM's (no reduction)."""
    return GemmDims(config, M, 1, N)


def pass_sizes(dims: GemmDims, stages: Sequence[str], epilogue: EpilogueParams,
               src_dtype: str, out_dtype: str) -> dict[str, int]:
    """``name -> bytes`` of the pass's regions, in allocation order."""
    sizes = {"src": tensor_bytes(dims, src_dtype)}
    if reads_bias_region(stages, epilogue):
        sizes["bias"] = layout.bias_region_bytes(dims, epilogue)
    if "residual" in stages:
        sizes["residual"] = tensor_bytes(dims, "int8")
    sizes["out"] = tensor_bytes(dims, out_dtype)
    return sizes


def build_pass(config: VariantConfig, dims: GemmDims, stages: Sequence[str],
               epilogue: EpilogueParams, src_dtype: str, out_dtype: str,
               regions: Mapping[str, Region], what: str) -> Build:
    """The pass's program over ``regions`` (``what`` names it in errors): column block by
    column block when its bias region does not fit whole (:mod:`fusion.kernels.epipass.
    columns`)."""
    columns = needs_columns(dims, stages=stages, params=epilogue, src_dt=DTYPES[src_dtype])
    context = columns_context if columns else pass_context
    text = render(COLUMNS_TEMPLATE if columns else TEMPLATE, **context(
        dims, stages=tuple(stages), params=epilogue, src=regions["src"],
        src_dt=DTYPES[src_dtype], out=regions["out"], out_dt=DTYPES[out_dtype],
        bias=regions.get("bias"), residual=regions.get("residual"), prefix="pass", halt=True))
    program = assemble_program(config, text, what=what)
    return figures(config, program, busy=dims.Mb * dims.Nb * dims.R,
                   stored=regions["out"].nbytes)
