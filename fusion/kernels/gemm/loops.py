"""The GEMM kernel's super-tile loops: the context of ``gemm.j2``.

Super tiles are visited by a nest of hardware loops with one level per dimension that has
more than one super tile: row groups ``m``, column groups ``n`` and, when ``kt < Kp``, k chunks
``k`` (innermost); ``order`` puts ``m`` or ``n`` outermost. Every address the kernel needs is
linear in the loop indices, ragged edges included (only the extents of the last super tile of
a level differ), so registers hold the values of the current super tile and move by a constant
when the next one starts. That constant depends only on the level that increments there (the
*carry*), which the code of a super tile knows, because that code depends on it anyway:
double buffered, super tile t loads the operands of t+1; single buffered, it loads them
after its matmuls.

So the code of a super tile is fixed by its extents and by the carry and extents of the next
one. Within a level of n iterations, iterations 0..n-3 agree on those, n-2 differs only when
the last iteration is ragged (or is the last k chunk), and n-1 ends with the enclosing
level's carry. A level is therefore a loop over its first iterations and peeled copies of the
last one or two: the program size depends on the loop levels and ragged edges, never on the
number of super tiles.

A grouped GEMM (``dims.kgroup``: column block ``j`` reads only its own ``Kp`` slice of A,
:mod:`fusion.kernels.layout`) has super tiles of column blocks of one group (``tn`` divides
``kblocks``), which all read the slice of the super tile's first block (the layout repeats a
group's slice for each of its blocks); A's address then moves along ``n`` too (by ``tn``
slices), so A is reloaded whenever ``n`` steps, exactly as any quantity whose address moves;
its row blocks are ``a_Kp`` apart.

Registers, besides those of ``common.j2`` (r3 load stride, r11 and r12 the grid counters):

- r6, r7, r10: the scratchpad rows of the current super tile's A, B and residual;
- r8, r9: the output address and bias row of its first tile (per-channel requantize: the
  first row of its bias group, three rows per column block);
- r11 also a scratch register outside the grids (swapping halves, residual addresses);
- from a pool: the A and B addresses of the blocks loaded last, the other halves of a double
  buffer (swapped with r6, r7, r10 when the next super tile's blocks land there) and one
  counter per loop level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fusion.kernels.codegen import FIELD_MAX, check_load, grid_reg
from fusion.kernels.epilogue import DT_BYTES, bias_load, csr_writes
from fusion.kernels.layout import GemmDims, Region, bias_group, ceil_div
from fusion.kernels.tiling import Tiling
from hwgen.isa import Dst
from hwgen.reference import EpilogueParams

DIMS = ("m", "n", "k")
#: Registers free for the loops: everything but r0, r3, the matmul operands r6..r10 and the
#: grid counters r11, r12 (r12 joins when no grid loops: every grid one tile, or unrolled).
POOL = ("r15", "r14", "r13", "r5", "r4", "r2", "r1")
TEMP = "r11"



class _Nest:
    """Builds the loop nest of one GEMM kernel (see the module docstring)."""

    def __init__(self, dims: GemmDims, tiling: Tiling, stages: tuple[str, ...],
                 regions: Mapping[str, Region], out: Region, out_dt: str,
                 per_channel: bool = False, transposed: bool = False,
                 pitch: int | None = None, a_pitch: int | None = None) -> None:
        cfg, R, C, W = dims.config, dims.R, dims.C, dims.W
        #: Output (and residual) tiles per block row: ``Nb``, or the whole tensor's when this
        #: nest is one bias window's column slice (:mod:`fusion.kernels.bias_window`).
        self.pitch = dims.Nb if pitch is None else pitch
        #: A's rows per row block: ``a_Kp``, or the whole grouped GEMM's in a window.
        self.a_kp = dims.a_Kp if a_pitch is None else a_pitch
        self.dims, self.tiling, self.cfg = dims, tiling, cfg
        self.double = tiling.double_buffer
        # r9 (the bias row) is used when the bias stage reads the bias, and when per-channel
        # requantize reads its multipliers and shifts from the rows after it.
        self.has_bias = "bias" in stages or (per_channel and "requant" in stages)
        self.has_res = "residual" in stages
        if self.has_bias and "bias" not in regions:
            raise ValueError("the kernel reads a bias region (the bias stage, or per-channel "
                             "requantize's multipliers and shifts) but none was given")
        self.mask = sum(cfg.stage_bit(s) for s in stages)
        self.out_dt, self.out_tw = out_dt, dims.tile_words(DT_BYTES[out_dt])
        self.transposed = transposed
        self.res_tw = dims.tile_words(1)
        kt = tiling.kt or dims.Kp
        self.size = {"m": (dims.Mb, tiling.tm), "n": (dims.Nb, tiling.tn), "k": (dims.Kp, kt)}
        self.count = {d: ceil_div(n, t) for d, (n, t) in self.size.items()}
        order = ("m", "n", "k") if tiling.order == "mn" else ("n", "m", "k")
        self.levels = [d for d in order if self.count[d] > 1]
        #: Epilogue scratchpad rows of bias (and the like) per column block: the one place the
        #: bias-row step is set (3 with per-channel requantize: bias, multipliers, shifts).
        self.bias_step = bias_group(per_channel)
        # Words (or rows) each quantity moves per step of each index.
        kp, nb, tm, tn = dims.Kp, self.pitch, tiling.tm, tiling.tn
        if dims.grouped and dims.kblocks % tn:
            raise ValueError(f"a grouped GEMM's super tile holds column blocks of one group: "
                             f"tn={tn} does not divide kblocks={dims.kblocks}")
        self.coef = {
            "m": {"a": tm * self.a_kp * R // W, "b": 0, "out": tm * nb * self.out_tw,
                  "bias": 0},
            # grouped, the next column block reads the next Kp slice of A
            "n": {"a": tn * kp * R // W if dims.grouped else 0, "b": tn * kp * C // W,
                  "out": tn * self.out_tw, "bias": tn * self.bias_step},
            "k": {"a": kt * R // W, "b": kt * C // W, "out": 0, "bias": 0},
        }
        self.res_off = (regions["residual"].addr - out.addr) if self.has_res else 0
        halves = 2 if self.double else 1
        self.half = {"a": cfg.spad_a_depth // halves, "b": cfg.spad_b_depth // halves,
                     "res": tm * tn * R}
        self.e_res = dims.bias_region_rows(per_channel) if self.has_bias else 0
        # r12 counts a grid's inner loop; no grid loops when every one is a single tile, or
        # chunked, when a grid of several tiles is unrolled (one bank a tile)
        pool = list(POOL) + (["r12"] if (tm, tn) == (1, 1) or self.count["k"] > 1 else [])
        names = ["ax", "bx"] + (["an", "bn"] if self.double else []) + (
            ["rn"] if self.double and self.has_res else [])
        names += [f"count_{d}" for d in self.levels]
        if len(names) > len(pool):  # cannot happen: three levels have no looped grid
            raise AssertionError(f"the GEMM loops need {len(names)} registers, {len(pool)} free")
        self.reg = dict(zip(names, pool, strict=False))
        self.cur = {"a": "r6", "b": "r7", "res": "r10"}
        self.other = {"a": self.reg.get("an"), "b": self.reg.get("bn"),
                      "res": self.reg.get("rn")}

    # -- geometry ---------------------------------------------------------------------------

    def extents(self, cls: Mapping[str, bool]) -> tuple[int, int, int, bool]:
        """``(tme, tne, kte, last)`` of a super tile; ``cls[d]``: it is the last along d."""
        ext = []
        for d in DIMS:
            n, t = self.size[d]
            ext.append(n - (self.count[d] - 1) * t if cls[d] else t)
        return ext[0], ext[1], ext[2], cls["k"]

    def delta(self, q: str, carry: str) -> int:
        """How far quantity ``q`` moves when level ``carry`` increments (deeper ones reset)."""
        deeper = self.levels[self.levels.index(carry) + 1:]
        return self.coef[carry][q] - sum((self.count[d] - 1) * self.coef[d][q] for d in deeper)

    # -- code of one super tile -------------------------------------------------------------

    def _load(self, dst: Dst, ext: str, set_ext: dict | None, spad: str, count: int,
              length: int, stride: int, what: str) -> dict[str, Any]:
        check_load(self.cfg, count, length, dst)
        if count > FIELD_MAX or length > FIELD_MAX:
            raise ValueError(f"load of {count} segment(s) of {length} words exceeds the 16-bit "
                             f"count/len fields ({FIELD_MAX}); use smaller tiles")
        return {"dst": dst.name.lower(), "ext": ext, "set_ext": set_ext, "spad": spad,
                "count": count, "len": length, "stride": stride, "what": what}

    def operand_loads(self, cls: Mapping[str, bool], which: tuple[str, ...],
                      adv: Mapping[str, int], res_from_r8: int | None) -> list[dict]:
        """Loads of a super tile's blocks into the halves it will read (see :meth:`step`)."""
        d, W = self.dims, self.dims.W
        tme, tne, kte, _ = self.extents(cls)
        spad = self.other if self.double else self.cur
        loads = []
        for q in which:
            ext = self.reg[f"{q}x"]
            set_ext = {"rs": ext, "imm": adv[q]} if adv.get(q) else None
            if q == "a":
                loads.append(self._load(Dst.A, ext, set_ext, spad[q], tme, kte * d.R // W,
                                        self.a_kp * d.R // W, f"A: {tme} blocks, k {kte}"))
            else:
                loads.append(self._load(Dst.B, ext, set_ext, spad[q], tne, kte * d.C // W,
                                        d.Kp * d.C // W, f"B: {tne} blocks, k {kte}"))
        if res_from_r8 is not None:
            loads.append(self._load(Dst.E8, TEMP, {"rs": "r8", "imm": res_from_r8},
                                    spad["res"], tme, tne * self.res_tw, self.pitch * self.res_tw,
                                    f"residual: {tme} x {tne} tiles"))
        return loads

    def grid(self, tme: int, tne: int, kte: int, last: bool) -> tuple[dict, dict[str, int]]:
        """The matmul grid of a super tile, and how far it moves each operand register."""
        d, mn = self.dims, self.tiling.order == "mn"
        n_outer, n_inner = (tme, tne) if mn else (tne, tme)
        # operand -> (register, step per row block, step per column block)
        steps = {"a": ("r6", kte, 0), "b": ("r7", 0, kte),
                 "out": ("r8", self.pitch * self.out_tw, self.out_tw),
                 "bias": ("r9", 0, self.bias_step),
                 "res": ("r10", tne * d.R, d.R)}
        used = {"a", "b"} | ({"out"} | ({"bias"} if self.has_bias else set())
                             | ({"res"} if self.has_res else set()) if last else set())
        regs, ops, moved = [], {}, {}
        for name, (reg, step_i, step_j) in steps.items():
            if name not in used:
                ops[name] = "r0"  # no such stage, or not the last k chunk
                continue
            outer, inner = (step_i, step_j) if mn else (step_j, step_i)
            g = grid_reg(reg, 0, inner, outer, n_inner, n_outer, keep=True)
            ops[name] = reg
            regs.append(g)
            moved[reg] = n_outer * (n_inner * g["inner"] + g["adjust"])
        # chunked, a super tile's tiles each sum in their own accumulator bank, numbered in
        # grid order (the same in every k chunk of the super tile)
        banked = self.count["k"] > 1 and tme * tne > 1
        if banked and tme * tne > self.cfg.acc_banks:  # fit_problems refuses such tilings
            raise ValueError(f"a chunked super tile of {tme} x {tne} tiles needs as many "
                             f"accumulator banks; the variant has {self.cfg.acc_banks}")
        return ({"n_outer": n_outer, "n_inner": n_inner, "regs": regs, "ops": ops, "k": kte,
                 "mask": f"{self.mask:#b}", "dt": self.out_dt, "last": int(last),
                 "tr": int(last and self.transposed), "banked": banked}, moved)

    def step(self, cls: Mapping[str, bool], exit_: tuple[str, dict] | None) -> dict[str, Any]:
        """The code of a super tile of class ``cls`` followed by ``exit_`` (carry, its class).

        Double buffered, it first loads the next super tile's blocks into the other halves;
        single buffered, it loads them into its own once its matmuls have read their operands.
        Either way the registers then move to the next super tile (halves swapped where the
        next one's blocks landed), ready for its code.
        """
        tme, tne, kte, last = self.extents(cls)
        grid, moved = self.grid(tme, tne, kte, last)
        what = f"super tile of {tme} x {tne} blocks, k {kte}"
        if last and self.count["k"] > 1:
            what += " (the last k chunk)"
        loads, after = [], []
        if exit_ is not None:
            carry, nxt = exit_
            move = {q: self.delta(q, carry) for q in ("a", "b", "out", "bias")}
            which = tuple(q for q in ("a", "b") if move[q])
            res = self.has_res and nxt["k"]
            for reg, q in (("r8", "out"), ("r9", "bias")):
                if q == "out" or self.has_bias:
                    after += self._addi(reg, reg, move[q] - moved.get(reg, 0))
            for q in ("a", "b", "res"):
                back = -moved.get(self.cur[q], 0)
                if self.double and (q in which or (q == "res" and res)):
                    after += [(TEMP, self.cur[q], back), (self.cur[q], self.other[q], 0),
                              (self.other[q], TEMP, 0)]
                elif q != "res" or self.has_res:
                    after += self._addi(self.cur[q], self.cur[q], back)
            # Double buffered the loads come before the grid: r8 still holds this tile's
            # output address; single buffered, it already moved to the next one's.
            res_from = (self.res_off + (move["out"] if self.double else 0)) if res else None
            loads = self.operand_loads(nxt, which, move, res_from)
            what += f"; then the next along {carry}"
        else:
            what += "; the last"
        return {"kind": "step", "what": what, "final": exit_ is None, "loads": loads,
                "grid": grid, "after": [{"rd": rd, "rs": rs, "imm": imm} for rd, rs, imm in after]}

    @staticmethod
    def _addi(rd: str, rs: str, imm: int) -> list[tuple[str, str, int]]:
        return [(rd, rs, imm)] if imm or rd != rs else []

    # -- the nest ---------------------------------------------------------------------------

    def level(self, depth: int, cls: dict[str, bool], exit_: tuple[str, dict] | None) -> list:
        """The code of every iteration of loop level ``depth`` (see the module docstring)."""
        if depth == len(self.levels):
            return [self.step(cls, exit_)]
        name, n = self.levels[depth], self.count[self.levels[depth]]
        reset = {d: False for d in self.levels[depth + 1:]}

        def iteration(own_last: bool, next_last: bool) -> list:
            nxt = {**cls, name: next_last, **reset}
            return self.level(depth + 1, {**cls, name: own_last}, (name, nxt))

        nodes, before_last = [], iteration(False, True)
        if n >= 3:
            body = iteration(False, False)
            if body == before_last:  # the last iteration is not ragged: one loop
                nodes += self.loop(depth, n - 1, body)
            else:
                nodes += self.loop(depth, n - 2, body) + before_last
        else:
            nodes += before_last
        return nodes + self.level(depth + 1, {**cls, name: True}, exit_)

    def loop(self, depth: int, count: int, body: list) -> list:
        if count == 1:
            return body
        return [{"kind": "loop", "counter": self.reg[f"count_{self.levels[depth]}"],
                 "count": count, "body": body}]

    def first_class(self) -> dict[str, bool]:
        return {d: self.count[d] == 1 for d in DIMS}

    def setup(self, regions: Mapping[str, Region], out: Region) -> list[tuple[str, int]]:
        values = [(self.reg["ax"], regions["a"].addr), (self.reg["bx"], regions["b"].addr),
                  ("r8", out.addr), ("r6", 0), ("r7", 0)]
        if self.double:
            values += [(self.reg["an"], self.half["a"]), (self.reg["bn"], self.half["b"])]
        if self.has_bias:
            values.append(("r9", 0))
        if self.has_res:
            values.append(("r10", self.e_res))
            if self.double:
                values.append((self.reg["rn"], self.e_res + self.half["res"]))
        return values


def _label(nodes: list, prefix: str, counter: list[int]) -> list:
    """The nest with a unique label on every loop and super tile (for their grids)."""
    out = []
    for node in nodes:
        label = f"{prefix}_{'l' if node['kind'] == 'loop' else 's'}{counter[0]}"
        counter[0] += 1
        if node["kind"] == "loop":
            node = {**node, "body": _label(node["body"], prefix, counter)}
        out.append({**node, "label": label})
    return out


def gemm_context(dims: GemmDims, tiling: Tiling, stages: tuple[str, ...],
                 regions: Mapping[str, Region], *, params: EpilogueParams, out: Region,
                 out_dt: str,
                 prefix: str = "gemm", halt: bool = True,
                 transposed: bool = False, pitch: int | None = None,
                 a_pitch: int | None = None) -> dict[str, Any]:
    """The context of ``gemm.j2``: prologue, first loads and the loop nest of super tiles.

    Parameters
    ----------
    dims : GemmDims
        The padded problem.
    tiling : Tiling
        Resolved super tiles (:func:`fusion.kernels.tiling.resolve`).
    stages : tuple of str
        The fused epilogue stages (empty: store int32 for separate passes).
    regions : mapping
        Memory regions ``a``, ``b`` (and ``bias``, ``residual`` when those stages run; ``bias``
        holds per-channel groups, :func:`fusion.kernels.layout.pack_bias_group`, and is needed by
        the
        ``requant`` stage too, when ``params.per_channel``).
    params : EpilogueParams
        Requantize, clamp and residual values for the CSR writes; ``per_channel`` sets the
        bias region's layout.
    out : Region
        Where the output tiles go; ``out_dt`` (``"i8"`` or ``"i32"``) is their type.
    prefix : str
        Label prefix, unique within the program.
    halt : bool
        End with ``wait 7; halt`` (else the program continues, e.g. with epilogue passes).
    transposed : bool
        Store the output tiles transposed (MATMUL ``tr``: the ``kmajor`` layout of
        :mod:`fusion.kernels.layout`).
    pitch : int, optional
        Output and residual tiles per block row, when not ``dims.Nb``: the nest is one bias
        window's column slice of a wider output (:mod:`fusion.kernels.bias_window`);
        ``a_pitch`` likewise A's rows per row block, when not ``dims.a_Kp`` (grouped).

    Returns
    -------
    dict
        ``supertiles`` is a list of nodes: ``{"kind": "loop", "counter", "count", "body"}`` or
        ``{"kind": "step", "final", "loads", "grid", "after"}``, each with a ``label``.
    """
    nest = _Nest(dims, tiling, stages, regions, out, out_dt, params.per_channel, transposed,
                 pitch, a_pitch)
    first = nest.first_class()
    res_first = nest.res_off if nest.has_res and first["k"] else None
    # The first super tile's blocks go to the halves it reads: r6, r7, r10.
    prologue = nest.operand_loads(first, ("a", "b"), {}, res_first)
    if nest.double:
        for load, q in zip(prologue, ("a", "b", "res"), strict=False):
            load["spad"] = nest.cur[q]
    body = _label(nest.level(0, first, None), prefix, [0])
    counts = " x ".join(f"{d} {nest.count[d]}" for d in nest.levels) or "one"
    return {"prefix": prefix, "halt": halt, "setup": nest.setup(regions, out),
            "csrs": csr_writes(stages, params),
            "bias_load": (bias_load(dims, regions["bias"], params.per_channel)
                          if nest.has_bias else None),
            "tm": tiling.tm, "tn": tiling.tn, "kt": nest.size["k"][1], "order": tiling.order,
            "double_buffer": nest.double, "loops": counts, "prologue_loads": prologue,
            "supertiles": body, "refill": False, "window": None}
