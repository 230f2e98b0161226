from pathlib import Path

import pytest

from hwgen.isa import Instr, IsaError, Op, decode, encode, isa_markdown

DOC = Path(__file__).parents[2] / "docs" / "isa.md"


def test_checked_in_isa_doc_is_generated_from_the_table():
    assert DOC.read_text() == isa_markdown(), "regenerate docs/isa.md from hwgen.isa.isa_markdown()"


def test_decode_refuses_unknown_opcode_and_stray_bits():
    with pytest.raises(IsaError, match="unknown opcode 63"):
        decode(63 << 58)
    with pytest.raises(IsaError, match="sets bits its opcode does not use"):
        decode(encode(Instr(Op.HALT)) | 1)


def test_field_range_is_checked():
    with pytest.raises(IsaError, match="k=70000 is out of range"):
        Instr(Op.MATMUL, {"k": 70000})
    with pytest.raises(IsaError, match="has no field"):
        Instr(Op.HALT, {"k": 1})
