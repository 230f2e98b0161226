"""Per-channel requantize on the accelerator (CSR req_mode), against the reference."""

import numpy as np
import pytest

from hwgen.asm import assemble
from hwgen.reference import requantize
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow


def test_per_channel_requant_pass_is_bit_exact(v4x4):
    rng = np.random.default_rng(11)
    x = rng.integers(-(1 << 22), 1 << 22, (8, 4)).astype(np.int32)
    mults = np.array([1 << 30, 1518500250, -1900000000, 123456789], np.int32)
    shifts = np.array([30, 38, 33, 25], np.int32)
    group = np.stack([np.zeros(4, np.int32), mults, shifts])  # bias, multipliers, shifts
    program = assemble("""
        li rd=r1, imm=0
        li rd=r2, imm=16
        li rd=r3, imm=8
        li rd=r4, imm=40
        load dst=e32, ext=r1, spad=r3, stride=r0, count=1, len=6
        load dst=e32, ext=r2, spad=r0, stride=r0, count=1, len=16
        csrwi csr=req_mode, imm=1
        csrwi csr=req_zp, imm=3
        wait units=1
        epipass src=r0, out=r4, bias=r3, res=r0, rows=8, mask=0b10, dt=i8
        wait units=7
        halt
    """)
    (result,) = run_programs(v4x4, [Job(program, MemoryImage(
        writes=((0, group.tobytes()), (16, x.tobytes())), reads={"y": (40, 32)}))])
    got = result.outputs["y"].view(np.int8).reshape(8, 4)
    expected = np.stack([requantize(x[:, c], int(mults[c]), int(shifts[c]), 3)
                         for c in range(4)], 1)
    np.testing.assert_array_equal(got, expected)
    # the data tells the modes apart: lane 0's parameters applied to every lane (what a
    # hardware that ignored req_mode would compute) give a different result
    assert not np.array_equal(expected, requantize(x, int(mults[0]), int(shifts[0]), 3))
