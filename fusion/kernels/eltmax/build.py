"""An element-wise max's regions and program from its fields (:mod:`fusion.kernels.eltmax.kind`
builds with them; :class:`~fusion.kernels.eltmax.features.MaxFeatures` prices a DRAM port
with them, and must not import the kind above it)."""

from __future__ import annotations

from collections.abc import Mapping

from fusion.kernels.codegen import assemble_program, render
from fusion.kernels.epilogue import pass_context
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.program import figures, tensor_bytes
from fusion.kernels.protocol import Build
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams

#: The residual stage in max mode: what every pass of the chain runs.
MAX_MODE = EpilogueParams(residual_op="max")
#: The chain's microcode template (one standalone pass per input after the first).
TEMPLATE = "epilogue_pass.j2"


def max_dims(config: VariantConfig, M: int, N: int) -> GemmDims:  # noqa: N803
    """The geometry of an ``M x N`` plane: an ``M x 1 x N`` GEMM's (no reduction)."""
    return GemmDims(config, M, 1, N)


def max_sizes(dims: GemmDims, n_inputs: int) -> dict[str, int]:
    """``name -> bytes`` of the regions, in allocation order: ``in0`` .. ``in{n-1}``, the
    intermediates, ``out``; each an int8 tile-blocked plane."""
    plane = tensor_bytes(dims, "int8")
    sizes = {f"in{i}": plane for i in range(n_inputs)}
    # n - 1 passes; all but the last store an intermediate, alternating between two
    # buffers so that no pass reads the region it writes.
    sizes.update({f"tmp{t}": plane for t in range(min(2, n_inputs - 2))})
    sizes["out"] = plane
    return sizes


def build_max(config: VariantConfig, dims: GemmDims, n_inputs: int,
              regions: Mapping[str, Region], what: str) -> Build:
    """The chain of ``n_inputs - 1`` passes over ``regions`` (``what`` names it in errors)."""
    texts, src = [], regions["in0"]
    for i in range(1, n_inputs):
        last = i == n_inputs - 1
        dst = regions["out"] if last else regions[f"tmp{(i - 1) % 2}"]
        texts.append(render(TEMPLATE, **pass_context(
            dims, stages=("residual",), params=MAX_MODE, src=src, src_dt="i8", out=dst,
            out_dt="i8", residual=regions[f"in{i}"], prefix=f"max{i}", halt=last)))
        src = dst
    program = assemble_program(config, "\n".join(texts), what=what)
    passes = n_inputs - 1
    return figures(config, program, busy=passes * dims.Mb * dims.Nb * dims.R,
                   stored=passes * regions["out"].nbytes)
