"""Text assembler and disassembler for the microcode ISA of :mod:`hwgen.isa`.

Syntax (also in ``docs/isa.md``)::

    # a comment, to the end of the line
    loop:                                   # a label, on a line of its own
        matmul a=r6, b=r7, out=r8, k=16, mask=0b101, dt=i8, last=1
        bnzd rc=r12, target=loop            # branch targets by label or index

One instruction a line: the opcode, then ``field=value`` pairs separated by commas, in any order.
Registers are ``r0``..``r15``; enumerations by name (``dst=a``, ``dt=i8``, ``csr=req_mult``)
or number; integers in any Python base (``0x10``, ``0b101``, ``-3``). A field left out is 0.
Errors are :class:`AsmError` and start with the line number.

:func:`disassemble` prints every field, names branch targets ``L<index>``, and is the inverse
of :func:`assemble`: ``assemble(disassemble(words)) == words`` for every decodable program.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from hwgen.isa import NUM_REGS, OPCODES, Field, Instr, IsaError, Op, decode, encode

__all__ = ["AsmError", "assemble", "assemble_instrs", "disassemble", "format_instr"]

_LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*:$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_REG = re.compile(r"^[rR](\d+)$")
_OPS = {op.name.lower(): op for op in Op}


class AsmError(ValueError):
    """An assembly error; the message starts with ``line N:``."""


def _strip(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _int(text: str) -> int:
    # int(text, 0) takes 0x/0o/0b prefixes, a sign and underscores.
    return int(text, 0)


def _value(f: Field, text: str, labels: dict[str, int]) -> int:
    if f.kind == "reg":
        m = _REG.match(text)
        if not m or not 0 <= int(m.group(1)) < NUM_REGS:
            raise ValueError(f"field {f.name} needs a register r0..r{NUM_REGS - 1}, not {text!r}")
        return int(m.group(1))
    if f.kind == "label" and _NAME.match(text):
        if text not in labels:
            raise ValueError(f"undefined label {text!r}")
        return labels[text]
    if f.enum is not None and _NAME.match(text):
        names = {m.name.lower(): int(m) for m in f.enum}
        if text.lower() not in names:
            raise ValueError(
                f"field {f.name} takes {', '.join(names)} (or a number), not {text!r}"
            )
        return names[text.lower()]
    try:
        return _int(text)
    except ValueError:
        raise ValueError(f"field {f.name} needs an integer, not {text!r}") from None


def _parse(body: str, labels: dict[str, int]) -> Instr:
    opname, rest = (body.split(None, 1) + [""])[:2]
    op = _OPS.get(opname.lower())
    if op is None:
        raise ValueError(f"unknown opcode {opname!r}; the opcodes are {', '.join(_OPS)}")
    fields = {f.name: f for f in OPCODES[op][0]}
    args: dict[str, int] = {}
    rest = rest.strip()
    for item in rest.split(",") if rest else ():
        name, eq, text = (s.strip() for s in item.partition("="))
        if not eq or not name or not text:
            raise ValueError(f"expected field=value, not {item.strip()!r}")
        if name not in fields:
            raise ValueError(
                f"{opname.lower()} has no field {name!r}; its fields are "
                f"{', '.join(fields) or 'none'}"
            )
        if name in args:
            raise ValueError(f"field {name} is given twice")
        args[name] = _value(fields[name], text, labels)
    return Instr(op, args)


#: Opcodes with a field that may name a label (a branch's target).
_LABEL_OPS = frozenset(op.name.lower() for op in Op
                       if any(f.kind == "label" for f in OPCODES[op][0]))


@functools.lru_cache(maxsize=1 << 16)
def _parse_plain(body: str) -> Instr:
    """:func:`_parse` of a body whose opcode names no label, cached: the compiler's schedule
    search assembles many programs of the same few hundred lines. (Instr is frozen and
    nothing changes its fields, so programs may share one.)"""
    return _parse(body, {})


def assemble_instrs(text: str) -> list[Instr]:
    """Assemble source text into decoded instructions (see :func:`assemble`)."""
    lines = text.splitlines()
    labels: dict[str, int] = {}
    bodies: list[tuple[int, str]] = []
    for number, line in enumerate(lines, 1):
        body = _strip(line)
        if not body:
            continue
        if ":" in body:
            m = _LABEL.match(body)
            if not m:
                raise AsmError(
                    f"line {number}: a label is a name followed by ':' on a line of its own, "
                    f"not {body!r}"
                )
            if m.group(1) in labels:
                raise AsmError(f"line {number}: label {m.group(1)!r} is defined twice")
            labels[m.group(1)] = len(bodies)
            continue
        bodies.append((number, body))
    program = []
    for number, body in bodies:
        try:
            label = body.split(None, 1)[0].lower() in _LABEL_OPS
            program.append(_parse(body, labels) if label else _parse_plain(body))
        except (ValueError, IsaError) as exc:
            raise AsmError(f"line {number}: {exc}") from None
    return program


def assemble(text: str) -> list[int]:
    """Assemble source text into 64-bit instruction words.

    Parameters
    ----------
    text : str
        Assembly source in the syntax of this module's docstring.

    Returns
    -------
    list of int
        One word per instruction, in order; a label names the index of the next instruction.

    Raises
    ------
    AsmError
        Naming the line and the problem (unknown opcode or field, bad or out-of-range value,
        undefined or duplicate label).
    """
    return [encode(instr) for instr in assemble_instrs(text)]


def format_instr(instr: Instr, labels: dict[int, str] | None = None) -> str:
    """One instruction in assembler syntax, every field spelled out."""
    parts = []
    for f in OPCODES[instr.op][0]:
        value = instr.get(f.name)
        if f.kind == "reg":
            text = f"r{value}"
        elif f.kind == "label" and labels and value in labels:
            text = labels[value]
        elif f.enum is not None and value in set(f.enum):
            text = f.enum(value).name.lower()
        elif f.name == "mask":  # one bit per stage: binary reads best
            text = f"{value:#b}"
        else:
            text = str(value)
        parts.append(f"{f.name}={text}")
    name = instr.op.name.lower()
    return f"{name} {', '.join(parts)}" if parts else name


def disassemble(words: Iterable[int]) -> str:
    """Disassemble instruction words into source that :func:`assemble` maps back to them.

    Raises
    ------
    hwgen.isa.IsaError
        If a word does not decode (unknown opcode or stray bits), naming its index.
    """
    instrs = []
    for index, word in enumerate(words):
        try:
            instrs.append(decode(word))
        except IsaError as exc:
            raise IsaError(f"word {index}: {exc}") from None
    # Only targets inside the program (or just past its end) get a label; others stay numbers.
    targets = {i.get("target") for i in instrs if i.op is Op.BNZD}
    labels = {t: f"L{t}" for t in sorted(targets) if t <= len(instrs)}
    lines = []
    for index, instr in enumerate(instrs):
        if index in labels:
            lines.append(f"{labels[index]}:")
        lines.append(f"    {format_instr(instr, labels)}")
    if len(instrs) in labels:
        lines.append(f"{labels[len(instrs)]}:")
    return "\n".join(lines) + "\n"
