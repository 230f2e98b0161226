"""A symbolic checker of microcode kernels, for tests, while the hardware is not available.

It follows a program's control flow (li, addi, bnzd) to get the operands of every LOAD, MATMUL
and EPIPASS, and tracks *labels*, never data: each scratchpad row is labelled with the memory
region and byte offset it was loaded from, each stored row with the labels of what produced it.
On the way it enforces the program's hazard duties from the hardware semantics:

- a MATMUL or EPIPASS is queued only after the loads of the rows it reads completed (wait 1);
- a load into A/B rows only after every matmul reading them has been fed (wait 2 or 4);
- a load into E rows only after every job reading them is done (wait 4);
- a load of memory written by an earlier job only after that job is done (wait 4);
- a CSR write only with the compute unit idle (wait 4); the program ends wait 7, halt.

Before that, :func:`check_loops` checks the hardware loops statically: properly nested, each
counter set by an ``li`` right before the loop (where ``fusion.kernels.codegen.load_bytes`` reads
the
trip count) and written by nothing inside the loop but its own ``bnzd``.

It is not a model of the hardware: it computes no values, and knows nothing of timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusion.kernels.gemm.sparse import k_blocks, kept_rows
from fusion.kernels.layout import Region
from hwgen.config import VariantConfig
from hwgen.isa import Csr, Dst, Dt, Op, decode
from hwgen.stages import REQ_MULT_ROW, REQ_SHIFT_ROW

MASK32 = (1 << 32) - 1


class HazardError(AssertionError):
    pass


@dataclass(frozen=True, eq=True)
class Label:
    """What a scratchpad row holds: bytes of ``region`` from ``offset``, loaded as ``dst``."""

    region: str
    offset: int
    dst: str
    #: The job that stored these bytes before the load, or None for the initial memory image.
    producer: Store | None = field(default=None, compare=False, repr=False)


@dataclass
class Store:
    """One stored row and how it was produced."""

    kind: str  # "matmul" or "epipass"
    addr: int  # byte address of the row
    nbytes: int
    dt: str
    mask: int
    row: int  # row index within the job
    acc: list[tuple[Label, Label]] = field(default_factory=list)  # matmul: (A row, B row) per k
    src: Label | None = None  # epipass: the E row read
    bias: Label | None = None
    res: Label | None = None
    #: Per-channel requantize (req_mode 1): the multiplier and shift rows (bias + 1, + 2).
    mult: Label | None = None
    shift: Label | None = None


@dataclass
class Trace:
    loads: list[dict] = field(default_factory=list)
    stores: list[Store] = field(default_factory=list)
    csrs: dict[str, int] = field(default_factory=dict)
    executed: int = 0
    bytes_loaded: int = 0
    k_steps: int = 0


def _overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


class Tracer:
    def __init__(self, config: VariantConfig, regions: dict[str, Region]) -> None:
        self.cfg = config
        self.W = config.port_bytes
        self.regions = regions
        self.spad: dict[str, dict[int, Label]] = {"a": {}, "b": {}, "e": {}}
        self.depth = {"a": config.spad_a_depth, "b": config.spad_b_depth,
                      "e": config.spad_e_depth}
        self.inflight: list[tuple[str, int, int]] = []  # loads: (space, row0, row1)
        self.inflight_mem: list[tuple[int, int]] = []
        # A/B rows of queued matmuls, with the number of their job (jobs counts them all)
        self.unfed: list[tuple[str, int, int, int]] = []
        self.jobs = 0
        self.busy_e: list[tuple[int, int]] = []  # E rows read by unfinished jobs
        self.busy_mem: list[tuple[int, int]] = []  # bytes written by unfinished jobs
        self.acc: list[tuple[Label, Label]] = []
        self.writer: dict[int, Store] = {}  # row start byte -> the last store there
        self.trace = Trace()

    def _label(self, byte: int, dst: str) -> Label:
        for r in self.regions.values():
            lo = r.addr * self.W
            if lo <= byte < lo + r.nbytes:
                return Label(r.name, byte - lo, dst, self.writer.get(byte))
        return Label("?", byte, dst, self.writer.get(byte))

    def _rows(self, space: str, row: int, n: int, pc: int, what: str) -> None:
        if row < 0 or row + n > self.depth[space]:
            raise HazardError(f"@{pc}: {what} rows {row}..{row + n - 1} outside spad {space}")
        for s, r0, r1 in self.inflight:
            if s == space and _overlap(row, row + n, r0, r1):
                raise HazardError(f"@{pc}: {what} reads {space} rows {row}..{row + n - 1} "
                                  f"while a load into rows {r0}..{r1 - 1} may be running")

    def _get(self, space: str, row: int) -> Label:
        return self.spad[space].get(row, Label("uninitialized", row, space))

    def load(self, pc: int, i, regs: list[int]) -> None:
        dst = Dst(i.get("dst")).name.lower()
        size = {"a": self.cfg.rows, "b": self.cfg.cols, "e32": 4 * self.cfg.cols,
                "e8": self.cfg.cols}[dst]
        space = dst[0]
        ext, row0, stride = regs[i.get("ext")], regs[i.get("spad")], regs[i.get("stride")]
        count, length = i.get("count"), i.get("len")
        seg = length * self.W
        if seg % size:
            raise HazardError(f"@{pc}: load segments of {seg} bytes are not whole {size}-byte "
                              f"rows (legal, but this checker does not follow it)")
        n = count * seg // size
        if row0 + n > self.depth[space]:
            raise HazardError(f"@{pc}: load writes {space} rows {row0}..{row0 + n - 1}, "
                              f"beyond the depth {self.depth[space]}")
        busy = self.unfed if space in "ab" else [("e", a, b) for a, b in self.busy_e]
        for s, r0, r1, *_ in busy:
            if s == space and _overlap(row0, row0 + n, r0, r1):
                raise HazardError(f"@{pc}: load into {space} rows {row0}..{row0 + n - 1} "
                                  f"while a queued job may still read rows {r0}..{r1 - 1}")
        for s in range(count):
            lo = (ext + s * stride) * self.W
            for m0, m1 in self.busy_mem:
                if _overlap(lo, lo + seg, m0, m1):
                    raise HazardError(f"@{pc}: load of bytes {lo}..{lo + seg - 1} written by "
                                      f"a job that may not have finished (wait 4 first)")
            for r in range(seg // size):
                row = row0 + s * (seg // size) + r
                self.spad[space][row] = self._label(lo + r * size, dst)
        self.inflight.append((space, row0, row0 + n))
        self.trace.loads.append({"dst": dst, "ext": ext, "spad": row0, "rows": n})
        self.trace.bytes_loaded += count * seg

    def job_rows(self, pc: int, i, regs: list[int], kind: str, nrows: int) -> None:
        mask, dt = i.get("mask"), Dt(i.get("dt")).name.lower()
        chain = self.cfg.epilogue
        bias_on = "bias" in chain and mask & self.cfg.stage_bit("bias")
        res_on = "residual" in chain and mask & self.cfg.stage_bit("residual")
        # per-channel requantize reads the bias group's multiplier and shift rows (hwgen.stages)
        pc_on = ("requant" in chain and mask & self.cfg.stage_bit("requant")
                 and self.trace.csrs.get("req_mode", 0) & 1)
        row_bytes = self.cfg.cols * (4 if dt == "i32" else 1)
        out = regs[i.get("out")] * self.W
        e_read = []
        if kind == "epipass":
            src = regs[i.get("src")]
            self._rows("e", src, nrows, pc, "epipass src")
            e_read.append((src, src + nrows))
        if bias_on:
            self._rows("e", regs[i.get("bias")], 1, pc, f"{kind} bias")
            e_read.append((regs[i.get("bias")], regs[i.get("bias")] + 1))
        if pc_on:
            first, last = regs[i.get("bias")] + REQ_MULT_ROW, regs[i.get("bias")] + REQ_SHIFT_ROW
            self._rows("e", first, last - first + 1, pc, f"{kind} per-channel requant")
            e_read.append((first, last + 1))
        if res_on:
            self._rows("e", regs[i.get("res")], nrows, pc, f"{kind} residual")
            e_read.append((regs[i.get("res")], regs[i.get("res")] + nrows))
        for r in range(nrows):
            store = Store(
                kind, out + r * row_bytes, row_bytes, dt, mask, r,
                acc=list(self.acc) if kind == "matmul" else [],
                src=self._get("e", regs[i.get("src")] + r) if kind == "epipass" else None,
                bias=self._get("e", regs[i.get("bias")]) if bias_on else None,
                res=self._get("e", regs[i.get("res")] + r) if res_on else None,
                mult=self._get("e", regs[i.get("bias")] + 1) if pc_on else None,
                shift=self._get("e", regs[i.get("bias")] + 2) if pc_on else None)
            self.trace.stores.append(store)
            self.writer[store.addr] = store
        self.busy_e += e_read
        self.busy_mem.append((out, out + nrows * row_bytes))

    def run(self, words: list[int], max_steps: int = 10_000_000) -> Trace:
        prog = [decode(w) for w in words]
        regs = [0] * 16
        pc = 0
        for _ in range(max_steps):
            if not 0 <= pc < len(prog):
                raise HazardError(f"program counter {pc} ran off the program")
            i = prog[pc]
            self.trace.executed += 1
            nxt = pc + 1
            if i.op is Op.LI:
                regs[i.get("rd")] = i.get("imm") & MASK32
            elif i.op is Op.ADDI:
                regs[i.get("rd")] = (regs[i.get("rs")] + i.get("imm")) & MASK32
            elif i.op is Op.BNZD:
                rc = i.get("rc")
                regs[rc] = (regs[rc] - 1) & MASK32
                if regs[rc]:
                    nxt = i.get("target")
            elif i.op is Op.WAIT:
                units, left = i.get("units"), i.get("left")
                if units & 1:  # counted (left > 0): the newest `left` loads may still run
                    self.inflight = self.inflight[len(self.inflight) - left:] if left else []
                    self.inflight_mem = []
                if units & 4 or (units & 2 and not left):
                    self.unfed = []
                elif units & 2:  # the newest `left` jobs may still read their operands
                    self.unfed = [u for u in self.unfed if u[3] > self.jobs - left]
                if units & 4:
                    self.busy_e, self.busy_mem = [], []
            elif i.op is Op.LOAD:
                self.load(pc, i, regs)
            elif i.op is Op.MATMUL:
                a, b, k = regs[i.get("a")], regs[i.get("b")], i.get("k")
                self._rows("a", a, k, pc, "matmul A")
                self._rows("b", b, k, pc, "matmul B")
                self.acc += [(self._get("a", a + kk), self._get("b", b + kk)) for kk in range(k)]
                self.jobs += 1
                self.unfed += [("a", a, a + k, self.jobs), ("b", b, b + k, self.jobs)]
                self.trace.k_steps += k
                if i.get("last"):
                    self.job_rows(pc, i, regs, "matmul", self.cfg.rows)
                    self.acc = []
            elif i.op is Op.EPIPASS:
                self.jobs += 1
                self.job_rows(pc, i, regs, "epipass", i.get("rows"))
            elif i.op is Op.CSRWI:
                if self.busy_mem or self.unfed:
                    raise HazardError(f"@{pc}: csrwi while the compute unit may be busy")
                self.trace.csrs[Csr(i.get("csr")).name.lower()] = i.get("imm")
            elif i.op is Op.HALT:
                if self.inflight or self.unfed or self.busy_mem or self.acc:
                    raise HazardError(f"@{pc}: halt without a final wait units=7")
                return self.trace
            pc = nxt
        raise HazardError(f"no halt within {max_steps} steps")


def check_loops(words: list[int]) -> list[tuple[int, int]]:
    """Check the program's hardware loops; return their ``(head, bnzd)`` index pairs.

    Every backward ``bnzd`` closes a loop: its counter must be set by an ``li`` right before
    the head, loops must nest (no two bodies overlap but by containment), and no instruction
    inside a loop may write its counter except the ``bnzd`` that closes it (a nested loop
    sharing the counter, or a scratch write, would change the trip count).
    """
    prog = [decode(w) for w in words]
    loops = [(i.get("target"), n) for n, i in enumerate(prog)
             if i.op is Op.BNZD and i.get("target") <= n]
    for head, end in loops:
        rc = prog[end].get("rc")
        setter = prog[head - 1] if head > 0 else None
        if setter is None or setter.op is not Op.LI or setter.get("rd") != rc:
            raise HazardError(f"@{end}: the counter r{rc} of the loop at {head}..{end} is not "
                              f"set by an li just before it")
        for n in range(head, end):
            i = prog[n]
            written = (i.get("rd") if i.op in (Op.LI, Op.ADDI) else
                       i.get("rc") if i.op is Op.BNZD else None)
            if written == rc:
                raise HazardError(f"@{n}: writes r{rc}, the counter of the loop at "
                                  f"{head}..{end}")
        for other_head, other_end in loops:
            if head < other_head <= end < other_end:
                raise HazardError(f"loops {head}..{end} and {other_head}..{other_end} overlap")
    return loops


def trace(config: VariantConfig, words: list[int], regions: dict[str, Region]) -> Trace:
    """Run the checker over a program; raise :class:`HazardError` on the first violation."""
    return Tracer(config, regions).run(words)


def _derive(kernel, store: Store, i: int, j: int, r: int) -> list[tuple[str, int, str]]:
    """Check that ``store`` computes row ``r`` of output tile ``(i, j)``; return its path."""
    d, cfg = kernel.dims, kernel.config
    where = f"tile ({i}, {j}) row {r}"
    group = 3 if kernel.params.per_channel else 1  # rows per column block of the bias region
    if store.bias is not None:
        assert store.bias == Label("bias", j * group * cfg.e_row_bytes, "e32"), (where,
                                                                               store.bias)
        assert store.bias.producer is None
    requant = "requant" in cfg.epilogue and store.mask & cfg.stage_bit("requant")
    if kernel.params.per_channel and requant:
        for n, label in ((1, store.mult), (2, store.shift)):
            want = Label("bias", (j * 3 + n) * cfg.e_row_bytes, "e32")
            assert label == want, (where, "per-channel row", n, label, want)
    else:
        assert store.mult is None and store.shift is None, (where, "req_mode left on")
    if store.res is not None:
        want = Label("residual", ((i * d.Nb + j) * d.R + r) * d.C, "e8")
        assert store.res == want, (where, store.res, want)
    if store.kind == "matmul" and getattr(kernel, "sparse_blocks", None) is not None:
        # block-sparse: the kept blocks' rows of A, and compact B's rows of this column block
        assert store.row == r, (where, store.row)
        blocks = kernel.sparse_blocks
        spans = k_blocks(d)
        rows = [k for jb in blocks[j] for k in range(*spans[jb])]
        a_want = [Label("a", (i * d.a_Kp + k) * d.R, "a") for k in rows]
        first = sum(kept_rows(d, blocks)[:j])
        b_want = [Label("b", (first + t) * d.C, "b") for t in range(len(rows))]
        assert [x for x, _ in store.acc] == a_want, f"{where}: wrong A rows"
        assert [y for _, y in store.acc] == b_want, f"{where}: wrong B rows"
        return [("matmul", store.mask, store.dt)]
    if store.kind == "matmul":
        assert store.row == r, (where, store.row)
        # grouped, A is [Mb][Nb * Kp][R]: a Kp slice per column block, the same rows for
        # every block of a group (kblocks), so any of them will do; K-major as it is
        # (a_direct), the group's own rows of K
        peers = ([j // d.kblocks * d.kblocks + n for n in range(d.kblocks)] if d.grouped
                 else [0])
        starts = [d.a_rows_at(j)] if d.a_direct else [p * d.Kp for p in peers]
        a_rows = [x for x, _ in store.acc]
        assert any(a_rows == [Label("a", (i * d.a_Kp + s + k) * d.R, "a")
                              for k in range(d.Kp)] for s in starts), f"{where}: wrong A rows"
        b = [Label("b", (j * d.Kp + k) * d.C, "b") for k in range(d.Kp)]
        assert [y for _, y in store.acc] == b, f"{where}: wrong B rows"
        return [("matmul", store.mask, store.dt)]
    src = store.src
    assert src is not None and src.producer is not None, f"{where}: epipass of unwritten rows"
    assert src.dst == {"i32": "e32", "i8": "e8"}[src.producer.dt], (where, src)
    return _derive(kernel, src.producer, i, j, r) + [("epipass", store.mask, store.dt)]


def check_gemm(kernel) -> Trace:
    """Trace a GEMM kernel and check every output row's provenance.

    Returns the trace; raises on a malformed loop (:func:`check_loops`), a hazard, a wrongly
    addressed operand, or an output row written other than exactly once. The path of each
    row (job kind, mask, stored type from the matmul on) must be one matmul with every stage
    (fused), or a mask-0 int32 matmul and one pass per stage in chain order (unfused).
    """
    check_loops(kernel.program)
    t = trace(kernel.config, kernel.program, kernel.regions)
    d, cfg = kernel.dims, kernel.config
    out = kernel.regions["out"]
    eb = 1 if kernel.out_dtype.itemsize == 1 else 4
    lo, hi = out.addr * d.W, out.addr * d.W + out.nbytes
    counts: dict[int, int] = {}
    for s in t.stores:
        if lo <= s.addr < hi:
            counts[s.addr] = counts.get(s.addr, 0) + 1
    final = "i8" if eb == 1 else "i32"
    bits = [cfg.stage_bit(s) for s in kernel.stages]
    if kernel.fused or not kernel.stages:
        want = [("matmul", sum(bits), final)]
    else:
        want = [("matmul", 0, "i32")] + [("epipass", b, None) for b in bits]
    tracer_writer = {s.addr: s for s in t.stores}  # the last store at each row start
    for i in range(d.Mb):
        for j in range(d.Nb):
            for r in range(d.R):
                addr = lo + ((i * d.Nb + j) * d.R + r) * d.C * eb
                assert counts.get(addr) == 1, f"output row at byte {addr} written " \
                                              f"{counts.get(addr, 0)} times"
                path = _derive(kernel, tracer_writer[addr], i, j, r)
                assert [(k, m) for k, m, _ in path] == [(k, m) for k, m, _ in want], path
                assert path[-1][2] == final, path
    assert len(counts) == d.Mb * d.Nb * d.R
    return t
