"""The microcode ISA: one table, one encoder, one decoder.

Every instruction is one 64-bit word with a single layout::

    63    58 57  54 53  50 49  46 45  42 41  38 37  32 31                 0
    | op (6) | r1 4 | r2 4 | r3 4 | r4 4 | r5 4 | f (6) |      imm (32)      |

Each opcode names which of these slots it uses and what they mean (:data:`OPCODES`). The
gateware decodes with the same :data:`SLOTS` table, and ``docs/isa.md`` is generated from it
(:func:`isa_markdown`), so the hardware, the assembler and the document cannot drift apart.
The epilogue control registers are numbered by the stages that own them (:mod:`hwgen.stages`);
that is the only other module of the project this one reads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from hwgen.stages import STAGES

WORD_BITS = 64
NUM_REGS = 16
REG_BITS = 32

#: Slot name -> (lowest bit, width) in the instruction word.
SLOTS: dict[str, tuple[int, int]] = {
    "op": (58, 6),
    "r1": (54, 4),
    "r2": (50, 4),
    "r3": (46, 4),
    "r4": (42, 4),
    "r5": (38, 4),
    "f": (32, 6),
    "imm": (0, 32),
}


class Op(enum.IntEnum):
    NOP = 0
    HALT = 1
    WAIT = 2
    LI = 3
    ADDI = 4
    BNZD = 5
    LOAD = 6
    MATMUL = 7
    EPIPASS = 8
    CSRWI = 9
    LOADW = 10
    WINDOW = 11
    WCFG = 12
    BZT = 13


class Dst(enum.IntEnum):
    """Scratchpad a LOAD writes."""

    A = 0  #: A operands, ``rows`` bytes a row
    B = 1  #: B operands, ``cols`` bytes a row
    E32 = 2  #: epilogue scratchpad, ``cols`` int32 lanes a row, from int32 data
    E8 = 3  #: epilogue scratchpad, from int8 data, sign-extended into the lanes
    Z = 4  #: the tile-flag queue: one flag a memory word (the word is not 0), for BZT


class Dt(enum.IntEnum):
    """Element type the epilogue stores to memory."""

    I32 = 0
    I8 = 1  #: the low byte of each lane


#: Epilogue control registers written by CSRWI: each stage's registers
#: (:attr:`hwgen.stages.StageSpec.regs`), numbered as the stage declares them.
Csr = enum.IntEnum("Csr", sorted(((r.name.upper(), r.csr) for s in STAGES for r in s.regs),
                                 key=lambda item: item[1]), module=__name__)


class WMode(enum.IntEnum):
    """What the window unit computes over each output's window (``WCFG`` mode)."""

    MAC = 0  #: sum of tap x weight: a depthwise convolution, or an average pool (weights 1)
    MAX = 1  #: the largest tap: a max pool
    SUM = 2  #: the sum of a whole ``hin x win`` plane: a global average pool


class Unit(enum.IntFlag):
    """Units a WAIT waits for."""

    LOAD = 1  #: the DMA load engine is idle
    FEED = 2  #: every queued MATMUL has read its operands from the scratchpads
    EPI = 4  #: every queued job has been stored to memory (the compute unit is idle)
    ALL = 7


@dataclass(frozen=True)
class Field:
    """One operand of an instruction: its name, slot, bits within the slot, and kind."""

    name: str
    slot: str
    lo: int
    width: int
    kind: str  # "reg", "uint", "sint", "label", or an enum name
    doc: str

    @property
    def enum(self) -> type[enum.IntEnum] | None:
        return {"dst": Dst, "dt": Dt, "csr": Csr, "wmode": WMode}.get(self.kind)


def _r(name: str, slot: str, doc: str) -> Field:
    return Field(name, slot, 0, 4, "reg", doc)


#: MATMUL and EPIPASS: the stage mask has one bit per stage a variant can chain (bits 16 and
#: up of the immediate), then the store type and MATMUL's ``last`` and ``tr`` flags.
_MASK = Field("mask", "imm", 16, len(STAGES), "uint",
              "epilogue stages to apply: bit i = stage i of the variant's chain")
_DT = Field("dt", "imm", _MASK.lo + _MASK.width, 1, "dt", "stored element type: i32 or i8")
#: MATMUL's and WINDOW's transposed-store flag (the same bit, so one decoder serves both).
_TR = Field("tr", "imm", _DT.lo + 2, 1, "uint",
            "1: store the tile transposed, column by column (int8, square arrays): "
            "the K-major layout the next GEMM's A operand is loaded from")
#: MATMUL's zero-flag bit: the store unit records whether the tile is all zero point.
_ZF = Field("zf", "imm", _TR.lo + 1, 1, "uint",
            "1 (with `last`, int8, no residual stage): after the tile, store its zero flag, "
            "one word at the address in `res`: 1 if every byte of the tile equals the "
            "output zero point (`req_zp`), else 0 (the bitmap a later BZT reads)")

#: Opcode -> (fields, description).
OPCODES: dict[Op, tuple[tuple[Field, ...], str]] = {
    Op.NOP: ((), "Do nothing."),
    Op.HALT: ((), "Stop fetching. `done` rises once every unit is idle."),
    Op.WAIT: (
        (Field("units", "imm", 0, 3, "uint", "bit 0 load, bit 1 feed, bit 2 epilogue"),
         Field("left", "imm", 3, 4, "uint",
               "0: the units are idle; n > 0: the load and feed units may still have their "
               "newest n commands pending")),
        "Stall until every unit in `units` is idle. With `left` = n > 0, the load unit "
        "waits only until at most n LOADs (or LOADWs) are queued or unfinished, so every "
        "LOAD but the newest n has written its rows (loads finish in order), and the feed "
        "unit until at most n jobs are queued or still reading their operands (the array's "
        "MATMUL, the window unit's WINDOW), so every job but the newest n has read them: a "
        "stream of loads keeps the port busy while the program waits for the oldest. The "
        "epilogue unit always waits for idle.",
    ),
    Op.LI: (
        (_r("rd", "r1", "destination register"),
         Field("imm", "imm", 0, 32, "sint", "value")),
        "`rd = imm`.",
    ),
    Op.ADDI: (
        (_r("rd", "r1", "destination register"), _r("rs", "r2", "source register"),
         Field("imm", "imm", 0, 32, "sint", "signed increment")),
        "`rd = rs + imm` (32-bit, wrapping).",
    ),
    Op.BNZD: (
        (_r("rc", "r1", "counter register"),
         Field("target", "imm", 0, 16, "label", "instruction index to branch to")),
        "`rc = rc - 1`; branch to `target` if `rc` is now non-zero. A loop body runs `rc` times.",
    ),
    Op.LOAD: (
        (Field("dst", "f", 0, 3, "dst", "scratchpad: a, b, e32 or e8; or z, the tile-flag "
               "queue"),
         _r("ext", "r1", "external word address of the first segment"),
         _r("spad", "r2", "first scratchpad row written"),
         _r("stride", "r3", "words from one segment's start to the next"),
         Field("count", "imm", 16, 16, "uint", "segments"),
         Field("len", "imm", 0, 16, "uint", "words per segment")),
        "DMA `count` segments of `len` memory words into consecutive scratchpad rows. "
        "Stalls while the previous LOAD runs; runs alongside compute.",
    ),
    Op.LOADW: (
        (_r("ext", "r1", "word address of the first row's first word"),
         _r("spad", "r2", "first A scratchpad row written"),
         _r("stride", "r3", "words from one row's first word to the next row's"),
         _r("next", "r4", "words from one word of a row to its next word"),
         _r("fill", "r5", "the byte (low 8 bits) that lanes outside `mask` get"),
         Field("step", "f", 0, 2, "uint", "bytes between consecutive lanes: 1 or 2"),
         Field("keep", "f", 2, 1, "uint",
               "1: lanes outside `mask` keep the row's old bytes instead of taking `fill`"),
         Field("count", "imm", 0, 12, "uint", "rows"),
         Field("shift", "imm", 12, 4, "uint", "byte of the first word that lane 0 reads"),
         Field("mask", "imm", 16, 16, "uint", "lanes read from memory: bit r = lane r")),
        "Window load (implicit im2col; variants whose A row is one memory word, "
        "`port_bytes == rows`): `count` A scratchpad rows from `spad` on. Row i reads the "
        "words `ext + i*stride + j*next` for j = 0, 1, ... as one byte string, lane r takes "
        "its byte `shift + r*step`, and a lane outside `mask` takes `fill` instead (a "
        "convolution's padding), or with `keep` is left as it was (a second LOADW merges "
        "its lanes into the rows of the first: a block of output pixels spanning two output "
        "rows). Queued and run like LOAD."),
    Op.MATMUL: (
        (_r("a", "r1", "A scratchpad row of k = 0"), _r("b", "r2", "B scratchpad row of k = 0"),
         _r("out", "r3", "external word address of the output tile"),
         _r("bias", "r4", "epilogue scratchpad row holding the bias vector"),
         _r("res", "r5", "epilogue scratchpad row of the residual tile's first row; with "
            "`zf`, the external word address of the tile's zero flag"),
         Field("k", "imm", 0, 16, "uint", "reduction steps"),
         _MASK, _DT,
         Field("last", "imm", _DT.lo + 1, 1, "uint",
               "1: this ends the tile; drain it through the epilogue"),
         _TR, _ZF,
         Field("bank", "f", 0, 3, "uint",
               "the accumulator bank the tile sums in (variants with acc_banks > 1; "
               "0 otherwise)")),
        "Queue `k` multiply-accumulate steps of one rows x cols output tile into accumulator "
        "bank `bank`. Without `last` the bank keeps its sums for the next MATMUL on it; with "
        "it, the tile drains row by row through the epilogue, is stored at `out`, and the "
        "bank starts again from zero. Stalls only when the queue is full.",
    ),
    Op.EPIPASS: (
        (_r("src", "r1", "first epilogue scratchpad row to read"),
         _r("out", "r3", "external word address written"),
         _r("bias", "r4", "epilogue scratchpad row holding the bias vector"),
         _r("res", "r5", "epilogue scratchpad row of the residual's first row"),
         Field("rows", "imm", 0, 16, "uint", "rows to process"),
         _MASK, _DT),
        "Queue a standalone memory-to-memory epilogue pass over `rows` rows of the epilogue "
        "scratchpad. It starts once the array has drained.",
    ),
    Op.WINDOW: (
        (_r("a", "r1", "A scratchpad row of input pixel (0, 0): pixel (iy, ix) is row "
            "a + iy*win + ix (modulo the depth)"),
         _r("w", "r2", "epilogue scratchpad row of tap (0, 0)'s weights: tap (ky, kx) is row "
            "w + 3*ky + kx, the low byte of each lane (mac mode only)"),
         _r("out", "r3", "external word address of the output tile"),
         _r("bias", "r4", "epilogue scratchpad row holding the bias vector"),
         _r("pos", "r5", "the tile's first output pixel: row oy0 in bits 16..31, column ox0 "
            "in bits 0..15"),
         Field("count", "imm", 0, 5, "uint", "output pixels in the tile, 1..rows"),
         Field("ow", "imm", 5, 11, "uint", "output row width, 1..2047"),
         _MASK, _DT, _TR),
        "Window unit (variants with `window_unit`: `port_bytes == rows == cols`, one memory "
        "word an A row, one channel a lane): queue one output tile of a depthwise "
        "convolution or a pool, computed from the A scratchpad with the geometry of the last "
        "WCFG, and drained through the epilogue and stored like a MATMUL tile. Tile row r "
        "(r < count) is output pixel r in raster order from (oy0, ox0), rows of `ow` pixels; "
        "rows from count on are 0. With x(iy, ix) the A row of input pixel (iy, ix), or "
        "`fill` in every lane outside 0 <= iy < hin, 0 <= ix < win, lane c of output "
        "(oy, ox) is, over the taps ky < kh, kx < kw at iy = oy*stride + ky - pt, "
        "ix = ox*stride + kx - pl: mac, the sum of x[c] * w(ky, kx)[c]; max, the largest "
        "x[c]; sum (the tile's output pixels are images oy0 + r, `pos`'s column unused), "
        "the sum of x[c] over the whole plane of image oy0 + r, whose pixel (iy, ix) is row "
        "a + ((oy0 + r)*hin + iy)*win + ix. Lanes are int8; sums wrap at 32 bits."),
    Op.WCFG: (
        (Field("win", "imm", 0, 12, "uint", "input row width in pixels, 1..4095"),
         Field("hin", "imm", 12, 12, "uint", "input rows, 1..4095"),
         Field("fill", "imm", 24, 8, "uint", "the byte outside the input (padding)"),
         Field("kh", "r1", 0, 2, "uint", "window rows, 1..3"),
         Field("kw", "r1", 2, 2, "uint", "window columns, 1..3"),
         Field("pt", "r2", 0, 2, "uint", "padding rows above the input, 0..kh-1"),
         Field("pl", "r2", 2, 2, "uint", "padding columns left of the input, 0..kw-1"),
         Field("stride", "r3", 0, 2, "uint", "window step in both axes, 1..3"),
         Field("mode", "f", 0, 2, "wmode", "mac, max or sum")),
        "Set the window unit's geometry for the WINDOWs that follow. Do it while the "
        "compute unit is idle (WAIT first), like CSRWI; every field is 0 after reset."),
    Op.BZT: (
        (Field("target", "imm", 0, 16, "label", "instruction index to branch to"),),
        "Take the oldest flag of the tile-flag queue (filled by `load dst=z`, a flag a "
        "word, in order) and branch to `target` if it is set: the tile it stands for is all "
        "zero point, so the program jumps over its loads and MATMULs (conditional execution "
        "on data). Stalls while the queue is empty; the `tiles_skipped` counter counts the "
        "branches taken. The queue holds `ZQ_DEPTH` flags: a program loads no more than "
        "that ahead of its BZTs."),
    Op.CSRWI: (
        (Field("csr", "r1", 0, 4, "csr", ", ".join(c.name.lower() for c in Csr)),
         Field("imm", "imm", 0, 32, "sint", "value")),
        "Write an epilogue control register (table below). Do it while the epilogue is idle "
        "(WAIT first). Every control register is 0 after reset.",
    ),
}


for _op, (_fields, _) in OPCODES.items():  # a field grown with the stages must still fit
    for _f in _fields:
        if _f.lo + _f.width > SLOTS[_f.slot][1]:
            raise ImportError(f"{_op.name.lower()} field {_f.name} (bits {_f.lo}.."
                              f"{_f.lo + _f.width - 1} of {_f.slot}) does not fit its slot")
_CSR_BITS = next(f.width for f in OPCODES[Op.CSRWI][0] if f.name == "csr")
if max(Csr) >= 1 << _CSR_BITS:
    raise ImportError(f"control register {max(Csr).name.lower()} is number {int(max(Csr))}; "
                      f"the CSRWI csr field holds 0..{(1 << _CSR_BITS) - 1}")


#: The most commands a counted WAIT can leave pending (its ``left`` field).
MAX_LEFT = (1 << next(f.width for f in OPCODES[Op.WAIT][0] if f.name == "left")) - 1


def window_words(rows: int, shift, step):
    """Memory words one LOADW row reads on a variant of ``rows`` array rows (whose memory word
    is one A row, ``port_bytes == rows``): through its last lane's byte
    ``shift + (rows - 1) * step``. Works on ints and on Amaranth values alike (the product
    by a constant as shifted adds: synthesis gives a ``*`` a multiplier block however small).
    """
    return ((shift + times_const(step, rows - 1)) >> (rows.bit_length() - 1)) + 1


def times_const(value, k: int):
    """``value * k`` for a constant ``k >= 0``, as a sum of shifted copies of ``value`` (one
    per set bit of ``k``): yosys maps every ``$mul`` to a MULT18X18D, even one of a few bits
    by a constant, where these adds cost a few LUTs. Works on ints and Amaranth values."""
    terms = [value << i for i in range(k.bit_length()) if k >> i & 1]
    return sum(terms[1:], terms[0]) if terms else 0


class IsaError(ValueError):
    """A malformed instruction or word."""


@dataclass(frozen=True)
class Instr:
    """One decoded instruction: an opcode and the values of its fields."""

    op: Op
    args: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fields = OPCODES[self.op][0]
        names = {f.name for f in fields}
        extra = sorted(set(self.args) - names)
        if extra:
            raise IsaError(f"{self.op.name.lower()} has no field(s) {', '.join(extra)}; "
                           f"its fields are {', '.join(sorted(names)) or 'none'}")
        for f in fields:
            value = self.args.get(f.name, 0)
            lo, hi = ((-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.kind == "sint"
                      else (0, (1 << f.width) - 1))
            if f.kind == "sint":  # also accept the unsigned spelling of a 32-bit pattern
                hi = (1 << f.width) - 1
            if not isinstance(value, int) or not lo <= value <= hi:
                raise IsaError(f"{self.op.name.lower()} field {f.name}={value!r} is out of "
                               f"range {lo}..{hi}")

    def get(self, name: str) -> int:
        return self.args.get(name, 0)


def encode(instr: Instr) -> int:
    """Encode one instruction as a 64-bit word."""
    word = int(instr.op) << SLOTS["op"][0]
    for f in OPCODES[instr.op][0]:
        value = instr.get(f.name) & ((1 << f.width) - 1)
        word |= value << (SLOTS[f.slot][0] + f.lo)
    return word


def decode(word: int) -> Instr:
    """Decode one 64-bit word; unused bits must be zero."""
    if not 0 <= word < 1 << WORD_BITS:
        raise IsaError(f"instruction word {word!r} is not a 64-bit unsigned value")
    code = word >> SLOTS["op"][0]
    try:
        op = Op(code)
    except ValueError:
        raise IsaError(f"word {word:#018x} has unknown opcode {code}") from None
    args = {}
    used = ((1 << SLOTS["op"][1]) - 1) << SLOTS["op"][0]
    for f in OPCODES[op][0]:
        shift = SLOTS[f.slot][0] + f.lo
        value = (word >> shift) & ((1 << f.width) - 1)
        used |= ((1 << f.width) - 1) << shift
        if f.kind == "sint" and value >> (f.width - 1):
            value -= 1 << f.width
        args[f.name] = value
    if word & ~used:
        raise IsaError(f"word {word:#018x} ({op.name.lower()}) sets bits its opcode does not use")
    return Instr(op, args)


def isa_markdown() -> str:
    """The ISA reference (``docs/isa.md``), generated from :data:`OPCODES`."""
    lines = [
        "# hwgen microcode ISA",
        "",
        "Generated from `hwgen/isa.py` by `hwgen generate`; do not edit by hand.",
        "",
        "Every instruction is one 64-bit word with one layout:",
        "",
        "| slot | bits |",
        "|---|---|",
    ]
    for name, (lo, width) in SLOTS.items():
        lines.append(f"| {name} | {lo + width - 1}:{lo} |")
    lines += [
        "",
        f"There are {NUM_REGS} registers `r0`..`r{NUM_REGS - 1}` of {REG_BITS} bits, all zero "
        "at start. Addresses in registers count external memory words (`port_bytes` each), "
        "or scratchpad rows.",
        "",
        "Assembler syntax: one instruction a line, `op field=value, field=value`; registers "
        "are written `rN`, labels `name:` on a line of their own, comments start with `#`.",
        "",
    ]
    for op, (fields, text) in OPCODES.items():
        lines += [f"## `{op.name.lower()}` (opcode {int(op)})", "", text, ""]
        if fields:
            lines += ["| field | slot | bits | meaning |", "|---|---|---|---|"]
            for f in fields:
                lo = SLOTS[f.slot][0] + f.lo
                lines.append(f"| {f.name} | {f.slot} | {lo + f.width - 1}:{lo} | {f.doc} |")
            lines.append("")
    lines += ["## Epilogue control registers", "",
              "Each belongs to an epilogue stage (`hwgen/stages.py`), which reads the low "
              "`bits` of the written value.", "",
              "| csr | number | stage | bits | meaning |", "|---|---|---|---|---|"]
    for s in STAGES:
        for r in s.regs:
            bits = f"{r.width}{' signed' if r.signed else ''}"
            lines.append(f"| {r.name} | {r.csr} | {s.name} | {bits} | {r.doc} |")
    lines += ["", "## Enumerations", ""]
    for en in (Dst, Dt, Csr, WMode):
        lines.append(f"- `{en.__name__.lower()}`: " + ", ".join(
            f"{m.name.lower()} = {int(m)}" for m in en))
    lines.append("- `units` (wait): " + ", ".join(
        f"{m.name.lower()} = {int(m)}" for m in Unit if m is not Unit.ALL))
    return "\n".join(lines) + "\n"
