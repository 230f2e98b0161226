"""The program of a window convolution: the context ``conv.j2`` renders (which schedule, and
its column chunk, :mod:`fusion.kernels.conv.program` chooses).

The output's blocks of ``R`` pixels go in *steps* (:class:`~fusion.kernels.conv.params.
ConvGeometry`): an output row's blocks, or, when output rows are not whole blocks, a few
consecutive blocks. Per column chunk (the ``tn`` column blocks whose weights fit the B
scratchpad): load the chunk's weights, the first step's windows and residual tiles, then
per step ``t``:

1. with the residual stage, once the epilogue has drained step ``t - 1`` (``wait EPI``), the
   residual tiles of step ``t + 1`` into the epilogue half step ``t - 1`` used;
2. per block ``j`` of the step: its matmuls (one per column block of the chunk, over all
   ``Kp`` rows of the block's windows), then the window loads of block ``j`` of step
   ``t + 1`` into the other A half (per kernel position, one LOADW per output row the block
   spans: ``Cin`` rows, lane ``r`` at input pixel ``(ix0 + r*sx)``, padding lanes filled
   with the zero point by the first, the later ones merging their lanes in with ``keep``),
   so that the loads of the next step run while this step's matmuls do;
3. the step bases move on (``r14`` input, ``r15`` output), and ``wait LOAD+FEED``: the next
   step's operands are in, and this step's matmuls have read theirs.

When a step's windows fit the A scratchpad but not half of it (a 3x3 convolution of 128
channels is 1,152 rows a block), the step is single buffered (:attr:`~fusion.kernels.conv.
params.ConvGeometry.single_buffered`): its matmuls, then ``wait FEED`` (they have read their
windows), then the next step's window loads into the same rows. Where the rows the windows
leave free allow (:attr:`~fusion.kernels.conv.params.ConvGeometry.split_rows`: 896 of those
1,152 in a 2,048-row scratchpad), a block's window rows are split in two parts: the first
part is double buffered (two halves) and loads while the step before computes, as in a
double-buffered step, and only the second, in rows every step shares, loads after the
``wait FEED``; each tile is then two matmuls, the first accumulating (``last`` = 0).

With ``prefetch`` (:func:`~fusion.kernels.conv.program.b_prefetch`), the chunks are half as
wide and each, once its first step's windows are in, loads the next chunk's weights into
the B half it does not read, so the weights stream while the array computes; with one
step, every chunk reuses the windows the first loaded.

The bias rows (with per-channel requantize, three a column block) load once, before the
first chunk; where they do not fit the epilogue scratchpad (:func:`bias_windowed`), each
chunk loads its own to row 0 once the chunk before has drained.

Every address is relative to the step bases, so steps with the same padding pattern have
the same code: consecutive repeats (a period of up to 8 steps, the halves alternating)
become a hardware loop, and repeats of those (the images of a batch) an outer loop
(:func:`compress`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fusion.kernels.codegen import load_context
from fusion.kernels.conv.banked import banked_body
from fusion.kernels.conv.loops import LOOP_REGS, STEP_REGS, BiasRow, ChunkLoop, compress
from fusion.kernels.conv.params import ConvGeometry
from fusion.kernels.conv.windows import chunks, in_base, window_loads
from fusion.kernels.epilogue import bias_load, csr_writes, reads_bias_region
from fusion.kernels.layout import GemmDims, Region, bias_group
from hwgen.isa import Dst, Unit
from hwgen.reference import output_dtype


def column_chunk(geo: ConvGeometry, residual: bool) -> int:
    """Column blocks per chunk: as many as the B scratchpad holds, and (with a residual) as
    the epilogue scratchpad's two halves of residual tiles allow beside the bias rows (all of
    them, or where they do not fit, the chunk's: :func:`bias_windowed`); 0 when none fits."""
    c = geo.config
    tn = min(geo.Nb, c.spad_b_depth // geo.Kp)
    if residual:
        per_block = 2 * geo.bps * geo.R
        whole = _bias_rows(geo)
        if c.spad_e_depth - whole >= per_block:
            tn = min(tn, (c.spad_e_depth - whole) // per_block)
        else:
            tn = min(tn, c.spad_e_depth // (per_block + _group_rows(geo)))
    return max(tn, 0)


def _bias_rows(geo: ConvGeometry) -> int:
    """Epilogue rows of the whole bias region (0 when the stages read none)."""
    p = geo.params
    if not reads_bias_region(p.stages, p.epilogue):
        return 0
    return _dims(geo).bias_region_rows(p.epilogue.per_channel)


def _group_rows(geo: ConvGeometry) -> int:
    """Epilogue rows of one column block's bias (its group), 0 when the stages read none."""
    p = geo.params
    return bias_group(p.epilogue.per_channel) if reads_bias_region(p.stages, p.epilogue) else 0


def bias_windowed(geo: ConvGeometry, tn: int) -> bool:
    """Whether each column chunk of ``tn`` blocks loads its own bias rows (to epilogue row 0,
    after the chunk before has drained) because the whole bias region, with the residual
    halves, does not fit the epilogue scratchpad: per-channel requantize takes three rows a
    column block, so 1,024 channels on eight columns are 384 rows of 256 (a GEMM loads such
    rows in windows of column blocks, :mod:`fusion.kernels.bias_window`; here a window is a
    chunk). Unrolled programs
    only (a looped chunk's bias load would need a register of its own). A chunk's rows start
    on a memory word: window loads need ``port_bytes == cols``, and a row is ``4 * cols``
    bytes."""
    c = geo.config
    res = 2 * geo.bps * geo.R * tn if "residual" in geo.params.stages else 0
    return _bias_rows(geo) + res > c.spad_e_depth


def _dims(geo: ConvGeometry) -> GemmDims:
    return GemmDims(geo.config, geo.params.M, geo.params.K, geo.params.Cout)


def build_context(geo: ConvGeometry, regions: Mapping[str, Region], tn: int,
                  part: int = 0, looped: bool = False,
                  prefetch: bool = False) -> dict[str, Any]:
    """The context of ``conv.j2`` for the placed ``regions`` (see the module docstring); with
    ``part`` > 0, in k chunks of ``part`` rows over the accumulator banks, ``tn`` column
    blocks a chunk (:func:`banked_body`); ``looped``, the column chunks in a hardware loop
    (:class:`~fusion.kernels.conv.loops.ChunkLoop`; no residual stage); ``prefetch``, each
    chunk's weights load into the B half the chunk before does not read, while it computes
    (:func:`~fusion.kernels.conv.program.b_prefetch`; unrolled, no residual stage)."""
    c, p = geo.config, geo.params
    R, Kp, Nb, T, G = geo.R, geo.Kp, geo.Nb, geo.steps, geo.bps  # noqa: N806
    x, out = regions["x"], regions["out"]
    residual = "residual" in p.stages
    dt = "i8" if output_dtype(p.stages).itemsize == 1 else "i32"
    out_tw = R * c.cols * (1 if dt == "i8" else 4) // c.port_bytes
    res_tw = R * c.cols // c.port_bytes
    group = bias_group(p.epilogue.per_channel)
    windowed = bias_windowed(geo, tn)
    if windowed and (looped or part):
        raise ValueError("a chunk loads its own bias rows only in an unrolled program "
                         "(fusion.kernels.conv.context.bias_windowed)")
    e_base = tn * group if windowed else _bias_rows(geo)
    mask_bits = sum(c.stage_bit(s) for s in p.stages)

    def out_base(s: int, nb0: int) -> int:
        return out.addr + (s * G * Nb + nb0) * out_tw

    split = geo.split_rows  # the window rows of a block that load while the step before runs

    def spad_row(half: int, j: int, r: int) -> int:
        """The A row of window row ``r`` of block ``j`` of a step in ``half``: the step's
        blocks one after the other; split, rows below ``split`` in the half's part and the
        rest in the part after both halves, which every step shares."""
        if not split:
            return half * geo.a_half + j * Kp + r
        if r < split:
            return (half * G + j) * split + r
        return 2 * G * split + j * (Kp - split) + r - split

    def loads_of_block(s: int, j: int, half: int, r14: int, r1: list, lo: int = 0,
                       hi: int = Kp) -> list[dict]:
        """The block's window loads of rows ``lo <= r < hi`` (a LOADW across a bound is cut
        in two) into ``half``."""
        # the two parts' rows lie apart: a load never writes across the split
        bounds = [(lo, min(hi, split)), (max(lo, split), hi)] if split else [(lo, hi)]
        return window_loads(geo, x, s * G + j, bounds, lambda r: spad_row(half, j, r), r14, r1)

    def matmuls(half: int, j: int, nbl: int, tn_c: int, rhalf: int,
                bias_row: BiasRow, b_row: int) -> list[dict]:
        """Block ``j``'s matmul for column block ``nbl``: over all ``Kp`` window rows, or
        split, over the two parts (the first accumulates, the second ends the tile); the
        chunk's weights from B row ``b_row``."""
        parts = [(0, Kp)] if not split else [(0, split), (split, Kp)]
        items = []
        for lo, hi in parts:
            last = hi == Kp
            items += [{"kind": "li", "rd": "r6", "imm": spad_row(half, j, lo)},
                      {"kind": "li", "rd": "r7", "imm": b_row + nbl * Kp + lo}]
            if last:
                items += [
                    {"kind": "addi", "rd": "r8", "rs": "r15", "imm": (j * Nb + nbl) * out_tw},
                    *bias_row.set(nbl),
                    {"kind": "li", "rd": "r10",
                     "imm": e_base + rhalf * G * tn * R + (j * tn_c + nbl) * R
                     if residual else 0}]
            items.append({"kind": "matmul", "k": hi - lo, "mask": f"{mask_bits:#b}", "dt": dt,
                          "tr": p.kmajor_out, "last": int(last)})
        return items

    def residual_loads(s: int, half: int, nb0: int, tn_c: int, r15: int) -> list[dict]:
        items = []
        for j, b in enumerate(geo.step_blocks(s)):
            ext = regions["residual"].addr + (b * Nb + nb0) * res_tw
            items.append({"kind": "load", **load_context(
                c, Dst.E8, {"base": "r15", "off": ext - r15},
                e_base + half * G * tn * R + j * tn_c * R, 1, tn_c * res_tw, 0,
                f"residual tiles of block {j}")})
        return items

    def load_b(nb0: int, tn_c: int, row: int, what: str) -> dict:
        """The weights of column blocks ``nb0 ..`` into B from ``row`` on."""
        return {"kind": "load", **load_context(
            c, Dst.B, regions["b"].addr + nb0 * Kp * c.cols // c.port_bytes, row, 1,
            tn_c * Kp * c.cols // c.port_bytes, 0, f"weights of {what}")}

    def chunk(nb0: int, tn_c: int) -> list[dict]:
        """Column chunk ``nb0``'s items; looped, relative to the chunk registers (r13 its
        weights, r15 its first output tile, r9 its bias rows: :class:`ChunkLoop`);
        prefetching, its weights are in (the chunk before loaded them), in the B half of its
        parity, and it loads the next chunk's into the other half."""
        what = (f"column blocks {nb0}..{nb0 + tn_c - 1}" if not looped
                else f"a chunk of {tn_c} column blocks")
        # windowed, r9 counts from the chunk's own bias rows at row 0
        bias_row = BiasRow(group, 0 if windowed else nb0, tn_c, looped)
        items: list[dict] = []
        if nb0 or looped:
            items.append({"kind": "wait", "units": [Unit.LOAD, Unit.FEED, Unit.EPI],
                          "why": "the last chunk is done with B and the epilogue halves"
                                 + (" and bias rows" if windowed else "")})
        items.append({"kind": "comment", "text": what})
        items += bias_row.start()
        if windowed:
            e_words = group * c.e_row_bytes // c.port_bytes  # a column block's bias rows
            items.append({"kind": "load", **load_context(
                c, Dst.E32, regions["bias"].addr + nb0 * e_words, 0, 1, tn_c * e_words, 0,
                f"bias rows of {what}")})
        b_row = (nb0 // tn) % 2 * tn * Kp if prefetch else 0
        if looped:
            items.append({"kind": "load", **load_context(
                c, Dst.B, {"base": "r13", "off": 0}, 0, 1, tn_c * Kp * c.cols // c.port_bytes, 0,
                f"weights of {what}")})
        elif not (prefetch and nb0):
            items.append(load_b(nb0, tn_c, 0, what))
        r14, r15 = in_base(geo, x, 0), out_base(0, nb0)
        items.append({"kind": "li", "rd": "r14", "imm": r14})
        if not looped:
            items.append({"kind": "li", "rd": "r15", "imm": r15})
        if residual:
            items += residual_loads(0, 0, nb0, tn_c, r15)
        r1: list = [None]
        # prefetching with one step, the windows of the chunk before are this chunk's: the
        # only writes to A are that step's loads
        if not (prefetch and nb0 and T == 1):
            for j in range(len(geo.step_blocks(0))):
                items += loads_of_block(0, j, 0, r14, r1)
            items.append({"kind": "wait", "units": [Unit.LOAD],
                          "why": "the first step's operands"})
        elif windowed:
            items.append({"kind": "wait", "units": [Unit.LOAD], "why": "the chunk's bias rows"})
        if prefetch and nb0 + tn_c < Nb:
            nxt0 = nb0 + tn_c
            items.append(load_b(nxt0, min(tn, Nb - nxt0), tn * Kp - b_row,
                                f"column blocks {nxt0}..{min(nxt0 + tn, Nb) - 1}, next"))
        steps = []
        single = geo.single_buffered
        for t in range(T):
            # split, the parts below ``split`` alternate halves like double-buffered steps
            half, nxt = (0 if single and not split else t % 2), t + 1 < T
            other = 0 if single and not split else 1 - half
            rhalf = t % 2  # the residual tiles' epilogue half alternates either way
            step: list[dict] = []
            r1 = [None]  # a step may be a loop's body: r1 is unknown at its start
            if residual and nxt:
                step.append({"kind": "wait", "units": [Unit.EPI],
                             "why": "the residual half of the step before is drained"})
                step += residual_loads(t + 1, 1 - rhalf, nb0, tn_c, r15)
            following = len(geo.step_blocks(t + 1)) if nxt else 0
            for j in range(len(geo.step_blocks(t))):
                for nbl in range(tn_c):
                    step += matmuls(half, j, nbl, tn_c, rhalf, bias_row, b_row)
                if j < following and (split or not single):
                    step += loads_of_block(t + 1, j, other, r14, r1, hi=split or Kp)
            if single and following:
                step.append({"kind": "wait", "units": [Unit.FEED],
                             "why": "this step's matmuls have read the windows the next "
                                    "step's loads overwrite"})
                for j in range(following):
                    step += loads_of_block(t + 1, j, other, r14, r1, lo=split)
            if nxt:
                d14, d15 = in_base(geo, x, t + 1) - r14, out_base(t + 1, nb0) - r15
                step += [{"kind": "addi", "rd": "r14", "rs": "r14", "imm": d14},
                         {"kind": "addi", "rd": "r15", "rs": "r15", "imm": d15},
                         {"kind": "wait", "units": [Unit.LOAD, Unit.FEED],
                          "why": "next step's operands in; this step's matmuls have read theirs"}]
                r14, r15 = r14 + d14, r15 + d15
            steps.append(step)
        items += compress(steps, f"conv_c{nb0}", counters=STEP_REGS if looped else LOOP_REGS)
        if looped:
            items += ChunkLoop.advance(tn_c * Kp * c.cols // c.port_bytes,
                                       out_base(0, nb0 + tn_c) - r15)
        return items

    if part:
        body = banked_body(geo, regions, tn, part, looped)
    elif looped:
        body = ChunkLoop(Nb, tn).items(regions["b"].addr, out_base(0, 0), group, chunk)
    else:
        body = [it for nb0, tn_c in chunks(geo, tn) for it in chunk(nb0, tn_c)]
    return {
        "what": (f"window convolution {p.N}x{p.Cin}x{p.H}x{p.W} -> {p.Cout} channels, "
                 f"{p.kh}x{p.kw} stride {p.stride} pads {p.pads}; {T} steps of "
                 f"{G} blocks, {len(chunks(geo, tn))} column chunk(s) of {tn}"
                 + (f", k chunks of {part} rows in accumulator banks" if part else "")
                 + (", the column chunks in a loop" if looped else "")
                 + (", each chunk's weights loading while the chunk before computes"
                    if prefetch else "")),
        # r3: rows one word apart (channels), or with one channel a row class apart
        "setup": [("r3", geo.row_words), ("r4", geo.cp),
                  ("r5", p.fill & 0xFF)],
        "csrs": csr_writes(p.stages, p.epilogue),
        "bias_load": (bias_load(_dims(geo), regions["bias"], p.epilogue.per_channel)
                      if reads_bias_region(p.stages, p.epilogue) and not windowed else None),
        "body": body,
    }
