"""A value-level model of the window unit's programs, for tests while the gateware is not
available: the ISA's registers and loops, LOAD into the A and epilogue scratchpads, WCFG and
WINDOW (:func:`hwgen.reference.window_tile`, the ISA's numpy meaning) with the epilogue of
:func:`hwgen.reference.epilogue`, and the tile store (row by row, or transposed with ``tr``).

It is adversarial about timing, the way the hardware may be: a LOAD lands at once, while a
queued WINDOW computes only at the next WAIT on the compute unit, so a program that overwrites
rows a queued WINDOW still reads computes the wrong values; and a WINDOW that reads rows of a
LOAD not yet waited for is refused (:class:`HazardError`).

It is not the hardware: it knows no timing, and runs only what window-unit programs use.
"""

from __future__ import annotations

import numpy as np

from hwgen.config import VariantConfig
from hwgen.isa import NUM_REGS, Dst, Op, Unit, WMode, decode
from hwgen.reference import EpilogueParams, WindowGeometry, epilogue, to_dtype
from hwgen.stages import REQ_MULT_ROW, REQ_SHIFT_ROW

MASK32 = (1 << 32) - 1


class HazardError(AssertionError):
    pass


def run(config: VariantConfig, words: list[int], memory: bytearray,
        params: EpilogueParams, max_steps: int = 2_000_000) -> None:
    """Run ``words`` on ``memory`` (``mem_words * port_bytes`` bytes, changed in place); the
    epilogue's control registers are ``params`` (the kernel's: CSR writes are not decoded)."""
    w, cols = config.port_bytes, config.cols
    a_spad = np.zeros((config.spad_a_depth, cols), np.int8)
    e_spad = np.zeros((config.spad_e_depth, cols), np.int64)
    regs = [0] * NUM_REGS
    geom = None
    queued: list[tuple] = []
    pending: set[tuple[str, int]] = set()  # scratchpad rows of loads not waited for
    instrs = [decode(x) for x in words]

    def compute() -> None:
        for g, f in queued:
            acc = _window(config, a_spad, e_spad, g, f)
            _drain(config, memory, e_spad, acc, f, params)
        queued.clear()

    pc = 0
    for _ in range(max_steps):
        ins = instrs[pc]
        pc += 1
        op, get = ins.op, ins.get
        if op is Op.HALT:
            compute()
            return
        if op is Op.LI:
            regs[get("rd")] = get("imm") & MASK32
        elif op is Op.ADDI:
            regs[get("rd")] = (regs[get("rs")] + get("imm")) & MASK32
        elif op is Op.BNZD:
            regs[get("rc")] = (regs[get("rc")] - 1) & MASK32
            if regs[get("rc")]:
                pc = get("target")
        elif op is Op.WAIT:
            units = get("units")
            if get("left"):  # window-unit programs wait for idle units only
                raise HazardError(f"instruction {pc - 1}: a counted WAIT (left="
                                  f"{get('left')}), which this model does not follow")
            if units & Unit.FEED:
                compute()
            if units & Unit.LOAD:
                pending.clear()
        elif op is Op.CSRWI:
            if queued:
                raise HazardError(f"instruction {pc - 1}: a CSR write with WINDOWs queued")
        elif op is Op.WCFG:
            if queued:
                raise HazardError(f"instruction {pc - 1}: WCFG with WINDOWs queued")
            geom = WindowGeometry(win=get("win"), hin=get("hin"), kh=get("kh"), kw=get("kw"),
                                  stride=get("stride"), pt=get("pt"), pl=get("pl"),
                                  fill=get("fill"), mode=WMode(get("mode")).name.lower())
        elif op is Op.LOAD:
            ext, spad, stride = regs[get("ext")], regs[get("spad")], regs[get("stride")]
            data = b"".join(bytes(memory[(ext + i * stride) * w:(ext + i * stride
                                                                 + get("len")) * w])
                            for i in range(get("count")))
            dst = Dst(get("dst"))
            if dst is Dst.A:
                n = len(data) // cols
                a_spad[spad:spad + n] = np.frombuffer(data, np.int8).reshape(n, cols)
                pending.update(("a", spad + i) for i in range(n))
            elif dst in (Dst.E8, Dst.E32):
                size = 1 if dst is Dst.E8 else 4
                n = len(data) // (cols * size)
                vals = np.frombuffer(data, "<i1" if size == 1 else "<i4").reshape(n, cols)
                e_spad[spad:spad + n] = vals
                pending.update(("e", spad + i) for i in range(n))
            else:
                raise HazardError(f"instruction {pc - 1}: a window program loads {dst.name}")
        elif op is Op.WINDOW:
            if geom is None:
                raise HazardError(f"instruction {pc - 1}: WINDOW before any WCFG")
            f = {k: get(k) for k in ("count", "ow", "mask", "dt", "tr")}
            f.update(a=regs[get("a")], w=regs[get("w")], out=regs[get("out")],
                     bias=regs[get("bias")], pos=regs[get("pos")])
            read = _rows_read(config, geom, f)
            if read & pending:
                raise HazardError(f"instruction {pc - 1}: WINDOW reads scratchpad rows "
                                  f"{sorted(read & pending)[:4]} of a LOAD not waited for")
            queued.append((geom, f))
        else:
            raise HazardError(f"instruction {pc - 1}: {op.name} in a window program")
    raise HazardError("the program did not halt")


def _rows_read(config: VariantConfig, g: WindowGeometry, f: dict) -> set[tuple[str, int]]:
    depth = config.spad_a_depth
    oy, ox = f["pos"] >> 16, f["pos"] & 0xFFFF
    rows = set()
    for _ in range(f["count"]):
        for _, _, iy, ix in g.taps(oy, ox):
            if 0 <= iy < g.hin and 0 <= ix < g.win:
                rows.add(("a", (f["a"] + iy * g.win + ix) % depth))
        ox += 1
        if ox == f["ow"]:
            oy, ox = oy + 1, 0
    if g.mode == "mac":
        rows |= {("e", f["w"] + 3 * ky + kx) for ky in range(g.kh) for kx in range(g.kw)}
    return rows


def _window(config: VariantConfig, a_spad, e_spad, g: WindowGeometry, f: dict) -> np.ndarray:
    from hwgen.reference import window_tile

    return window_tile(a_spad, e_spad, g, a=f["a"], w=f["w"], pos=f["pos"], count=f["count"],
                       ow=f["ow"], rows=config.rows)


def _drain(config: VariantConfig, memory: bytearray, e_spad, acc: np.ndarray, f: dict,
           params: EpilogueParams) -> None:
    stages = [s for i, s in enumerate(config.epilogue) if f["mask"] >> i & 1]
    cols = config.cols
    bias = f["bias"]
    operands = {"bias": e_spad[bias] if "bias" in stages else None}
    if params.per_channel and "requant" in stages:
        operands["mult"] = e_spad[bias + REQ_MULT_ROW]
        operands["shift"] = e_spad[bias + REQ_SHIFT_ROW]
    out = to_dtype(epilogue(acc, stages, params, **operands),
                   np.int8 if f["dt"] == 1 else np.int32)
    if f["tr"]:
        out = out.T
    data = np.ascontiguousarray(out).astype(out.dtype.newbyteorder("<")).tobytes()
    start = f["out"] * config.port_bytes
    assert len(data) == config.rows * cols * out.dtype.itemsize
    memory[start:start + len(data)] = data
