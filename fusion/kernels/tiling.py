"""Super-tile choice for the GEMM kernel: what fits the scratchpads, and the default tiler.

A super tile is ``tm`` x ``tn`` output tiles (row blocks x column blocks) over a k tile of
``kt`` reduction steps. Its operands take ``tm * kt`` rows of the A scratchpad and ``tn * kt``
rows of B; with double buffering each operand gets half of its scratchpad, so that the next
super tile can load into the other half. A fused residual takes ``tm * tn * rows`` rows of the
epilogue scratchpad per buffer, after the bias rows (with ``per_channel``, the bias groups of
per-channel requantize: three rows per column block, also without the bias stage). Bias rows
that do not all fit beside the residual tiles load in windows of column blocks
(:mod:`fusion.kernels.bias_window`), so a super tile needs only its own blocks' rows.

K chunking (``kt < Kp``) keeps the partial sums in the accumulators across matmuls, one
accumulator bank a tile (``acc_banks``, MATMUL ``bank``), so ``tm * tn`` is at most the
variant's banks: 1, one tile at a time, without banks.

A streamed GEMM (``stream`` = q, :mod:`fusion.kernels.gemm.stream`) has one row block: its A
stays in the A scratchpad, and B streams through a ring of ``q`` slots of ``Kp / q`` rows,
each column block's tile accumulated over ``q`` matmuls, with counted WAITs keeping ``q - 1``
chunks in flight, so the port never waits for the array: for GEMVs (a batch of one), which
are bound by streaming the weights.

A grouped GEMM (``dims.kgroup``) reduces each tile over its column block's own slice of K
(``Kp`` is that slice), so a super tile's column blocks lie in one group (``tn`` divides
``kblocks``, the column blocks a group), all reading the group's slice of A, and A is
reloaded whenever the super tile moves along n.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

# the bias windows' fit, re-exported: their home is fusion.kernels.bias_window
from fusion.kernels.bias_window import bias_blocks as bias_blocks
from fusion.kernels.bias_window import bias_problem
from fusion.kernels.codegen import FIELD_MAX
from fusion.kernels.layout import GemmDims, ceil_div
from hwgen.config import VariantConfig
from hwgen.isa import MAX_LEFT

ORDERS = ("mn", "nm")



@dataclass(frozen=True, kw_only=True)
class Tiling:
    """How a GEMM is cut into super tiles.

    Parameters
    ----------
    tm, tn : int
        Row and column blocks per super tile (clamped to ``Mb`` and ``Nb``).
    kt : int, optional
        Reduction steps per k tile, a multiple of ``config.k_align``; ``None`` (or anything
        at least ``Kp``) means the whole padded K.
    order : {"mn", "nm"}
        Loop order over super tiles (and over the tiles inside one): ``mn`` walks the column
        blocks innermost, so an A super tile stays resident; ``nm`` keeps B resident.
    double_buffer : bool
        Load the next super tile into the other scratchpad halves while this one computes.
    stream : int
        0: super tiles. q >= 2: stream B in ``q`` chunks a column block through a ring of
        ``q`` slots (one row block only; the other fields are then ``tm = tn = 1``, the whole
        K, ``mn``, no double buffering, as :func:`resolve` sets them).
    """

    tm: int = 1
    tn: int = 1
    kt: int | None = None
    order: str = "mn"
    double_buffer: bool = True
    stream: int = 0

    @classmethod
    def for_problem(
        cls,
        config: VariantConfig,
        M: int,  # noqa: N803
        K: int,  # noqa: N803
        N: int,  # noqa: N803
        *,
        tm: int | None = None,
        tn: int | None = None,
        kt: int | None = None,
        loop_order: str | None = None,
        double_buffer: bool | None = None,
        stages: tuple[str, ...] = (),
        per_channel: bool = False,
    ) -> Tiling:
        """The default tiling of an M x K x N GEMM with some choices fixed (None: choose)."""
        return default_tiling(GemmDims(config, M, K, N), tuple(stages), tm=tm, tn=tn, kt=kt,
                              order=loop_order, double_buffer=double_buffer,
                              per_channel=per_channel)

    def __post_init__(self) -> None:
        for name in ("tm", "tn"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.kt is not None and (not isinstance(self.kt, int) or self.kt < 1):
            raise ValueError(f"kt must be a positive integer or None, not {self.kt!r}")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}")
        if (not isinstance(self.stream, int) or isinstance(self.stream, bool)
                or self.stream < 0 or self.stream == 1):
            raise ValueError(f"stream must be 0 (super tiles) or a chunk count of at least 2, "
                             f"not {self.stream!r}")


def fit_problems(dims: GemmDims, stages: tuple[str, ...], tiling: Tiling, *,
                 per_channel: bool = False) -> list[str]:
    """Why ``tiling`` (already resolved) cannot run on the variant; empty if it can.

    ``per_channel``: the requantize is per channel, so the bias region holds three rows per
    column block and is loaded even without the bias stage.
    """
    if tiling.stream:
        return stream_problems(dims, stages, tiling.stream, per_channel=per_channel)
    cfg, kt, tm, tn = dims.config, tiling.kt or dims.Kp, tiling.tm, tiling.tn
    halves = 2 if tiling.double_buffer else 1
    where = "half of " if halves == 2 else ""
    problems = []
    if kt % cfg.k_align:
        problems.append(f"kt={kt} must be a multiple of k_align={cfg.k_align} "
                        f"(so that operand blocks are whole memory words)")
    if dims.grouped and dims.kblocks % tn:
        problems.append(f"a grouped GEMM (kgroup={dims.kgroup}) reads another slice of A per "
                        f"group, so a super tile's column blocks lie in one group: tn must "
                        f"divide its kblocks={dims.kblocks}, not tn={tn}")
    if kt < dims.Kp and tm * tn > cfg.acc_banks:
        problems.append(f"K chunking (kt={kt} < Kp={dims.Kp}) keeps each tile's sums in an "
                        f"accumulator bank: tm={tm} x tn={tn} tiles need {tm * tn}, the "
                        f"variant has {cfg.acc_banks} (hwgen generate --acc-banks)")
    for name, t, depth in (("A", tm, cfg.spad_a_depth), ("B", tn, cfg.spad_b_depth)):
        have = depth // halves
        if t * kt > have:
            problems.append(
                f"the {name} super tile needs {t * kt} scratchpad rows ({t} blocks x kt={kt}) "
                f"but {where}the {name} scratchpad has {have}; use a smaller "
                f"{'tm' if name == 'A' else 'tn'} or kt"
                + (", or no double buffering" if halves == 2 else "")
            )
    problem = bias_problem(dims, stages, tiling, per_channel)
    if problem:
        problems.append(problem)
    lengths = (kt, kt * dims.R // dims.W, kt * dims.C // dims.W, tn * dims.tile_words(1))
    if max(lengths) > FIELD_MAX:
        problems.append(f"kt={kt} (or tn={tn}) makes a matmul k or load len exceed the "
                        f"16-bit field ({FIELD_MAX}); use a smaller kt or tn")
    return problems


def stream_problems(dims: GemmDims, stages: tuple[str, ...], q: int, *,
                    per_channel: bool = False) -> list[str]:
    """Why a GEMM cannot stream its B in ``q`` chunks a column block; empty if it can."""
    cfg = dims.config
    problems = []
    if dims.Mb != 1:
        problems.append(f"a streamed GEMM keeps one row block of A resident, and M={dims.M} "
                        f"is {dims.Mb} row blocks")
    if dims.grouped:
        problems.append("a grouped GEMM reads another slice of A per column block; it does "
                        "not stream")
    if q - 1 > MAX_LEFT:
        problems.append(f"stream={q} keeps {q - 1} loads in flight; a counted WAIT counts "
                        f"at most {MAX_LEFT}")
    kc = dims.Kp // q
    if dims.Kp % q or kc % cfg.k_align:
        problems.append(f"stream={q} does not cut Kp={dims.Kp} into {q} equal chunks, each "
                        f"a multiple of k_align={cfg.k_align}")
    for name, depth in (("A", cfg.spad_a_depth), ("B", cfg.spad_b_depth)):
        if dims.Kp > depth:
            problems.append(f"a streamed GEMM holds Kp={dims.Kp} rows in the {name} "
                            f"scratchpad, which has {depth}")
    # (a streamed GEMM's bias windows do not depend on its chunk count)
    problem = bias_problem(dims, stages, Tiling(stream=2), per_channel)
    if problem:
        problems.append(problem)
    if max(dims.Kp, dims.Kp * dims.R // dims.W) > FIELD_MAX:
        problems.append(f"Kp={dims.Kp} makes the A load's len exceed the 16-bit field "
                        f"({FIELD_MAX})")
    return problems


def stream_tilings(dims: GemmDims, stages: tuple[str, ...], *,
                   per_channel: bool = False) -> list[Tiling]:
    """The streamed tilings that fit (:data:`STREAM_CHUNKS`), for the cost model to price."""
    return [t for t in (resolve_stream(dims, q) for q in STREAM_CHUNKS)
            if not fit_problems(dims, stages, t, per_channel=per_channel)]


#: Chunk counts a streamed GEMM is priced with: 2 is double buffering by chunks (the port
#: waits for each load's latency), 3 and more keep loads in flight.
STREAM_CHUNKS = (2, 3, 4, 8)


def resolve_stream(dims: GemmDims, q: int) -> Tiling:
    """The streamed tiling of ``q`` chunks in its normal form (every other field fixed)."""
    return Tiling(tm=1, tn=1, kt=dims.Kp, order="mn", double_buffer=False, stream=q)


def _clamp(dims: GemmDims, tiling: Tiling) -> Tiling:
    if tiling.stream:
        return resolve_stream(dims, tiling.stream)
    kt = dims.Kp if tiling.kt is None else min(tiling.kt, dims.Kp)
    return replace(tiling, tm=min(tiling.tm, dims.Mb), tn=min(tiling.tn, dims.Nb), kt=kt)


def tiling_problem(dims: GemmDims, stages: tuple[str, ...], tiling: Tiling | None = None, *,
                   per_channel: bool = False) -> str | None:
    """Why ``tiling`` (clamped to the problem) cannot run, or, without one, why no tiling can:
    the text :func:`resolve` and :func:`default_tiling` raise; None when it (or one) fits.

    Without a tiling, the most modest candidate's problems name what is short.
    """
    given = tiling is not None
    if tiling is None:
        if next(iter(ranked_tilings(dims, stages, per_channel=per_channel)), None) is not None:
            return None
        tiling = _modest(dims)
    resolved = _clamp(dims, tiling)
    problems = fit_problems(dims, stages, resolved, per_channel=per_channel)
    if not problems:
        if given:
            return None
        raise AssertionError("unreachable: the most modest tiling fits but was not ranked")
    return f"tiling {resolved} does not fit: " + "; ".join(problems)


def resolve(dims: GemmDims, stages: tuple[str, ...], tiling: Tiling, *,
            per_channel: bool = False) -> Tiling:
    """Clamp ``tiling`` to the problem and check that it fits, or raise ``ValueError``
    (``per_channel`` as for :func:`fit_problems`)."""
    resolved = _clamp(dims, tiling)
    problems = fit_problems(dims, stages, resolved, per_channel=per_channel)
    if problems:
        raise ValueError(f"tiling {resolved} does not fit: " + "; ".join(problems))
    return resolved


def traffic(dims: GemmDims, tiling: Tiling) -> int:
    """Operand bytes loaded by the kernel, counting the blocks that stay resident."""
    a_bytes, b_bytes = dims.Mb * dims.a_Kp * dims.R, dims.Nb * dims.Kp * dims.C
    gm, gn = ceil_div(dims.Mb, tiling.tm), ceil_div(dims.Nb, tiling.tn)
    if dims.grouped:  # each (m, n) super tile reads its group's A slice once
        resident_b = tiling.order == "nm" and (tiling.kt or dims.Kp) >= dims.Kp
        return dims.Mb * dims.Kp * dims.R * gn + b_bytes * (1 if resident_b else gm)
    if (tiling.kt or dims.Kp) < dims.Kp:  # k chunks change every step: nothing stays resident
        return a_bytes * gn + b_bytes * gm
    if tiling.order == "mn":
        return a_bytes + b_bytes * (gm if gn > 1 else 1)
    return b_bytes + a_bytes * (gn if gm > 1 else 1)


#: Cycles between two super tiles: the sequencer's handshake (wait, register moves, the next
#: loads and grid set-up) and the array's refill. Measured on an 8x8 variant: 10 to 12.
STEP_CYCLES = 12


def estimated_cycles(dims: GemmDims, tiling: Tiling) -> int:
    """A rough cycle count of the kernel for ``tiling`` (resolved), to rank tilings by.

    Every k step of every tile takes a cycle; so does every super tile's hand-off
    (:data:`STEP_CYCLES`) and the first super tile's loads, which nothing overlaps. Double
    buffered, a super tile takes the longer of its matmuls and the next one's loads (one word
    a cycle); single buffered, they add up. Ragged edges are counted as whole super tiles.
    """
    R, C, W = dims.R, dims.C, dims.W
    kt = tiling.kt or dims.Kp
    counts = {"m": ceil_div(dims.Mb, tiling.tm), "n": ceil_div(dims.Nb, tiling.tn),
              "k": ceil_div(dims.Kp, kt)}
    steps = counts["m"] * counts["n"] * counts["k"]
    words = {"m": tiling.tm * kt * R // W, "n": tiling.tn * kt * C // W}
    fixed = dims.Mb * dims.Nb * dims.Kp + steps * STEP_CYCLES + words["m"] + words["n"]
    if not tiling.double_buffer:
        return fixed + traffic(dims, tiling) // W - words["m"] - words["n"]
    # (super tiles, words they load for the next one), by which operands change
    outer, inner = ("m", "n") if tiling.order == "mn" else ("n", "m")
    # grouped, A moves with n too: a step of n loads both operands
    step_words = {"m": words["m"], "n": words["n"] + (words["m"] if dims.grouped else 0)}
    if counts["k"] > 1:
        loads = [(steps - 1, words["m"] + words["n"])]
    elif counts[inner] == 1:
        loads = [(counts[outer] - 1, step_words[outer])]
    else:
        loads = [(counts[outer] * (counts[inner] - 1), step_words[inner]),
                 (counts[outer] - 1, words["m"] + words["n"])]
    compute = tiling.tm * tiling.tn * kt
    return fixed + sum(n * max(0, w - compute) for n, w in loads)


def _best_order(dims: GemmDims, tiling: Tiling) -> Tiling:
    nm = replace(tiling, order="nm")
    key = (estimated_cycles(dims, nm), traffic(dims, nm))
    return nm if key < (estimated_cycles(dims, tiling), traffic(dims, tiling)) else tiling


def _ranked(dims: GemmDims, stages: tuple[str, ...], double: bool, kts: list[int],
            tm: int | None, tn: int | None, order: str | None,
            per_channel: bool = False) -> list[Tiling]:
    """Fitting tilings with a k tile of ``kts``, honouring the fixed choices, best first."""
    cfg, halves, found = dims.config, 2 if double else 1, []
    for kt in kts:
        # chunked, a super tile's tiles each keep their sums in a bank
        banks = cfg.acc_banks if kt < dims.Kp else dims.Mb * dims.Nb
        tms = [tm] if tm else range(1, min(dims.Mb, banks, cfg.spad_a_depth // halves // kt) + 1)
        most = min(dims.Nb, banks, cfg.spad_b_depth // halves // kt)
        if tn:
            tns = [tn]
        elif dims.grouped:  # the column blocks of a super tile lie in one group
            tns = [t for t in range(1, min(most, dims.kblocks) + 1) if dims.kblocks % t == 0]
        else:
            tns = range(1, most + 1)
        found += _candidates(dims, stages, double, kt, tms, tns, order, per_channel)
    found.sort(key=lambda item: item[0], reverse=True)
    return [cand for _, cand in found]


def _candidates(dims: GemmDims, stages: tuple[str, ...], double: bool, kt: int, tms, tns,
                order: str | None, per_channel: bool) -> list[tuple[tuple, Tiling]]:
    """``(rank key, tiling)`` of every fitting combination of ``tms`` and ``tns``."""
    found = []
    for tm_ in tms:
        for tn_ in tns:
            cand = Tiling(tm=min(tm_, dims.Mb), tn=min(tn_, dims.Nb), kt=kt,
                          order=order or "mn", double_buffer=double)
            cand = cand if order else _best_order(dims, cand)
            if fit_problems(dims, stages, cand, per_channel=per_channel):
                continue
            divides = dims.Mb % cand.tm == 0 and dims.Nb % cand.tn == 0  # a shorter program
            key = (-estimated_cycles(dims, cand), divides, -traffic(dims, cand),
                   cand.tm * cand.tn)
            found.append((key, cand))
    return found


def supertiles(dims: GemmDims, tiling: Tiling) -> int:
    """Super tiles (steps, counting k tiles) the kernel runs for ``tiling``."""
    kt = tiling.kt or dims.Kp
    return (ceil_div(dims.Mb, tiling.tm) * ceil_div(dims.Nb, tiling.tn)
            * ceil_div(dims.Kp, kt))


def loop_shape(dims: GemmDims, tiling: Tiling) -> tuple:
    """What the size of the kernel's program depends on, for a resolved ``tiling``.

    The super tiles run in hardware loops (:mod:`fusion.gemm_loops`), so the program does not
    grow with their number, only with the loop levels (dimensions with one, two, three or
    more super tiles: short loops are unrolled), the ragged edges, the matmul grids of one
    row or column, the loop order and double buffering. Two tilings of the same shape give
    programs of (nearly) the same size.
    """
    kt = tiling.kt or dims.Kp
    shape = []
    for n, t in ((dims.Mb, tiling.tm), (dims.Nb, tiling.tn), (dims.Kp, kt)):
        count, last = ceil_div(n, t), n - (ceil_div(n, t) - 1) * t
        shape.append((min(count, 4), last != t, t == 1, last == 1))
    return (tiling.double_buffer, tiling.order, tiling.stream, *shape)


def _chunk_kts(dims: GemmDims, double: bool) -> list[int]:
    """The k tiles a chunked GEMM is ranked with: the largest each super tile shape that
    the accumulator banks allow fits (:func:`_largest_kt`), below ``Kp``."""
    banks = dims.config.acc_banks
    kts = {_largest_kt(dims, double, tm, tn) for tm in range(1, banks + 1)
           for tn in range(1, banks // tm + 1)}
    return sorted(kt for kt in kts if 0 < kt < dims.Kp)


def _largest_kt(dims: GemmDims, double: bool, tm: int = 1, tn: int = 1) -> int:
    """The largest k tile a ``tm x tn`` super tile allows, evened out over the k chunks."""
    cfg, halves, align = dims.config, 2 if double else 1, dims.config.k_align
    limit = min(cfg.spad_a_depth // halves // tm, cfg.spad_b_depth // halves // tn, FIELD_MAX,
                FIELD_MAX * dims.W // max(dims.R, dims.C))
    kt = limit // align * align
    if kt < align:
        return 0
    chunks = ceil_div(dims.Kp, kt)
    return ceil_div(ceil_div(dims.Kp, chunks), align) * align


def ranked_tilings(
    dims: GemmDims,
    stages: tuple[str, ...] = (),
    *,
    tm: int | None = None,
    tn: int | None = None,
    kt: int | None = None,
    order: str | None = None,
    double_buffer: bool | None = None,
    per_channel: bool = False,
) -> Iterator[Tiling]:
    """Every fitting tiling that keeps the given choices, best first (:func:`default_tiling`).

    Raises
    ------
    ValueError
        For a choice no tiling can keep (``tm``, ``tn`` or ``kt`` below 1, an unknown order).
    """
    _check_choices(tm=tm, tn=tn, kt=kt, order=order)
    doubles = (True, False) if double_buffer is None else (bool(double_buffer),)
    for double in doubles:
        if kt is None or kt >= dims.Kp:
            yield from _ranked(dims, stages, double, [dims.Kp], tm, tn, order, per_channel)
        chunks = _chunk_kts(dims, double) if kt is None else [kt] if kt < dims.Kp else []
        if chunks:
            yield from _ranked(dims, stages, double, chunks, tm, tn, order, per_channel)


def default_tiling(
    dims: GemmDims,
    stages: tuple[str, ...] = (),
    *,
    tm: int | None = None,
    tn: int | None = None,
    kt: int | None = None,
    order: str | None = None,
    double_buffer: bool | None = None,
    per_channel: bool = False,
) -> Tiling:
    """The largest super tile that fits, double buffered if possible.

    Any of ``tm``, ``tn``, ``kt``, ``order``, ``double_buffer`` given is kept; the others are
    chosen, preferring in order: double buffering; the whole K in one k tile; the fewest
    :func:`estimated_cycles` (which also picks the loop order); ``tm``, ``tn`` that divide
    ``Mb``, ``Nb`` (no ragged edge to peel: a shorter program); the least operand traffic.
    The program does not grow with the number of super tiles (:mod:`fusion.gemm_loops`).
    ``per_channel``: the requantize is per channel (see :func:`fit_problems`).

    Raises
    ------
    ValueError
        For a choice no tiling can keep (``tm``, ``tn`` or ``kt`` below 1, an unknown order:
        it is refused, never replaced), or if nothing fits, naming what the most modest
        candidate with the given choices needs and what is available.
    """
    fixed = {"tm": tm, "tn": tn, "kt": kt, "order": order, "double_buffer": double_buffer}
    for tiling in ranked_tilings(dims, stages, **fixed, per_channel=per_channel):
        return tiling
    modest = _modest(dims, tm=tm, tn=tn, kt=kt, order=order, double_buffer=double_buffer)
    resolve(dims, stages, modest, per_channel=per_channel)  # raises, naming the problems
    raise AssertionError("unreachable: the most modest tiling fits but was not found")


def _check_choices(**choices: int | str | None) -> None:
    """Refuse a given choice that no tiling can keep (a falsy 0 used to mean "choose")."""
    for name in ("tm", "tn", "kt"):
        value = choices[name]
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
    if choices["order"] is not None and choices["order"] not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {choices['order']!r}")


def _modest(dims: GemmDims, *, tm: int | None = None, tn: int | None = None,
            kt: int | None = None, order: str | None = None,
            double_buffer: bool | None = None) -> Tiling:
    """The least demanding tiling with the given choices: what is short when it fails is
    what no tiling can do without. A super tile of more tiles than accumulator banks takes
    the whole K (K chunking needs a bank a tile), so its problem is the scratchpad it does
    not fit."""
    several = (tm or 1) * (tn or 1) > dims.config.acc_banks
    return Tiling(tm=tm or 1, tn=tn or 1, kt=kt or (dims.Kp if several else dims.config.k_align),
                  order=order or "mn", double_buffer=bool(double_buffer))
