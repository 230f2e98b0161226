"""A window convolution in k chunks over the accumulator banks (variants with ``acc_banks``):
the body :func:`fusion.kernels.conv.program.build_context` renders when
:func:`fusion.kernels.conv.program.banked_plan` finds it faster."""

from __future__ import annotations

from collections.abc import Mapping

from fusion.kernels.codegen import load_context
from fusion.kernels.conv.loops import LOOP_REGS, STEP_REGS, BiasRow, ChunkLoop, compress
from fusion.kernels.conv.params import ConvGeometry
from fusion.kernels.conv.windows import chunks, in_base, window_loads
from fusion.kernels.layout import Region, bias_group
from hwgen.isa import Dst, Unit
from hwgen.reference import output_dtype


def banked_body(geo: ConvGeometry, regions: Mapping[str, Region], tn: int,
                part: int, looped: bool = False) -> list[dict]:
    """The body of a window convolution in k chunks over the accumulator banks.

    Per column chunk of ``tn`` column blocks, per step, per k chunk of ``part`` window rows
    (the last shorter): the chunk's window rows of the step's ``G`` blocks and its weight
    rows of the chunk's column blocks load into one half of the A and B scratchpads while
    the chunk before computes from the other; then one matmul per block and column block,
    tile ``(j, n)`` summing in bank ``j * tn + n`` and draining after the last chunk. The
    next chunk's loads issue once the chunk before this one has read its halves (a counted
    WAIT with this chunk's first matmul queued behind it), so that neither the array nor
    the port waits for the other's instructions; a column chunk starts in the half after
    the one the chunk before it ended in (looped, every chunk starts in half 0: after an
    odd number of k chunks, once the chunk before has read it all). So a
    step's windows load once for ``tn`` column blocks, where without banks each column
    block whose weights fill the B scratchpad alone reloads them. No residual stage (the
    kind's eligibility, :func:`~fusion.kernels.conv.program.banked_plan`). ``looped``, the
    column chunks go in a hardware loop (:class:`~fusion.kernels.conv.loops.ChunkLoop`).
    With :attr:`~fusion.kernels.conv.params.ConvGeometry.resident` windows the order turns:
    per step, its blocks' windows load whole (block ``j``'s into A rows ``j * Kp`` on, once
    the step before has read its own), then per column chunk, per k chunk, only weights; a
    step deeper than the A scratchpad keeps each block's first k chunks (:meth:`~fusion.
    kernels.conv.params.ConvGeometry.kept_rows`) and loads the others with their weights,
    into two halves after them.
    """
    c, p = geo.config, geo.params
    R, Kp, Nb, G = geo.R, geo.Kp, geo.Nb, geo.bps  # noqa: N806
    x, out = regions["x"], regions["out"]
    dt = "i8" if output_dtype(p.stages).itemsize == 1 else "i32"
    out_tw = R * c.cols * (1 if dt == "i8" else 4) // c.port_bytes
    group, mask = bias_group(p.epilogue.per_channel), sum(c.stage_bit(s) for s in p.stages)
    a_half, b_half, b_words = c.spad_a_depth // 2, c.spad_b_depth // 2, c.cols // c.port_bytes
    row_words = geo.row_words  # r3 (the setup's)
    resident = geo.resident
    kparts = [(lo, min(lo + part, Kp)) for lo in range(0, Kp, part)]
    # resident rows of each block: all of them, or, a step deeper than the A scratchpad,
    # the first ``kept`` (whole k chunks), block j's from A row j * kept; the rest stream
    # chunk by chunk into two halves of ``part`` rows a block after them, as without
    # residency
    kept = geo.kept_rows(part)

    def kept_chunk(hi: int) -> bool:
        return resident and hi <= kept

    def out_base(t: int, nb0: int) -> int:
        return out.addr + (t * G * Nb + nb0) * out_tw

    def loads(t: int, q: int, half: int, nb0: int, tn_c: int, r14: int, r1: list) -> list:
        lo, hi = kparts[q]
        items = [{"kind": "load", **load_context(
            c, Dst.B, {"base": "r13", "off": ((0 if looped else nb0 * Kp) + lo) * b_words},
            half * b_half, tn_c,
            (hi - lo) * b_words, Kp * b_words, f"weights, rows {lo}..{hi - 1}")}]
        if kept_chunk(hi):  # the windows are in A already
            return items
        if tn_c > 1:  # the load's segment stride took r3, the window loads' row stride
            items.append({"kind": "li", "rd": "r3", "imm": row_words})
        r1[0] = None  # and r1
        for j in range(len(geo.step_blocks(t))):
            items += window_loads(geo, x, t * G + j, [(lo, hi)],
                                  lambda r, j=j: a_base(half, j) + r - lo, r14, r1)
        return items

    def a_base(half: int, j: int) -> int:
        """The A row of a streamed k chunk's first window row, block ``j`` of its step."""
        return G * kept + (half * G + j) * part if resident else half * a_half + j * part

    # resident and unrolled, each step's code is relative to r14 and r15 (set by the step's
    # windows: its input base and its first output tile), so that equal steps fold into a
    # loop (r11; the k chunks inside fold with r12)
    folded = resident and not looped

    def chunk(nb0: int, tn_c: int, ts: list[int], tag: str, h0: int = 0,
              before: int | None = None) -> list[dict]:
        """Column chunk ``nb0``'s items over steps ``ts`` (looped: relative to the chunk
        registers); ``tag`` tells its labels from another step's. Its k chunks alternate
        halves from half ``h0``; ``before``: the matmuls of the last k chunk of the column
        chunk before, which may still be queued when this one loads its first operands into
        the other half (0: it reads this one's first half too; None: nothing to wait for)."""
        seq = [(t, q) for t in ts for q in range(len(kparts))]
        bias_row = BiasRow(group, nb0, tn_c, looped)
        items: list[dict] = []
        if before is not None:
            items.append({"kind": "wait", "units": [Unit.FEED], "left": before,
                          "why": "the column chunk before has read this half"})
        items.append({"kind": "comment", "text": f"column blocks {nb0}..{nb0 + tn_c - 1}"
                      if not looped else f"a chunk of {tn_c} column blocks"})
        items += bias_row.start()
        r14, r15 = in_base(geo, x, ts[0]), out_base(ts[0], nb0)
        o15 = 0  # r15 holds out_base(ts[0], nb0) - o15
        if folded:  # the step's windows set r14 and r15 (its column chunk 0)
            o15 = r15 - out_base(ts[0], 0)
        else:
            items.append({"kind": "li", "rd": "r14", "imm": r14})
        if not looped and not folded:
            items.append({"kind": "li", "rd": "r15", "imm": r15})
        items += loads(ts[0], 0, h0, nb0, tn_c, r14, [None])
        steps: list[list[dict]] = []
        r1: list = [None]
        for n, (t, q) in enumerate(seq):
            half, (lo, hi) = (n + h0) % 2, kparts[q]
            last = q == len(kparts) - 1
            step = [] if q == 0 else steps.pop()  # a step's chunks are one unit (compress)
            if q == 0:
                r1 = [None]  # a unit may be a loop's body: r1 is unknown at its start
            jobs: list[list[dict]] = []
            for j in range(len(geo.step_blocks(t))):
                for nbl in range(tn_c):
                    a_row = j * kept + lo if kept_chunk(hi) else a_base(half, j)
                    job = [{"kind": "li", "rd": "r6", "imm": a_row},
                           {"kind": "li", "rd": "r7", "imm": half * b_half + nbl * (hi - lo)}]
                    if last:
                        job += [{"kind": "addi", "rd": "r8", "rs": "r15",
                                 "imm": o15 + (j * Nb + nbl) * out_tw},
                                *bias_row.set(nbl),
                                {"kind": "li", "rd": "r10", "imm": 0}]
                    job.append({"kind": "matmul", "k": hi - lo, "mask": f"{mask:#b}",
                                "dt": dt, "tr": p.kmajor_out, "last": int(last),
                                "bank": j * tn_c + nbl})
                    jobs.append(job)
            # the next chunk's operands go into the halves the chunk before read, once its
            # matmuls are done with them: with this chunk's first matmul queued behind them,
            # so that the array goes on from one chunk to the next, and before the others,
            # so that the port does not wait for their instructions (nor for the first
            # load's registers, set before the waits: the loads in flight have read theirs)
            after = []
            if n + 1 < len(seq):
                if last:  # the next step's loads are relative to its input base
                    d14 = in_base(geo, x, t + 1) - r14
                    after.append({"kind": "addi", "rd": "r14", "rs": "r14", "imm": d14})
                    r14 += d14
                first, *after_first = loads(*seq[n + 1], 1 - half, nb0, tn_c, r14, r1)
                step.append({**first, "kind": "load_regs"})
                after += [{"kind": "wait", "units": [Unit.FEED], "left": 1,
                           "why": "the chunk before has read its halves"},
                          {**first, "kind": "load_issue"}, *after_first]
            step += jobs[0][:-1]
            step += [{"kind": "wait", "units": [Unit.LOAD], "why": "this k chunk's operands"},
                     jobs[0][-1], *after]
            step += [it for job in jobs[1:] for it in job]
            if last and t != ts[-1]:
                d15 = out_base(t + 1, nb0) - r15
                step.append({"kind": "addi", "rd": "r15", "rs": "r15", "imm": d15})
                r15 += d15
            steps.append(step)
        items += compress(steps, f"conv_b{nb0}{tag}",
                          counters=STEP_REGS if looped or folded else LOOP_REGS)
        if looped:
            items += ChunkLoop.advance(tn_c * Kp * b_words, out_base(ts[0], nb0 + tn_c) - r15)
        return items

    def windows(t: int) -> list[dict]:
        """Resident, step ``t``'s windows, whole, once the step before has read its own
        (folded: r14 and r15 moved on from the step before's)."""
        r14 = in_base(geo, x, t)
        items = [{"kind": "wait", "units": [Unit.LOAD, Unit.FEED],
                  "why": "the step before has read its windows"}] if t else []
        items.append({"kind": "li", "rd": "r3", "imm": row_words})  # weight loads took it
        if not folded or not t:
            items.append({"kind": "li", "rd": "r14", "imm": r14})
        else:
            items.append({"kind": "addi", "rd": "r14", "rs": "r14",
                          "imm": r14 - in_base(geo, x, t - 1)})
        if folded:
            items.append({"kind": "li", "rd": "r15", "imm": out_base(t, 0)} if not t else
                         {"kind": "addi", "rd": "r15", "rs": "r15",
                          "imm": out_base(t, 0) - out_base(t - 1, 0)})
        for j in range(len(geo.step_blocks(t))):
            items += window_loads(geo, x, t * G + j, [(0, kept)],
                                  lambda r, j=j: j * kept + r, r14, [None])
        return items

    def unrolled(ts: list[int], tag: str) -> list[dict]:
        """The column chunks over steps ``ts``, unrolled: each starts in the half after the
        one the chunk before ended in, so that it loads its first operands while that
        chunk's last matmuls run."""
        items: list[dict] = []
        n_seq, prev = len(ts) * len(kparts), None
        for i, (nb0, tn_c) in enumerate(chunks(geo, tn)):
            items += chunk(nb0, tn_c, ts, tag, i * n_seq % 2, prev)
            prev = len(geo.step_blocks(ts[-1])) * tn_c
        return items

    if folded:
        units = []
        for t in range(geo.steps):
            units.append(windows(t) + [{"kind": "li", "rd": "r13", "imm": regions["b"].addr}]
                         + unrolled([t], ""))
        return compress(units, "conv_steps", counters=("r11",))
    body: list[dict] = []
    for ts in ([[t] for t in range(geo.steps)] if resident else [list(range(geo.steps))]):
        tag = f"_s{ts[0]}" if resident else ""
        if resident:
            body += windows(ts[0])
        if looped:
            # every chunk the same code: from half 0, so the chunk before, in an odd number
            # of k chunks, ended there too and must have read it all
            n_seq = len(ts) * len(kparts)
            before = 0 if n_seq % 2 else len(geo.step_blocks(ts[-1])) * tn
            body += ChunkLoop(Nb, tn, f"conv_chunks{tag}").items(
                regions["b"].addr, out_base(ts[0], 0), group,
                lambda nb0, tn_c, ts=ts, tag=tag, before=before: chunk(nb0, tn_c, ts, tag,
                                                                      0, before))
            continue
        body.append({"kind": "li", "rd": "r13", "imm": regions["b"].addr})
        body += unrolled(ts, tag)
    return body
