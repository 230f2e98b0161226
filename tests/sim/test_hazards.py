"""Ordering guarantees of WAIT, checked where a race would show: a WAIT issued in the very
next cycle after the LOAD or MATMUL it waits for."""

import numpy as np
import pytest

from hwgen.asm import assemble
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow


def test_wait_right_behind_a_load_and_a_job_sees_them(v4x4):
    rng = np.random.default_rng(0)
    acc = rng.integers(-5000, 5000, (16, 4)).astype(np.int32)
    program = assemble("""
        li rd=r1, imm=48
        li rd=r4, imm=80
        load dst=e32, ext=r1, spad=r0, stride=r0, count=1, len=32
        wait units=1
        epipass src=r0, out=r4, bias=r0, res=r0, rows=16, mask=0, dt=i8
        wait units=4
        load dst=e8, ext=r4, spad=r0, stride=r0, count=1, len=8
        wait units=1
        li rd=r5, imm=120
        epipass src=r0, out=r5, bias=r0, res=r0, rows=16, mask=0, dt=i32
        wait units=7
        halt
    """)
    (result,) = run_programs(v4x4, [Job(program, MemoryImage(
        writes=((48, acc.tobytes()),), reads={"i8": (80, 64), "i32": (120, 256)}))])
    low = acc.astype(np.int8)
    np.testing.assert_array_equal(result.outputs["i8"].view(np.int8).reshape(16, 4), low)
    np.testing.assert_array_equal(result.outputs["i32"].view(np.int32).reshape(16, 4), low)
