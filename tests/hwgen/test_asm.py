"""The text assembler and disassembler: round trips over random instructions, and errors."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwgen.asm import AsmError, assemble, assemble_instrs, disassemble, format_instr
from hwgen.isa import OPCODES, Instr, IsaError, Op, decode, encode


@st.composite
def instrs(draw):
    op = draw(st.sampled_from(list(Op)))
    args = {}
    for f in OPCODES[op][0]:
        if f.kind == "sint":
            lo, hi = -(1 << (f.width - 1)), (1 << (f.width - 1)) - 1
        else:
            lo, hi = 0, (1 << f.width) - 1
        args[f.name] = draw(st.integers(lo, hi))
    return Instr(op, args)


@given(instrs())
def test_encode_decode_round_trip(instr):
    assert decode(encode(instr)) == instr


@given(st.lists(instrs(), max_size=40))
def test_assemble_disassemble_round_trip(program):
    words = [encode(i) for i in program]
    text = disassemble(words)
    assert assemble(text) == words
    assert disassemble(assemble(text)) == text  # the listing is canonical


@given(instrs())
def test_format_instr_assembles_back(instr):
    assert assemble(format_instr(instr)) == [encode(instr)]


def test_syntax_features():
    text = """
        # comments, blank lines, labels, bases and enum names
    top:
        li rd=r1, imm=0x10          # hex
        li rd=R2, imm=-0b101        # negative binary, upper-case register
        LOAD dst=E8, ext=r1, spad=r2, stride=r0, count=1, len=1_000
        csrwi csr=req_zp, imm=-3
        matmul a=r1, b=r2, k=8, dt=i8, last=1   # omitted fields are 0
        bnzd rc=r3, target=top
        bnzd rc=r3, target=end
        halt
    end:
    """
    program = assemble_instrs(text)
    assert program[0] == Instr(Op.LI, {"rd": 1, "imm": 16})
    assert program[1].get("imm") == -5
    assert program[2].args == {"dst": 3, "ext": 1, "spad": 2, "stride": 0, "count": 1,
                               "len": 1000}
    assert program[3].args == {"csr": 2, "imm": -3}
    assert program[4].get("mask") == 0 and program[4].get("bias") == 0
    assert program[5].get("target") == 0
    assert program[6].get("target") == 8  # a label at the very end
    assert assemble("bnzd rc=r1, target=3") == [encode(Instr(Op.BNZD, {"rc": 1, "target": 3}))]


def test_unsigned_spelling_of_a_32_bit_immediate():
    assert assemble("li rd=r1, imm=0xFFFFFFFF") == assemble("li rd=r1, imm=-1")


def test_disassembly_labels_branch_targets():
    words = assemble("a:\n nop\n bnzd rc=r1, target=a\n bnzd rc=r1, target=500\n")
    text = disassemble(words)
    assert "L0:" in text and "target=L0" in text and "target=500" in text


def test_disassemble_names_a_bad_word():
    with pytest.raises(IsaError, match="word 1: .*unknown opcode"):
        disassemble([0, 63 << 58])


@pytest.mark.parametrize("text, message", [
    ("nop\nfoo r1", "line 2: unknown opcode 'foo'"),
    ("li rd=r1, imm=1, rs=r2", "line 1: li has no field 'rs'"),
    ("li rd=r1, rd=r2", "line 1: field rd is given twice"),
    ("li rd=r16", "line 1: field rd needs a register r0..r15, not 'r16'"),
    ("li rd=x1", "line 1: field rd needs a register"),
    ("li rd=r1, imm=zz", "line 1: field imm needs an integer, not 'zz'"),
    ("li rd=r1, imm", "line 1: expected field=value, not 'imm'"),
    ("li rd=r1,", "line 1: expected field=value"),
    ("\n\nbnzd rc=r1, target=nowhere", "line 3: undefined label 'nowhere'"),
    ("x:\nx:\nnop", "line 2: label 'x' is defined twice"),
    ("x: nop", "line 1: a label is a name followed by ':' on a line of its own"),
    ("load dst=c", "line 1: field dst takes a, b, e32, e8, z .*, not 'c'"),
    ("wait units=8", "line 1: wait field units=8 is out of range 0..7"),
    ("li rd=r1, imm=0x100000000", "line 1: li field imm=4294967296 is out of range"),
])
def test_errors_name_the_line_and_problem(text, message):
    with pytest.raises(AsmError, match=message):
        assemble(text)
