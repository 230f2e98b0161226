"""A window convolution's schedule and its assembled program.

:mod:`fusion.kernels.conv.context` builds the program of a schedule (its structure is
described there); this module chooses the schedule, each by the analytical model at a dummy
placement (:data:`_DUMMY`: addresses do not change the timing), among those whose program
fits the instruction memory:

- *plain*: column chunks of ``tn`` blocks, unrolled, or looped (:func:`chunk_loop`), ``tn``
  the widest the B scratchpad holds or, where only a loop fits, narrower
  (:func:`plain_plan`);
- *banked*: in k chunks over the accumulator banks (:func:`banked_plan`);
- *prefetch*: half-width chunks that load the next one's weights while they compute
  (:func:`b_prefetch`);
- and the step size, when output rows are not whole blocks (:func:`fastest_step`)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping

from fusion.kernels import derived
from fusion.kernels.codegen import Program, assemble_program, drop_redundant_li, render

# the program's context and the loops and window loads it uses, re-exported: their homes
# are fusion.kernels.conv.context, .loops and .windows
from fusion.kernels.conv.context import bias_windowed as bias_windowed
from fusion.kernels.conv.context import build_context as build_context
from fusion.kernels.conv.context import column_chunk as column_chunk
from fusion.kernels.conv.loops import LOOP_REGS as LOOP_REGS
from fusion.kernels.conv.loops import compress as compress
from fusion.kernels.conv.loops import instructions as instructions
from fusion.kernels.conv.loops import least_instructions
from fusion.kernels.conv.params import ConvGeometry, ConvParams
from fusion.kernels.conv.windows import chunks as chunks
from fusion.kernels.epilogue import reads_bias_region
from fusion.kernels.layout import GemmDims, Region, bias_region_bytes, ceil_div
from hwgen.asm import assemble_instrs
from hwgen.config import VariantConfig
from hwgen.isa import Instr
from hwgen.reference import output_dtype


def conv_regions(config: VariantConfig, p: ConvParams) -> dict[str, int]:
    """The kernel's regions, name -> bytes: ``x`` (K-major over ``cp`` channels), ``b``,
    ``bias`` and ``residual`` when read, ``out``."""
    geo = geometry(config, p)
    dims = GemmDims(config, p.M, p.K, p.Cout)
    sizes = {"x": geo.in_blocks * geo.cp * geo.R, "b": dims.Nb * dims.Kp * dims.C}
    if reads_bias_region(p.stages, p.epilogue):
        sizes["bias"] = bias_region_bytes(dims, p.epilogue)
    if "residual" in p.stages:
        sizes["residual"] = dims.Mb * dims.Nb * dims.tile_bytes(1)
    sizes["out"] = dims.Mb * dims.Nb * dims.tile_bytes(output_dtype(p.stages).itemsize)
    return sizes


def program(config: VariantConfig, p: ConvParams, regions: Mapping[str, Region], *,
            what: str = "window convolution", step: int | None = None) -> Program:
    """The assembled program of ``p`` at the placed ``regions`` (``what`` names it in a
    too-long error), in steps of ``step`` blocks when output rows are not whole blocks
    (None: :func:`geometry`'s choice); its column chunks in a loop when unrolled they would
    not fit the instruction memory (:func:`chunk_loop`), or half as wide, each loading the
    next one's weights (:func:`b_prefetch`)."""
    geo = geometry(config, p) if step is None else ConvGeometry(config, p, step)
    text = render("conv.j2", **build_context(geo, regions, *schedule(geo, step is None)))
    return assemble_program(config, text, what=what)


def schedule(geo: ConvGeometry, banks: bool = True) -> tuple[int, int, bool, bool]:
    """``(tn, part, looped, prefetch)`` of ``geo``'s program (the arguments of
    :func:`build_context` after the placement): banked (:func:`banked_plan`; with ``banks``),
    prefetching (:func:`b_prefetch`), or plain (:func:`plain_plan`; the widest column chunk
    unrolled when none fits, and the kind refuses it)."""
    banked = banked_plan(geo.config, geo.params) if banks else None
    if banked and banked[0] == geo.bps and banked[3] == geo.resident:
        _bps, tn, part, _resident = banked
        return tn, part, chunk_loop(geo, tn, part) is True, False
    if b_prefetch(geo):
        return b_prefetch(geo), 0, False, True
    tn, looped = plain_plan(geo) or (column_chunk(geo, "residual" in geo.params.stages), False)
    return tn, 0, looped, False


#: A placement for programs built to be measured: lengths and timings do not depend on the
#: addresses (every address is set by ``addi`` from a base, or once by ``li``).
_DUMMY = {name: Region(name, 1 << 20, 1) for name in ("x", "b", "bias", "residual", "out")}


@functools.lru_cache(maxsize=8)
def _dummy_context(geo: ConvGeometry, tn: int, part: int = 0, looped: bool = False,
                   prefetch: bool = False) -> dict:
    """:func:`build_context` at :data:`_DUMMY`, for :func:`_fits` and then
    :func:`_dummy_instrs` (a few: the two ask one after the other; read, never changed)."""
    return build_context(geo, _DUMMY, tn, part, looped, prefetch)


@functools.lru_cache(maxsize=128)
def _dummy_instrs(geo: ConvGeometry, tn: int, part: int = 0, looped: bool = False,
                  prefetch: bool = False) -> tuple[Instr, ...]:
    text = drop_redundant_li(render("conv.j2", **_dummy_context(geo, tn, part, looped,
                                                                 prefetch)))
    return tuple(assemble_instrs(text))


@functools.lru_cache(maxsize=256)
def b_prefetch(geo: ConvGeometry) -> int:
    """Column blocks a chunk (0: none) of the program whose chunks, half as wide as
    :func:`column_chunk`'s, each load the next chunk's weights into the B half they do not
    read while they compute, when it is faster by the analytical model and fits the
    instruction memory unrolled. Where a small plane makes the weights most of the bytes
    (ResNet-50's 1x1 of 512 to 1,024 channels at 4x4, stride 2) the chunks otherwise
    wait for their weights with the array idle. No residual stage (its tiles take both
    epilogue halves), and at least two chunks. Kept in the derived store
    (:mod:`fusion.kernels.derived`): it assembles up to two programs."""
    return derived.remembered("conv_b_prefetch", {"geometry": geo},
                              lambda: _b_prefetch(geo), derived.whole_number)


def _b_prefetch(geo: ConvGeometry) -> int:
    from fusion.cost.analytical import estimate_program  # the cost model reads kernels

    tn = min(geo.Nb, geo.config.spad_b_depth // 2 // geo.Kp)
    if "residual" in geo.params.stages or tn < 1 or geo.Nb <= tn:
        return 0
    instrs = _dummy_instrs(geo, tn, 0, False, True)
    if len(instrs) > geo.config.imem_depth:
        return 0
    plain = plain_plan(geo)
    if plain is None:
        return tn
    cycles = estimate_program(geo.config, instrs)
    return tn if cycles < estimate_program(geo.config, _dummy_instrs(geo, plain[0], 0, plain[1])) \
        else 0


@functools.lru_cache(maxsize=256)
def plain_plan(geo: ConvGeometry) -> tuple[int, bool] | None:
    """``(tn, looped)`` of the plain program: the widest column chunk (:func:`column_chunk`)
    unrolled where that fits the instruction memory; else the fastest, by the analytical
    model, of the programs with chunks of that width and a few narrower ones (``ceil(Nb /
    c)`` blocks for ``c`` chunks), each unrolled or looped (:func:`chunk_loop`), that fit.
    Narrower chunks load their windows more often, but equal chunks are one loop body:
    SqueezeNet's 3x3 convolution of 32 to 128 channels at 14x14 fits in chunks of 4 column
    blocks (122,948 cycles), not of 6 or 7. None when none fits."""
    return derived.remembered("conv_plain_plan", {"geometry": geo},
                              lambda: _plain_plan(geo), _decode_plan)


def _decode_plan(value: object) -> tuple[int, bool] | None:
    if value is None:
        return None
    if (isinstance(value, list) and len(value) == 2 and type(value[0]) is int
            and value[0] > 0 and type(value[1]) is bool):
        return value[0], value[1]
    raise ValueError(f"{value!r} is not a plan")


def _plain_plan(geo: ConvGeometry) -> list | None:
    from fusion.cost.analytical import estimate_program  # the cost model reads kernels

    widest = column_chunk(geo, "residual" in geo.params.stages)
    if widest < 1:
        return None
    if chunk_loop(geo, widest) is False:
        return [widest, False]
    first = -(-geo.Nb // widest)
    widths = list(dict.fromkeys(-(-geo.Nb // c) for c in range(first, 4 * first + 1)))
    best: tuple[int, int, bool] | None = None
    for tn in widths[:_NARROWER]:
        looped = chunk_loop(geo, tn)
        if looped is None:
            continue
        cycles = estimate_program(geo.config, _dummy_instrs(geo, tn, 0, looped))
        if best is None or cycles < best[0]:
            best = (cycles, tn, looped)
    return None if best is None else [best[1], best[2]]


#: Chunk widths :func:`plain_plan` tries where the widest fits only looped, or not at all.
_NARROWER = 5


@functools.lru_cache(maxsize=256)
def chunk_loop(geo: ConvGeometry, tn: int, part: int = 0) -> bool | None:
    """Whether the program's column chunks of ``tn`` blocks go in a hardware loop
    (:class:`~fusion.kernels.conv.loops.ChunkLoop`): False when the program fits the
    instruction memory unrolled (the loop's counter and chunk registers cost a few cycles a
    chunk), True when only looped, None when neither (or, with a residual stage or one
    chunk, there is no loop to make). Kept in the derived store: it assembles up to two
    programs."""
    return derived.remembered("conv_chunk_loop", {"geometry": geo, "tn": tn, "part": part},
                              lambda: _chunk_loop(geo, tn, part), _decode_loop)


def _decode_loop(value: object) -> bool | None:
    if value is None or type(value) is bool:
        return value
    raise ValueError(f"{value!r} is not a loop choice")


def _chunk_loop(geo: ConvGeometry, tn: int, part: int) -> bool | None:
    if _fits(geo, tn, part):
        return False
    if "residual" in geo.params.stages or geo.Nb < 2 * tn or bias_windowed(geo, tn):
        return None
    return True if _fits(geo, tn, part, True) else None


def _fits(geo: ConvGeometry, tn: int, part: int = 0, looped: bool = False) -> bool:
    """Whether the program fits the instruction memory; not assembled where even its least
    length (:func:`~fusion.kernels.conv.loops.least_instructions`) does not (a 7x7 stem
    unrolled is 20,000 instructions)."""
    imem = geo.config.imem_depth
    if least_instructions(_dummy_context(geo, tn, part, looped)["body"]) > imem:
        return False
    return len(_dummy_instrs(geo, tn, part, looped)) <= imem


@functools.lru_cache(maxsize=256)
def banked_plan(config: VariantConfig, p: ConvParams) -> tuple[int, int, int, bool] | None:
    """``(bps, tn, part, resident)`` of the program in k chunks over the accumulator banks
    (:func:`banked_body`), when the variant has banks, the kernel no residual, and that
    program fits the instruction memory and is faster than the one without (or there is
    none: a block's windows too deep for the A scratchpad), by the analytical model at a
    dummy placement; None otherwise.

    The fastest of: steps of ``bps`` blocks (1 up to the banks; whole output rows too may go
    several to a step), ``tn = banks // bps`` column blocks, and k chunks of ``part`` window
    rows (the most a half of each scratchpad holds for them, or, for the two fastest step
    sizes, a half, a quarter or an eighth of that). A step's window rows load once for its
    ``tn`` column blocks and a chunk's weight rows once for its ``bps`` blocks, so the two
    trade: DenseNet's 3x3 of 128 to 32 channels at 8x8 on four banks loads 414 KB in steps
    of one block, 385 KB in steps of two (50,388 cycles instead of 55,068, in chunks of 128
    rows). Smaller chunks start the array sooner and leave a shorter last chunk. Where a
    step's windows fit the A scratchpad whole, also with them :attr:`~fusion.kernels.conv.
    params.ConvGeometry.resident` (loaded once a step, not once a column chunk;
    Inception-v1's 3x3 of 160 to 320 channels at 2x2: 67,716 cycles instead of 99,006).
    Kept beside the kernel cache (:mod:`fusion.kernels.derived`)."""
    if config.acc_banks < 2 or "residual" in p.stages:
        return None
    return derived.remembered("conv_banked_plan", {"config": config, "params": p},
                              lambda: _banked_plan(config, p), _decode_banked)


def _decode_banked(value: object) -> tuple[int, int, int, bool] | None:
    if value is None:
        return None
    if (isinstance(value, list) and len(value) == 4 and all(type(v) is int and v >= 0
                                                            for v in value[:3])
            and value[0] > 0 and value[1] > 0 and type(value[3]) is bool):
        return value[0], value[1], value[2], value[3]
    raise ValueError(f"{value!r} is not a banked plan")


def _banked_plan(config: VariantConfig, p: ConvParams) -> list | None:
    from fusion.cost.analytical import estimate_program  # the cost model reads kernels


    def priced(geo: ConvGeometry, tn: int, part: int) -> tuple[int, int, int, int, bool] | None:
        looped = chunk_loop(geo, tn, part)
        if looped is None:
            return None
        cycles = estimate_program(config, _dummy_instrs(geo, tn, part, looped))
        return cycles, geo.bps, tn, part, geo.resident

    # each step size and way of loading the windows at one k chunk, then the other k
    # chunks for the two fastest of those (the step size and the windows' loads decide the
    # bytes, the k chunk a few per cent: a search of all of them doubled compile times)
    shapes: list[tuple[tuple[int, int, int, int, bool], list[int]]] = []
    for bps, resident in itertools.product(range(1, config.acc_banks + 1), (False, True)):
        geo = ConvGeometry(config, p, bps, resident)
        tn = min(geo.Nb, config.acc_banks // bps)
        if bps > geo.Mb or bias_windowed(geo, tn):
            continue
        top = config.spad_b_depth // 2 // tn
        if not resident:  # the windows, too, in k chunks, into half the A scratchpad
            top = min(top, config.spad_a_depth // 2 // bps)
        elif geo.deep:  # each block's first rows stay, the rest stream into two halves
            top = min(top, config.spad_a_depth // 4 // bps)  # after them (kept_rows)
        parts = list(dict.fromkeys(min(top >> shift, geo.Kp) // config.k_align
                                   * config.k_align for shift in range(4)))
        parts = [part for part in parts if part >= config.k_align]
        # and an even number of k chunks where the part gives an odd one: a looped column
        # chunk then ends in the half the next one does not start in (banked_body), and
        # loads that one's first operands while its own last matmuls run
        parts += [even for even in (_even_part(geo.Kp, part, config.k_align) for part in parts)
                  if even and even not in parts]
        # the second largest first: at the largest the array waits long for the first
        for n in sorted(range(len(parts)), key=lambda n: n != min(1, len(parts) - 1)):
            found = priced(geo, tn, parts[n])
            if found is not None:
                shapes.append((found, parts[:n] + parts[n + 1:]))
                break
    shapes.sort()
    best = shapes[0][0] if shapes else None
    for (_cycles, bps, tn, _part, resident), others in shapes[:2]:
        geo = ConvGeometry(config, p, bps, resident)
        for part in others:
            found = priced(geo, tn, part)
            if found is not None and found < best:
                best = found
    if best is None:
        return None
    plain = _plain_geometry(config, p)
    if (plain.a_half > config.spad_a_depth or column_chunk(plain, False) < 1
            or program_problem(plain, column_chunk(plain, False)) is not None):
        return list(best[1:])
    cycles = estimate_program(config, program(config, p, _DUMMY, step=plain.bps).instrs)
    return list(best[1:]) if best[0] < cycles else None


def _even_part(depth: int, part: int, align: int) -> int | None:
    """A k chunk (a multiple of ``align``) splitting ``depth`` rows into an even number of
    chunks, one more or one fewer than ``part``'s odd number (more than one); None where
    ``part``'s is even or none is."""
    n = ceil_div(depth, part)
    if n < 3 or n % 2 == 0:
        return None
    for m in (n + 1, n - 1):
        even = ceil_div(ceil_div(depth, m), align) * align
        if ceil_div(depth, even) == m:
            return even
    return None


def program_problem(geo: ConvGeometry, tn: int) -> str | None:
    """Why the program would not fit the instruction memory (None if it does), before any
    placement, unrolled or with its column chunks (of ``tn`` blocks, the widest, or narrower:
    :func:`plain_plan`) in a loop (:func:`chunk_loop`)."""
    if plain_plan(geo) is not None or b_prefetch(geo):
        return None
    length = len(_dummy_instrs(geo, tn))
    if "residual" in geo.params.stages or geo.Nb < 2 * tn:
        looped = ""
    elif bias_windowed(geo, tn):
        looped = (" (and its column chunks, each loading its own bias rows, cannot go in a "
                  "loop)")
    else:
        looped = (f" ({len(_dummy_instrs(geo, tn, 0, True))} with its column chunks in a "
                  f"loop, and no narrower chunks fit)")
    return (f"its program needs {length} instructions{looped}, more than the "
            f"{geo.config.imem_depth} of the instruction memory")


def geometry(config: VariantConfig, p: ConvParams) -> ConvGeometry:
    """``p`` on ``config``: in the steps of :func:`banked_plan` where that is its program;
    else in whole output rows, or steps of :func:`fastest_step` blocks when output rows are
    not whole blocks (a small step starts the array sooner, a large one waits for loads less
    often)."""
    banked = banked_plan(config, p)
    if banked is not None:
        return ConvGeometry(config, p, banked[0], banked[3])
    return _plain_geometry(config, p)


def _plain_geometry(config: VariantConfig, p: ConvParams) -> ConvGeometry:
    """:func:`geometry` without the accumulator banks."""
    whole = ConvGeometry(config, p).whole_rows
    return ConvGeometry(config, p, None if whole else fastest_step(config, p))


@functools.lru_cache(maxsize=256)
def fastest_step(config: VariantConfig, p: ConvParams) -> int:
    """The step size (blocks) of the fastest program, by the analytical model
    (:func:`fusion.cost.analytical.estimate_program`, at a dummy placement: addresses do not
    change the timing), among :attr:`ConvGeometry.step_choices` whose program fits the
    instruction memory and whose residual tiles fit the epilogue scratchpad; the smallest
    when none does (the kind then refuses it with the reason). Kept beside the kernel cache
    (:mod:`fusion.kernels.derived`)."""
    return derived.remembered("conv_fastest_step", {"config": config, "params": p},
                              lambda: _fastest_step(config, p), _decode_step)


def _decode_step(value: object) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{value!r} is not a step")
    return value


def _fastest_step(config: VariantConfig, p: ConvParams) -> int:
    from fusion.cost.analytical import estimate_program  # the cost model reads kernels

    best: tuple[int, int] | None = None
    residual = "residual" in p.stages
    for bps in ConvGeometry(config, p).step_choices:
        geo = ConvGeometry(config, p, bps)
        tn = column_chunk(geo, residual)
        if tn < 1 or program_problem(geo, tn) is not None:
            continue
        cycles = estimate_program(config, program(config, p, _DUMMY, step=bps).instrs)
        if best is None or cycles < best[0]:
            best = (cycles, bps)
    return 1 if best is None else best[1]
