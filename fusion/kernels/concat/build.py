"""A channel join's regions and program from its fields (:mod:`fusion.kernels.concat.kind`
builds with them; :class:`~fusion.kernels.concat.features.ConcatFeatures` prices with them,
and must not import the kind above it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fusion.kernels import layout
from fusion.kernels.codegen import assemble_program, render
from fusion.kernels.epilogue import pass_context
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.program import figures, tensor_bytes
from fusion.kernels.protocol import Build
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams

#: The microcode template of each input's pass.
TEMPLATE = "epilogue_pass.j2"
#: The stages of an input rescaled into the output's quantization: its zero point off (a
#: bias of ``-x_zp``), then the requantize.
RESCALE = ("bias", "requant")


def part_dims(config: VariantConfig, M: int, width: int) -> GemmDims:  # noqa: N803
    """The geometry of one input, ``M x width``: an ``M x 1 x width`` GEMM's."""
    return GemmDims(config, M, 1, width)


def sizes(config: VariantConfig, M: int, widths: Sequence[int],  # noqa: N803
          rescaled: Sequence[bool]) -> dict[str, int]:
    """``name -> bytes`` of the regions, in allocation order: ``in0`` .. ``in{n-1}`` (int8
    tiles), ``bias`` (the ``[Nb_i][C]`` bias rows of each rescaled input, each padded to
    whole words; only when one is rescaled), ``out`` (the joined int8 tiles)."""
    parts = [part_dims(config, M, w) for w in widths]
    out = {f"in{i}": tensor_bytes(d, "int8") for i, d in enumerate(parts)}
    bias = sum(layout.bias_region_bytes(d) for d, r in zip(parts, rescaled, strict=True) if r)
    if bias:
        out["bias"] = bias
    out["out"] = tensor_bytes(part_dims(config, M, sum(widths)), "int8")
    return out


def build_concat(config: VariantConfig, M: int, widths: Sequence[int],  # noqa: N803
                 epilogues: Sequence[EpilogueParams | None], regions: Mapping[str, Region],
                 what: str) -> Build:
    """One epilogue pass per input (``epilogues[i]`` None: a copy), each writing its column
    blocks of every block row of ``out`` (``out_pitch``), one after the other."""
    total = part_dims(config, M, sum(widths))
    tile = total.tile_words(1)
    texts, first_block, bias_at = [], 0, 0
    for i, (width, params) in enumerate(zip(widths, epilogues, strict=True)):
        dims = part_dims(config, M, width)
        out = regions["out"]
        bias = None
        if params is not None:
            nbytes = layout.bias_region_bytes(dims)
            bias = Region("bias", regions["bias"].addr + bias_at // config.port_bytes, nbytes)
            bias_at += nbytes
        texts.append(render(TEMPLATE, **pass_context(
            dims, stages=RESCALE if params is not None else (),
            params=params if params is not None else EpilogueParams(), src=regions[f"in{i}"],
            src_dt="i8", out=Region("out", out.addr + first_block * tile, out.nbytes),
            out_dt="i8", bias=bias, prefix=f"cat{i}", halt=i == len(widths) - 1,
            out_pitch=total.Nb)))
        first_block += dims.Nb
    program = assemble_program(config, "\n".join(texts), what=what)
    return figures(config, program, busy=total.Mb * total.Nb * total.R,
                   stored=regions["out"].nbytes)
