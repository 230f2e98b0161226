"""LOADW, the load engine's window load (implicit im2col), on Verilator: the A rows it writes,
seen through a MATMUL with an identity B (out[r][c] = A[c][r]), equal the numpy model of the
instruction (:func:`hwgen.reference.window_load`) for every shift, both lane steps, masks and
fills; and the analytical model prices it exactly."""

import numpy as np
import pytest

from fusion.cost.machine import Machine
from hwgen.asm import assemble
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from hwgen.reference import window_load
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow

#: The smallest array whose A row is one memory word.
#: With the window unit, which these programs do not use, to share the build of
#: test_window_kind.py and test_window_unit.py.
V4P4 = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES, window_unit=True)


def _program(shift, step, mask, fill, count):
    """LOADW ``count`` rows; an identity B (4 rows); MATMUL over them; store int32."""
    loadw = (f"loadw ext=r1, spad=r2, stride=r3, next=r4, fill=r5, step={step}, "
             f"count={count}, shift={shift}, mask={mask}")
    return assemble(f"""
        li rd=r1, imm=16
        li rd=r2, imm=0
        li rd=r3, imm=3
        li rd=r4, imm=1
        li rd=r5, imm={fill}
        {loadw}
        li rd=r6, imm=0
        li rd=r7, imm=4
        load dst=b, ext=r6, spad=r0, stride=r7, count=1, len=4
        wait units=1
        li rd=r8, imm=64
        matmul a=r0, b=r0, out=r8, bias=r0, res=r0, k={count}, mask=0, dt=i32, last=1
        wait units=7
        halt
    """)


CASES = [(shift, step, mask, fill) for shift in range(4) for step in (1, 2)
         for mask, fill in ((0b1111, 0), (0b0110, -3), (0b1001, 0x7F))]


@pytest.fixture(scope="module")
def results():
    from sim.build import build_variant

    build_variant(V4P4)
    rng = np.random.default_rng(11)
    jobs, mems = [], []
    for shift, step, mask, fill in CASES:
        mem = np.zeros(64 * 4, np.uint8)
        mem[16 * 4:48 * 4] = rng.integers(0, 256, 32 * 4, dtype=np.uint8)
        mem[0:16] = np.eye(4, dtype=np.uint8).reshape(-1)  # B = identity, word 0..3
        jobs.append(Job(program=_program(shift, step, mask, fill, 4),
                        memory=MemoryImage(writes=((0, mem[:48 * 4].tobytes()),),
                                           reads={"out": (64, 64)}),
                        name=f"loadw shift={shift} step={step} mask={mask:#06b}"))
        mems.append(mem)
    return list(zip(CASES, mems, run_programs(V4P4, jobs), strict=True))


def test_loadw_rows_match_the_instruction_model(results):
    for (shift, step, mask, fill), mem, result in results:
        want = window_load(mem, 4, 4, ext=16, stride=3, next=1, count=4, shift=shift,
                           step=step, mask=mask, fill=fill)
        got = np.frombuffer(bytes(result.outputs["out"]), "<i4").reshape(4, 4).T
        np.testing.assert_array_equal(got, want.astype(np.int32), err_msg=str((shift, step)))


def test_loadw_reads_only_the_words_a_row_needs(results):
    for (shift, step, _, _), _, result in results:
        words = (shift + 3 * step) // 4 + 1
        assert result.counters["bytes_read"] == 4 * (4 * words + 4)  # the rows, then B


def test_a_loadw_is_priced_like_the_words_it_reads(results):
    for (shift, step, _, _), _, result in results:
        m = Machine(V4P4)
        words = (shift + 3 * step) // 4 + 1
        m.instrs(5)
        m.load(4 * words * 4, 4)
        m.instrs(2)
        m.load(16, 4, setup=0)
        m.wait(load=True)
        m.instrs(1)
        m.matmul(4, True, 4)
        m.wait(load=True, feed=True, epi=True)
        assert m.seq + 1 == result.counters["cycles"], (shift, step)


def _keep_program(first, second):
    """Two LOADWs into the same 4 rows: ``first`` (shift, step, mask), then ``second``
    (shift, step, mask) with ``keep`` from 8 words further on; MATMUL with an identity B."""
    loads = []
    for (shift, step, mask), keep, ext in ((first, 0, 16), (second, 1, 24)):
        loads.append(f"li rd=r1, imm={ext}")
        loads.append(f"loadw ext=r1, spad=r2, stride=r3, next=r4, fill=r5, step={step}, "
                     f"count=4, shift={shift}, mask={mask}, keep={keep}")
    body = "\n        ".join(loads)
    return assemble(f"""
        li rd=r2, imm=0
        li rd=r3, imm=3
        li rd=r4, imm=1
        li rd=r5, imm=-7
        {body}
        li rd=r6, imm=0
        li rd=r7, imm=4
        load dst=b, ext=r6, spad=r0, stride=r7, count=1, len=4
        wait units=1
        li rd=r8, imm=64
        matmul a=r0, b=r0, out=r8, bias=r0, res=r0, k=4, mask=0, dt=i32, last=1
        wait units=7
        halt
    """)


#: (first, second) LOADWs, each (shift, step, mask): the second keeps the lanes outside its
#: mask, as a block spanning two output rows loads them (lanes 0..r-1 from one row, r.. from
#: the next), and masks that overlap or leave lanes to the first's fill.
KEEP_CASES = [((1, 1, 0b0011), (2, 1, 0b1100)), ((3, 2, 0b0001), (0, 2, 0b1110)),
              ((0, 1, 0b0110), (2, 2, 0b1000)), ((2, 1, 0b1111), (1, 1, 0b0101)),
              ((0, 1, 0b0000), (3, 1, 0b0011))]


@pytest.fixture(scope="module")
def keep_results():
    from sim.build import build_variant

    build_variant(V4P4)
    rng = np.random.default_rng(12)
    jobs, mems = [], []
    for first, second in KEEP_CASES:
        mem = np.zeros(64 * 4, np.uint8)
        mem[16 * 4:48 * 4] = rng.integers(0, 256, 32 * 4, dtype=np.uint8)
        mem[0:16] = np.eye(4, dtype=np.uint8).reshape(-1)
        jobs.append(Job(program=_keep_program(first, second),
                        memory=MemoryImage(writes=((0, mem[:48 * 4].tobytes()),),
                                           reads={"out": (64, 64)}),
                        name=f"loadw keep {first} {second}"))
        mems.append(mem)
    return list(zip(KEEP_CASES, mems, run_programs(V4P4, jobs), strict=True))


def test_loadw_keep_merges_into_the_old_rows(results, keep_results):
    for (first, second), mem, result in keep_results:
        args = {"stride": 3, "next": 1, "count": 4, "fill": -7}
        old = window_load(mem, 4, 4, ext=16, shift=first[0], step=first[1], mask=first[2],
                          **args)
        want = window_load(mem, 4, 4, ext=24, shift=second[0], step=second[1],
                           mask=second[2], keep=True, old=old, **args)
        got = np.frombuffer(bytes(result.outputs["out"]), "<i4").reshape(4, 4).T
        np.testing.assert_array_equal(got, want.astype(np.int32), err_msg=str((first, second)))
        # the kept lanes are the first load's, not the fill or memory
        kept = [r for r in range(4) if not second[2] >> r & 1]
        np.testing.assert_array_equal(want[:, kept], old[:, kept])


def test_a_keep_loadw_is_priced_like_the_words_it_reads(keep_results):
    for (first, second), _, result in keep_results:
        m = Machine(V4P4)
        m.instrs(4)
        for shift, step, _ in (first, second):
            words = (shift + 3 * step) // 4 + 1
            m.instrs(1)
            m.load(4 * words * 4, 4, row_words=words)
        m.instrs(2)
        m.load(16, 4, setup=0)
        m.wait(load=True)
        m.instrs(1)
        m.matmul(4, True, 4)
        m.wait(load=True, feed=True, epi=True)
        assert m.seq + 1 == result.counters["cycles"], (first, second)
