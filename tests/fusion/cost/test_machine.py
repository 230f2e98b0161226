"""The unit rules of the analytical model against micro-benchmarks measured on Verilator.

Each micro-benchmark is one phase (a load, a few matmuls, an epilogue pass) followed by
``wait 7; halt``; its ``cycles`` counter was measured on the three variants of
``hwgen.presets.SIM_VARIANTS`` (the simulation tests' variants) and is recorded here, so
the fast test replays the hardware without Verilator. The slow test re-measures them: when
the gateware's timing changes, it fails and names the benchmark, and the recorded numbers
and :mod:`fusion.cost.machine` are updated together.
"""

import pytest

from fusion.cost.machine import Machine
from hwgen.presets import SIM_VARIANTS as DEFAULT_VARIANTS


def mm(k, dt, last=1):
    return f"matmul a=r0, b=r0, out=r0, k={k}, mask=0, dt={dt}, last={last}\n"


def ep(rows, dt):
    return f"epipass src=r0, out=r0, bias=r0, res=r0, rows={rows}, mask=0, dt={dt}\n"


def load(dst, words):
    return f"load dst={dst}, ext=r0, spad=r0, stride=r0, count=1, len={words}\n"


def mms(m, k, lane_bytes, n=1, last=True, setup=0):
    """``n`` MATMULs in straight-line code after ``setup`` other instructions."""
    m.grid(lambda: m.matmul(k, last, lane_bytes), n_inner=n, setup=setup)


def eps(m, n, rows, lane_bytes):
    """``n`` EPIPASSes in straight-line code."""
    m.grid(lambda: m.epipass(rows, lane_bytes), n_inner=n)


#: name -> (program before "wait units=7; halt", the same as Machine phases)
MICRO = {
    "mm16_i8": (mm(16, "i8"), lambda m: mms(m, 16, 1)),
    "mm16_i32": (mm(16, "i32"), lambda m: mms(m, 16, 4)),
    "6mm2_i32": (mm(2, "i32") * 6, lambda m: mms(m, 2, 4, n=6)),
    "6mm2_i8": (mm(2, "i8") * 6, lambda m: mms(m, 2, 1, n=6)),
    "6mm20_i32": (mm(20, "i32") * 6, lambda m: mms(m, 20, 4, n=6)),
    "ep40_i32": (ep(40, "i32"), lambda m: eps(m, 1, 40, 4)),
    "2ep16_i8": (ep(16, "i8") * 2, lambda m: eps(m, 2, 16, 1)),
    "mm_ep": (mm(8, "i32") + ep(8, "i8"),
              lambda m: (mms(m, 8, 4), eps(m, 1, 8, 1))),
    "mm8_nl_mm8": (mm(8, "i32", 0) + mm(8, "i32"),
                   lambda m: (mms(m, 8, 4, last=False), mms(m, 8, 4))),
    "nop_mm": ("nop\n" * 3 + mm(8, "i8") + "nop\n" * 3 + mm(8, "i8"),
               lambda m: (mms(m, 8, 1, setup=3), mms(m, 8, 1, setup=3))),
    "loadb8": (load("b", 8), lambda m: m.load(8 * m.W, m.C)),
    "loadb16x2": (load("b", 16) * 2, lambda m: (m.load(16 * m.W, m.C), m.load(16 * m.W, m.C))),
    "loade32_16": (load("e32", 16), lambda m: m.load(16 * m.W, m.C * 4)),
}

#: Measured ``cycles`` (Verilator, the gateware of this commit).
MEASURED = {
    "2x2": {"mm16_i8": 51, "mm16_i32": 51, "6mm2_i32": 87, "6mm2_i8": 87, "6mm20_i32": 155,
            "ep40_i32": 106, "2ep16_i8": 91, "mm_ep": 60, "mm8_nl_mm8": 51, "nop_mm": 56,
            "loadb8": 27, "loadb16x2": 75, "loade32_16": 27},
    "4x4": {"mm16_i8": 55, "mm16_i32": 59, "6mm2_i32": 115, "6mm2_i8": 111, "6mm20_i32": 163,
            "ep40_i32": 106, "2ep16_i8": 59, "mm_ep": 59, "mm8_nl_mm8": 59, "nop_mm": 64,
            "loadb8": 28, "loadb16x2": 76, "loade32_16": 28},
    "4x8": {"mm16_i8": 71, "mm16_i32": 71, "6mm2_i32": 207, "6mm2_i8": 207,
            "6mm20_i32": 225, "ep40_i32": 186, "2ep16_i8": 155, "mm_ep": 96, "mm8_nl_mm8": 71,
            "nop_mm": 96, "loadb8": 22, "loadb16x2": 46, "loade32_16": 30},
}


def predict(variant: str, name: str) -> int:
    m = Machine(DEFAULT_VARIANTS[variant])
    MICRO[name][1](m)
    m.wait(load=True, feed=True, epi=True)
    return m.seq + 1  # halt, then done


@pytest.mark.parametrize("variant", sorted(MEASURED))
def test_the_rules_reproduce_each_micro_benchmark_exactly(variant):
    got = {name: predict(variant, name) for name in MICRO}
    assert got == MEASURED[variant]


def test_stall_rule_counts_what_the_hardware_counts():
    # 6 tiles of k=2 on 4x4: each tile-ending slice waits 14 - 2 = 12 cycles for the
    # previous tile's drain (rows + cols + 2 + 4 rows); the counter read 60.
    m = Machine(DEFAULT_VARIANTS["4x4"])
    mms(m, 2, 1, n=6)
    assert m.stall == 60


def test_repeat_extrapolates_exactly():
    def walk(extrapolate: bool) -> tuple:
        m = Machine(DEFAULT_VARIANTS["4x8"])
        if not extrapolate:
            m.repeat = lambda count, body: [body() for _ in range(count)]
        for _ in range(3):
            m.repeat(50, lambda: (m.load(256, m.R),
                                  m.grid(lambda: m.matmul(20, True, 1), n_inner=7, n_outer=3,
                                         setup=1, head=1, per_inner=3, per_outer=4),
                                  m.wait(load=True, feed=True)))
            m.repeat(40, lambda: m.grid(lambda: m.epipass(8, 4), n_inner=3, per_inner=2))
        return m.seq, m.idle, m.stall, m.bytes_loaded, m.bytes_stored, m.load_busy

    assert walk(True) == walk(False)


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(MEASURED))
def test_micro_benchmarks_still_measure_as_recorded(variant):
    from hwgen.asm import assemble
    from sim.run import Job, MemoryImage, run_programs

    memory = MemoryImage(writes=((0, bytes(1024)),), reads={"o": (0, 8)})
    jobs = [Job(program=assemble(text + "wait units=7\nhalt\n"), memory=memory, name=name)
            for name, (text, _) in MICRO.items()]
    results = run_programs(DEFAULT_VARIANTS[variant], jobs)
    assert {name: r.cycles for name, r in zip(MICRO, results, strict=True)} == MEASURED[variant]
