"""Render microcode templates, assemble them, and check the result fits the variant.

Kernels are Jinja templates in ``rtl_templates/microcode/`` (package data), rendered with
:class:`jinja2.StrictUndefined` so that a context key the builder forgot fails at render time
instead of becoming an empty operand. The environment is built once per process: rendering
and assembling a kernel takes milliseconds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hwgen.asm import assemble_instrs, disassemble
from hwgen.config import VariantConfig
from hwgen.isa import Dst, Instr, Op, Unit, encode, window_words

if TYPE_CHECKING:
    import jinja2

#: Largest value of the 16-bit LOAD ``count``/``len``, MATMUL ``k`` and EPIPASS ``rows``.
FIELD_MAX = 0xFFFF

#: Scratchpad row size in bytes for each LOAD destination, as a function of the config.
_ROW_BYTES = {
    Dst.A: lambda c: c.a_row_bytes,
    Dst.B: lambda c: c.b_row_bytes,
    Dst.E32: lambda c: c.e_row_bytes,
    Dst.E8: lambda c: c.cols,
    Dst.Z: lambda c: c.port_bytes,  # a tile flag a word
}


@functools.cache
def environment() -> jinja2.Environment:
    """The Jinja environment over ``rtl_templates/microcode`` (built once).

    Every template sees :class:`hwgen.isa.Unit` as ``Unit``, so that a WAIT names the units it
    waits for (``c.wait(Unit.LOAD, Unit.FEED)``) instead of spelling their bits.
    """
    import jinja2  # here: a compile whose kernels are all cached renders none (16 ms)

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rtl_templates", "microcode"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.globals["Unit"] = Unit
    return env


def render(template: str, **context: Any) -> str:
    """Render one microcode template (e.g. ``"gemm.j2"``) to assembly text."""
    return environment().get_template(template).render(**context)


class ProgramTooLong(ValueError):
    """A program longer than the variant's instruction memory (``length`` instructions)."""

    def __init__(self, message: str, length: int) -> None:
        super().__init__(message)
        self.length = length


@dataclass(frozen=True)
class Program:
    """An assembled microcode program.

    Attributes
    ----------
    words : list of int
        The 64-bit instruction words, in instruction-memory order.
    text : str
        The assembly source it came from (with the templates' comments).
    instrs : list of Instr
        The decoded instructions.
    """

    words: list[int]
    text: str
    instrs: list[Instr]

    def __len__(self) -> int:
        return len(self.words)

    def listing(self) -> str:
        """The canonical disassembly (every field spelled out)."""
        return disassemble(self.words)


_LI = re.compile(r"^\s*li\s+rd=(r\d+),\s*imm=(-?\d+)\s*(#.*)?$")
_ADDI = re.compile(r"^\s*addi\s+rd=(r\d+),\s*rs=(r\d+),\s*imm=(-?\d+)\s*(#.*)?$")
_WRITES = re.compile(r"^\s*bnzd\s+rc=(r\d+)")


def drop_redundant_li(text: str) -> str:
    """Remove each ``li`` that sets a register to the value it already holds.

    The templates set every operand register before use, which keeps them simple; in
    straight-line code many of those writes repeat a value (the same half, the same row).
    Values are tracked from ``li`` and ``addi`` and forgotten at every label (a branch may
    arrive there) and at ``bnzd`` (it decrements its counter). An ``li`` right before a label
    is always kept: it sets a loop's trip count, which :func:`load_bytes` reads.
    """
    lines = text.splitlines()
    bodies = [line.split("#", 1)[0].strip() for line in lines]
    # before_label[n]: the first non-blank line after line n is a label (one pass from the end)
    before_label, label_next = [False] * len(lines), False
    for n in range(len(lines) - 1, -1, -1):
        before_label[n] = label_next
        if bodies[n]:
            label_next = bodies[n].endswith(":")
    known: dict[str, int] = {}
    out = []
    for n, line in enumerate(lines):
        body = bodies[n]
        if body.endswith(":"):
            known.clear()
        elif m := _LI.match(line):
            rd, value = m.group(1), int(m.group(2)) & 0xFFFFFFFF
            if known.get(rd) == value and not before_label[n] and rd != "r0":
                continue
            known[rd] = value
        elif m := _ADDI.match(line):
            rd, rs, imm = m.group(1), m.group(2), int(m.group(3))
            base = 0 if rs == "r0" else known.get(rs)
            if base is None:
                known.pop(rd, None)
            else:
                known[rd] = (base + imm) & 0xFFFFFFFF
        elif m := _WRITES.match(line):
            known.pop(m.group(1), None)
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def assemble_program(config: VariantConfig, text: str, *, what: str = "program") -> Program:
    """Assemble ``text`` (after :func:`drop_redundant_li`) and check it fits ``imem_depth``.

    Raises
    ------
    hwgen.asm.AsmError
        If the text does not assemble.
    ProgramTooLong
        If the program is longer than the instruction memory, naming both sizes and the fix.
    """
    text = drop_redundant_li(text)
    instrs = assemble_instrs(text)
    if len(instrs) > config.imem_depth:
        raise ProgramTooLong(
            f"{what} needs {len(instrs)} instructions but the variant's instruction memory "
            f"holds {config.imem_depth}: use a simpler tiling (no ragged edge, fewer loop "
            f"levels) or a variant with imem_depth >= {len(instrs)}",
            len(instrs),
        )
    return Program([encode(i) for i in instrs], text, instrs)


def load_row_bytes(config: VariantConfig, dst: Dst) -> int:
    """Bytes of one scratchpad row written by a LOAD to ``dst``."""
    return _ROW_BYTES[Dst(dst)](config)


def check_load(config: VariantConfig, count: int, length: int, dst: Dst) -> None:
    """Check a LOAD's segment geometry against the DMA's row-cutting rule.

    Each segment (``length`` words) must be a whole number of scratchpad rows, or a row a whole
    number of segments with the total a whole number of rows.
    """
    row = load_row_bytes(config, dst)
    seg = length * config.port_bytes
    ok = seg % row == 0 or (row % seg == 0 and (count * seg) % row == 0) if seg else False
    if not ok or count < 1:
        raise ValueError(
            f"load of {count} segment(s) of {length} word(s) ({seg} bytes each) cannot be cut "
            f"into {Dst(dst).name.lower()} scratchpad rows of {row} bytes"
        )


def load_context(config: VariantConfig, dst: Dst, ext: int, spad: int, count: int,
                 length: int, stride: int, what: str) -> dict[str, Any]:
    """The template context of one LOAD (macro ``load`` of ``common.j2``), checked.

    ``stride`` is the segment stride in words (unused for one segment).
    """
    check_load(config, count, length, dst)
    if count > FIELD_MAX or length > FIELD_MAX:
        raise ValueError(f"load of {count} segment(s) of {length} words exceeds the 16-bit "
                         f"count/len fields ({FIELD_MAX}); use smaller tiles")
    return {"dst": Dst(dst).name.lower(), "ext": ext, "spad": spad, "count": count,
            "len": length, "stride": stride if count > 1 else 0, "what": what}


def grid_reg(reg: str, init: int, inner: int, outer: int, n_inner: int, n_outer: int, *,
             base: str | None = None, keep: bool = False) -> dict[str, Any]:
    """One register of a job grid (macro ``grid`` of ``common.j2``).

    The register starts at ``init`` (plus register ``base``), or with ``keep`` at the value it
    holds, and moves ``inner`` per inner iteration and ``outer`` per outer iteration. Loops
    of one iteration are not emitted, so the steps they would take are folded into the adjust
    after the inner loop.
    """
    moved = n_inner * inner if n_inner > 1 else 0
    return {"reg": reg, "base": base, "init": init, "keep": keep,
            "inner": inner if n_inner > 1 else 0, "adjust": outer - moved if n_outer > 1 else 0}


def loop_ranges(instrs: Sequence[Instr]) -> list[tuple[int, int]]:
    """``(target, branch)`` index pairs of every backward ``bnzd``: the loop bodies."""
    return [(i.get("target"), n) for n, i in enumerate(instrs)
            if i.op is Op.BNZD and i.get("target") <= n]


def load_bytes(config: VariantConfig, instrs: Sequence[Instr]) -> int:
    """Bytes the program's LOADs read from memory (what the ``bytes_read`` counter counts).

    Static: each LOAD's ``count * len * port_bytes`` times the trip counts of the hardware
    loops around it. The kernels set a loop's counter with ``li`` right before its first
    instruction (and nowhere else), which gives the trip count.

    Raises
    ------
    ValueError
        If a LOAD sits in a loop whose trip count cannot be read that way.
    """
    trips = []
    for lo, hi in loop_ranges(instrs):
        rc = instrs[hi].get("rc")
        setter = instrs[lo - 1] if lo > 0 else None
        ok = setter is not None and setter.op is Op.LI and setter.get("rd") == rc
        trips.append((lo, hi, setter.get("imm") & 0xFFFFFFFF if ok else None))
    total = 0
    for n, instr in enumerate(instrs):
        if instr.op not in (Op.LOAD, Op.LOADW):
            continue
        times = 1
        for lo, hi, count in trips:
            if lo <= n <= hi:
                if not count:
                    raise ValueError(f"instruction {n} (a load) sits in the loop at {lo}..{hi} "
                                     f"whose counter is not set by an li just before it")
                times *= count
        words = (instr.get("len") if instr.op is Op.LOAD
                 else window_words(config.rows, instr.get("shift"), instr.get("step")))
        total += times * instr.get("count") * words * config.port_bytes
    return total
