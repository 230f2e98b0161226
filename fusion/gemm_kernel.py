"""Build a GEMM kernel: memory image, microcode, expected result and cost figures.

Fused, one ``gemm.j2`` program drains every tile through the epilogue stages straight to the
output. Unfused, the GEMM stores int32 tiles (mask 0) into an intermediate, then one
``epilogue_pass.j2`` pass per stage, in chain order, ping-pongs between two intermediates and
the last writes the same output region in the same layout. An intermediate is stored as int8
only where that is exact (:func:`fusion.epilogue_pass.pass_dtypes`), so the results are
identical. Memory layouts are those of :mod:`fusion.layout`; super tiles those of
:mod:`fusion.tiling`. Without an explicit tiling, the best-ranked tiling whose program fits
the instruction memory is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion import layout
from fusion.codegen import (
    ProgramTooLong,
    assemble_program,
    grid_reg,
    load_bytes,
    load_context,
    render,
    roll_steps,
)
from fusion.epilogue_pass import DT_BYTES, bias_load, csr_writes, pass_context, pass_dtypes
from fusion.layout import GemmDims, Region
from fusion.tiling import Tiling, default_tiling, ranked_tilings, resolve, supertiles
from hwgen.config import VariantConfig
from hwgen.isa import Dst
from hwgen.reference import EpilogueParams, check_stages, gemm_epilogue, output_dtype


@dataclass(frozen=True, eq=False)
class GemmKernel:
    """One GEMM kernel, ready to run on a variant.

    Attributes
    ----------
    program : list of int
        The microcode words.
    memory : list of (int, bytes)
        ``(word address, bytes)`` to write into external memory before the run.
    reads : dict
        ``name -> (word address, nbytes)`` of the regions to read back (``"out"``).
    expected : ndarray
        The reference result, M x N, int8 or int32.
    ideal_cycles : int
        A lower bound: ``max(array k-steps + epipass rows, words loaded, words stored)``,
        i.e. every unit at full rate with perfect overlap and no latency.
    bytes_loaded : int
        Bytes the program's loads read (to check the ``bytes_read`` counter against).
    tiling : Tiling
        The super tiles used (resolved).
    """

    config: VariantConfig
    dims: GemmDims
    stages: tuple[str, ...]
    fused: bool
    tiling: Tiling
    params: EpilogueParams
    program: list[int]
    source: str
    memory: list[tuple[int, bytes]]
    regions: dict[str, Region]
    reads: dict[str, tuple[int, int]]
    expected: np.ndarray
    ideal_cycles: int
    bytes_loaded: int
    bytes_stored: int

    @property
    def out_dtype(self) -> np.dtype:
        return output_dtype(self.stages)

    def decode(self, outputs: Mapping[str, Any] | bytes | np.ndarray) -> np.ndarray:
        """The M x N result from the regions read back at :attr:`reads`.

        ``outputs`` maps ``"out"`` to its bytes (bytes, bytearray or a uint8 array), or is
        those bytes itself.
        """
        data = outputs["out"] if isinstance(outputs, Mapping) else outputs
        if not isinstance(data, bytes | bytearray | memoryview):
            data = np.asarray(data, np.uint8).tobytes()
        return layout.unpack_tiles(self.dims, bytes(data), self.out_dtype)


def _dt(dtype: np.dtype) -> str:
    return "i8" if dtype == np.int8 else "i32"


def _grid(dims: GemmDims, order: str, tme: int, tne: int, kte: int, *, regs: dict[str, int],
          out_tw: int, last: bool, mask: int, dt: str) -> dict[str, Any]:
    """The matmul grid of one super tile; ``regs`` holds the first tile's operand values."""
    n_outer, n_inner = (tme, tne) if order == "mn" else (tne, tme)
    # operand -> (register, step per row block ii, step per column block jj)
    steps = {"a": ("r6", kte, 0), "b": ("r7", 0, kte), "out": ("r8", dims.Nb * out_tw, out_tw),
             "bias": ("r9", 0, 1), "res": ("r10", tne * dims.R, dims.R)}
    grid_regs, ops = [], {}
    for name, (reg, step_i, step_j) in steps.items():
        if name not in regs:
            ops[name] = "r0"  # unused by this matmul (no such stage, or not the last k tile)
            continue
        outer, inner = (step_i, step_j) if order == "mn" else (step_j, step_i)
        if n_outer == n_inner == 1:  # one matmul: operands of equal value share a register
            same = next((r for r in grid_regs if r["init"] == regs[name]), None)
            if same is not None:
                ops[name] = same["reg"]
                continue
        ops[name] = reg
        grid_regs.append(grid_reg(reg, regs[name], inner, outer, n_inner, n_outer))
    return {"n_outer": n_outer, "n_inner": n_inner, "regs": grid_regs, "ops": ops, "k": kte,
            "mask": f"{mask:#b}", "dt": dt, "last": int(last)}


def gemm_context(dims: GemmDims, tiling: Tiling, stages: tuple[str, ...],
                 params: EpilogueParams, regions: Mapping[str, Region], *, out: Region,
                 out_dt: str, prefix: str = "gemm", halt: bool = True) -> dict[str, Any]:
    """The context of ``gemm.j2``: loads and matmul grids of every super tile, in order.

    ``regions`` holds ``a`` and ``b`` (and ``bias``, ``residual`` when those stages run);
    ``tiling`` must be resolved (:func:`fusion.tiling.resolve`).
    """
    cfg, R, C, W = dims.config, dims.R, dims.C, dims.W
    tm, tn, kt, Kp = tiling.tm, tiling.tn, tiling.kt or dims.Kp, dims.Kp
    halves = 2 if tiling.double_buffer else 1
    half_a, half_b = cfg.spad_a_depth // halves, cfg.spad_b_depth // halves
    has_bias, has_res = "bias" in stages, "residual" in stages
    e_res, res_rows = (dims.bias_rows if has_bias else 0), tm * tn * R
    mask = sum(cfg.stage_bit(s) for s in stages)
    out_tw, res_tw = dims.tile_words(DT_BYTES[out_dt]), dims.tile_words(1)
    groups_m = [(i0, min(tm, dims.Mb - i0)) for i0 in range(0, dims.Mb, tm)]
    groups_n = [(j0, min(tn, dims.Nb - j0)) for j0 in range(0, dims.Nb, tn)]
    kchunks = [(k0, min(kt, Kp - k0)) for k0 in range(0, Kp, kt)]
    if tiling.order == "mn":
        tiles = [(gm, gn) for gm in groups_m for gn in groups_n]
    else:
        tiles = [(gm, gn) for gn in groups_n for gm in groups_m]
    # A block (or k tile) still resident from the previous super tile is not loaded again;
    # a new one goes to the other half, which the previous super tile is not reading.
    resident = {"a": None, "b": None}
    half = {"a": halves - 1, "b": halves - 1, "res": halves - 1}
    steps = []
    for (i0, tme), (j0, tne) in tiles:
        for k0, kte in kchunks:
            last = k0 + kte == Kp
            loads = []
            key_a, key_b = (i0, tme, k0, kte), (j0, tne, k0, kte)
            if key_a != resident["a"]:
                resident["a"], half["a"] = key_a, (half["a"] + 1) % halves
                loads.append(load_context(
                    cfg, Dst.A, regions["a"].addr + (i0 * Kp + k0) * R // W, half["a"] * half_a,
                    tme, kte * R // W, Kp * R // W,
                    f"A blocks {i0}..{i0 + tme - 1}, k {k0}..{k0 + kte - 1}"))
            if key_b != resident["b"]:
                resident["b"], half["b"] = key_b, (half["b"] + 1) % halves
                loads.append(load_context(
                    cfg, Dst.B, regions["b"].addr + (j0 * Kp + k0) * C // W, half["b"] * half_b,
                    tne, kte * C // W, Kp * C // W,
                    f"B blocks {j0}..{j0 + tne - 1}, k {k0}..{k0 + kte - 1}"))
            res_load = None
            regs = {"a": half["a"] * half_a, "b": half["b"] * half_b}
            if last:
                regs.update(out=out.addr + (i0 * dims.Nb + j0) * out_tw)
                if has_bias:
                    regs.update(bias=j0)
                if has_res:
                    half["res"] = (half["res"] + 1) % halves
                    regs.update(res=e_res + half["res"] * res_rows)
                    res_load = load_context(
                        cfg, Dst.E8, regions["residual"].addr + (i0 * dims.Nb + j0) * res_tw,
                        regs["res"], tme, tne * res_tw, dims.Nb * res_tw,
                        f"residual tiles ({i0}..{i0 + tme - 1}) x ({j0}..{j0 + tne - 1})")
            grid = _grid(dims, tiling.order, tme, tne, kte, regs=regs, out_tw=out_tw, last=last,
                         mask=mask, dt=out_dt)
            what = (f"row blocks {i0}..{i0 + tme - 1} x column blocks {j0}..{j0 + tne - 1}, "
                    f"k {k0}..{k0 + kte - 1}")
            steps.append({"what": what, "loads": loads, "res_load": res_load, "grid": grid})
    prologue_loads: list[dict[str, Any]] = []
    if tiling.double_buffer:  # each step issues the next one's loads; the first are hoisted
        for n, step in enumerate(steps):
            nxt = steps[n + 1] if n + 1 < len(steps) else {"loads": [], "res_load": None}
            if n == 0:
                prologue_loads = step["loads"] + ([step["res_load"]] if step["res_load"] else [])
            step["loads"], step["res_load"] = nxt["loads"], nxt["res_load"]
    seen_res = False
    for step in steps:  # single buffered: wait for the previous residual's readers
        step["res_wait"] = seen_res and not tiling.double_buffer
        seen_res = seen_res or step["res_load"] is not None
    for n, step in enumerate(steps):  # one counting label per super tile, for the comments
        step["what"] = f"{n}: {step['what']}"
    items = roll_steps(steps, halves, ("r4", "r5", "r13", "r14"))
    return {"prefix": prefix, "halt": halt, "setup": [], "csrs": csr_writes(stages, params),
            "bias_load": bias_load(dims, regions["bias"]) if has_bias else None,
            "tm": tm, "tn": tn, "kt": kt, "order": tiling.order,
            "double_buffer": tiling.double_buffer, "prologue_loads": prologue_loads,
            "items": items}


def _arrays(dims: GemmDims, stages: tuple[str, ...], a: np.ndarray, b: np.ndarray,
            bias: np.ndarray | None, residual: np.ndarray | None) -> dict[str, bytes]:
    for name, value in (("bias", bias), ("residual", residual)):
        if value is None and name in stages:
            raise ValueError(f"the {name} stage needs a {name} operand "
                             f"(stages: {', '.join(stages)})")
    data = {"a": layout.pack_a(dims, a), "b": layout.pack_b(dims, b)}
    if "bias" in stages:  # an operand no stage uses is ignored, so callers can share problems
        data["bias"] = layout.pack_bias(dims, bias)
    if "residual" in stages:
        data["residual"] = layout.pack_tiles(dims, residual, np.int8)
    return data


def build_gemm(
    config: VariantConfig,
    M: int,  # noqa: N803 - the GEMM's customary names
    K: int,  # noqa: N803
    N: int,  # noqa: N803
    *,
    stages: Sequence[str] = (),
    fused: bool = True,
    tiling: Tiling | None = None,
    params: EpilogueParams | None = None,
    a: np.ndarray,
    b: np.ndarray,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
) -> GemmKernel:
    """Build ``epilogue(a @ b)`` as a kernel for ``config``.

    Parameters
    ----------
    config : VariantConfig
        The variant to run on.
    M, K, N : int
        The GEMM shape: ``a`` is M x K int8, ``b`` K x N int8.
    stages : sequence of str
        Epilogue stages to apply: an ordered subset of ``config.epilogue``.
    fused : bool
        Fuse the stages into the GEMM's drain, or run them as separate passes.
    tiling : Tiling, optional
        Super tiles; the default is :func:`fusion.tiling.default_tiling`.
    params : EpilogueParams, optional
        Requantize and clamp CSR values (identity defaults).
    bias : ndarray, optional
        N int32 values; needed when ``"bias"`` is a stage, ignored otherwise.
    residual : ndarray, optional
        M x N int8 values; needed when ``"residual"`` is a stage, ignored otherwise.

    Returns
    -------
    GemmKernel

    Raises
    ------
    ValueError
        A stage not in the variant's chain or out of order; a missing operand;
        a tiling that does not fit the scratchpads (naming rows needed and available); a
        problem too large for the memory; a program longer than the instruction memory.
    """
    stages = check_stages(stages, config.epilogue)
    params = params if params is not None else EpilogueParams()
    dims = GemmDims(config, M, K, N)
    data = _arrays(dims, stages, a, b, bias, residual)
    gemm_stages = stages if fused else ()
    final_dt = _dt(output_dtype(stages))
    alloc = layout.Allocator(config)
    for name, blob in data.items():
        alloc.alloc(name, len(blob))
    tiles = dims.Mb * dims.Nb
    out = alloc.alloc("out", tiles * dims.tile_bytes(DT_BYTES[final_dt]))
    bufs = [] if fused or not stages else [
        alloc.alloc(f"tmp{n}", tiles * dims.tile_bytes(4)) for n in range(2)]
    # The passes do not depend on the tiling: render them once.
    passes, stored, src, src_dt = [], tiles * dims.tile_bytes(4), None, "i32"
    if bufs:
        src = bufs[0]
        for n, (stage, dt) in enumerate(zip(stages, pass_dtypes(stages, params, final_dt),
                                            strict=True)):
            dst = out if n == len(stages) - 1 else bufs[(n + 1) % 2]
            passes.append(render("epilogue_pass.j2", **pass_context(
                dims, stages=(stage,), params=params, src=src, src_dt=src_dt, out=dst,
                out_dt=dt, bias=alloc.regions.get("bias") if stage == "bias" else None,
                residual=alloc.regions.get("residual") if stage == "residual" else None,
                prefix=f"pass{n}_{stage}", halt=n == len(stages) - 1)))
            src, src_dt, stored = dst, dt, stored + tiles * dims.tile_bytes(DT_BYTES[dt])
    else:
        stored = tiles * dims.tile_bytes(DT_BYTES[final_dt])
    what = (f"{'fused' if fused else 'unfused'} {M}x{K}x{N} GEMM "
            f"({', '.join(stages) or 'no epilogue'})")
    if tiling is not None:
        candidates: Iterable[Tiling] = [resolve(dims, gemm_stages, tiling)]
    else:
        candidates = ranked_tilings(dims, gemm_stages)
    # The default tiler prefers double buffering and big super tiles; when that program is
    # too long for the instruction memory, fewer super tiles (or single buffering) may fit.
    too_long: dict[bool, int] = {}
    error: ProgramTooLong | None = None
    for cand in candidates:
        steps = supertiles(dims, cand)
        if steps >= too_long.get(cand.double_buffer, steps + 1):
            continue
        text = render("gemm.j2", **gemm_context(
            dims, cand, gemm_stages, params, alloc.regions, out=bufs[0] if bufs else out,
            out_dt="i32" if bufs else final_dt, halt=not bufs))
        try:
            program = assemble_program(config, "\n".join([text, *passes]), what=what)
        except ProgramTooLong as exc:
            too_long[cand.double_buffer] = steps
            error = exc if error is None or exc.length < error.length else error
            continue
        tiling = cand
        break
    else:
        if error is None:  # no candidate at all: let the tiler name what does not fit
            default_tiling(dims, gemm_stages)
        raise error
    rows = len(passes) * tiles * dims.R
    loaded = load_bytes(config, program.instrs)
    ideal = max(tiles * dims.Kp + rows, -(-loaded // dims.W), -(-stored // dims.W))
    expected = gemm_epilogue(a, b, stages, params, bias=bias if "bias" in stages else None,
                             residual=residual if "residual" in stages else None)
    return GemmKernel(
        config=config, dims=dims, stages=stages, fused=fused, tiling=tiling, params=params,
        program=program.words, source=program.text,
        memory=[(alloc.regions[name].addr, blob) for name, blob in data.items()],
        regions=dict(alloc.regions), reads={"out": (out.addr, out.nbytes)},
        expected=expected, ideal_cycles=ideal, bytes_loaded=loaded, bytes_stored=stored)
