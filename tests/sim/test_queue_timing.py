"""The analytical model's queue rules on Verilator: random programs of window loads (LOADW,
with and without ``keep``, 1 to 3 rows of 1 to 3 words) and runs of MATMULs, in which the
load queue and the job queue fill and the sequencer waits for room, take exactly the
predicted cycles (:func:`fusion.cost.analytical.estimate_program`). A full queue has room
again the cycle after its unit took the oldest command; a model one cycle early there passes
the single-phase micro-benchmarks but not these."""

import random
import re

import pytest

from fusion.cost.analytical import estimate_program
from hwgen.asm import assemble, assemble_instrs
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow

V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)


def _program(rng: random.Random) -> str:
    """Weights in B, then a few rounds of up to 9 matmuls and up to 12 window loads."""
    lines = ["li rd=r3, imm=40", "li rd=r4, imm=8", "li rd=r5, imm=3", "li rd=r7, imm=64",
             "load dst=b, ext=r7, spad=r0, stride=r7, count=1, len=64", "li rd=r8, imm=2048"]
    for _ in range(rng.randint(1, 4)):
        for _ in range(rng.randint(0, 9)):
            lines.append(f"li rd=r6, imm={rng.randint(0, 40)}")
            lines.append(f"matmul a=r6, b=r0, out=r8, bias=r0, res=r0, "
                         f"k={rng.choice([8, 16, 40])}, mask=0, dt=i8, last=1")
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.5:
                lines.append(f"li rd=r1, imm={rng.randint(0, 40)}")
            lines.append(f"loadw ext=r1, spad=r2, stride=r3, next=r4, fill=r5, "
                         f"step={rng.choice([1, 2])}, count={rng.choice([1, 2, 3, 8])}, "
                         f"shift={rng.randint(0, 7)}, mask={rng.randint(0, 255)}, "
                         f"keep={rng.randint(0, 1)}")
        if rng.random() < 0.3:
            lines.append("wait units=3")
    return "\n".join(lines + ["wait units=7", "halt"])


def _mispredicted(texts: list[str], name: str) -> list[tuple[int, int, int]]:
    """Run the programs on Verilator (one launch); (index, predicted, measured) of each whose
    cycles the model does not predict exactly."""
    from sim.build import build_variant

    build_variant(V8)
    memory = MemoryImage(writes=((0, bytes(range(256)) * 16),), reads={})
    results = run_programs(V8, [Job(program=assemble(t), memory=memory, name=f"{name} {i}")
                                for i, t in enumerate(texts)])
    predicted = [estimate_program(V8, assemble_instrs(t)) for t in texts]
    return [(i, p, r.counters["cycles"])
            for i, (p, r) in enumerate(zip(predicted, results, strict=True))
            if p != r.counters["cycles"]]


def test_random_load_and_matmul_programs_take_the_predicted_cycles():
    rng = random.Random(7)
    texts = [_program(rng) for _ in range(80)]
    off = _mispredicted(texts, "random")
    assert not off, off
    # the programs do fill the queues: some wait on a full job queue, some on loads
    assert any(t.count("matmul") >= 6 for t in texts)


def _streaming_program(rng: random.Random) -> str:
    """Loads of B chunks into a ring of slots, matmuls over them, and counted WAITs between
    (``left`` 1 to 3 on the load unit, the feed unit or both), as a streaming GEMM has them:
    and some plain ones."""
    lines = ["li rd=r8, imm=2048", "li rd=r1, imm=0"]
    for _ in range(rng.randint(4, 14)):
        length = rng.choice([1, 4, 8, 16, 32])
        lines.append(f"li rd=r2, imm={rng.choice([0, 32, 64, 96])}")
        for _ in range(rng.randint(1, 3)):
            dst = rng.choice(["a", "b", "e32"])  # an e32 row is four words
            lines.append(f"load dst={dst}, ext=r1, spad=r2, stride=r0, count=1, "
                         f"len={4 * length if dst == 'e32' else length}")
            lines.append(f"addi rd=r1, rs=r1, imm={length}")
        for _ in range(rng.randint(0, 3)):
            lines.append(f"matmul a=r0, b=r2, out=r8, bias=r0, res=r0, "
                         f"k={rng.choice([4, 8, 16, 32])}, mask=0, dt=i8, "
                         f"last={rng.randint(0, 1)}")
        units = rng.choice([1, 2, 3, 1, 3])
        left = rng.choice([0, 1, 1, 2, 3])
        lines.append(f"wait units={units}, left={left}")
    return "\n".join(lines + ["matmul a=r0, b=r0, out=r8, bias=r0, res=r0, k=8, mask=0, "
                              "dt=i8, last=1", "wait units=7", "halt"])


def test_counted_waits_take_the_predicted_cycles():
    """A counted WAIT retires when all but the newest ``left`` loads have written their last
    row, and all but the newest ``left`` jobs have read their operands: exactly when the
    model says, in random programs where it waits on the loads, the array or both."""
    rng = random.Random(11)
    texts = [_streaming_program(rng) for _ in range(80)]
    off = _mispredicted(texts, "counted")
    assert not off, off
    # most programs have counted waits, and the waits do hold programs up (a program whose
    # counted waits were all plain ones would take longer)
    assert sum(t.count(", left=") - t.count(", left=0") > 0 for t in texts) > 60
    plain = [re.sub(r", left=\d+", "", t) for t in texts]
    assert sum(estimate_program(V8, assemble_instrs(p)) > estimate_program(V8, assemble_instrs(t))
               for p, t in zip(plain, texts, strict=True)) > 30
