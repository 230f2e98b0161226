"""Counter invariants: the ISA-level interpreter counts what a program makes the hardware do,
and check_counters names every counter that disagrees (no simulator needed)."""

import pytest

from fusion.cost.analytical import estimate
from fusion.kernels.eltmax.kind import compiled_max
from fusion.kernels.epipass.kind import compiled_pass
from fusion.kernels.gemm.kind import compiled_gemm
from fusion.kernels.tiling import Tiling
from fusion.runtime.invariants import (
    UnfinishedProgram,
    Violation,
    check_counters,
    check_runs,
    count_program,
    timing_floor,
)
from hwgen.asm import assemble
from hwgen.config import EPILOGUE_STAGES
from hwgen.presets import SIM_VARIANTS, SMALL
from hwgen.reference import EpilogueParams

CONFIG = SIM_VARIANTS["4x4"]  # 4 x 4 array, 8-byte port

LOOP = """
    li rd=r1, imm=3
loop:
    load dst=a, ext=r0, spad=r0, stride=r0, count=2, len=3
    matmul a=r0, b=r0, out=r0, bias=r0, res=r0, k=5, mask=0, dt=i8, last=1
    matmul a=r0, b=r0, out=r0, bias=r0, res=r0, k=7, mask=0, dt=i32, last=0
    bnzd rc=r1, target=loop
    epipass src=r0, out=r0, bias=r0, res=r0, rows=2, mask=0, dt=i32
    wait units=7
    halt
"""


def test_the_interpreter_follows_the_loops_and_counts_every_unit():
    counts = count_program(CONFIG, assemble(LOOP), max_instructions=1000)
    assert counts.instret == 1 + 3 * 4 + 3  # li, three passes of the body, epipass wait halt
    assert counts.bytes_read == 3 * 2 * 3 * CONFIG.port_bytes
    assert counts.k_slices == 3 * (5 + 7)
    # a tile-ending int8 MATMUL stores rows x cols bytes; the pass two int32 rows
    assert counts.bytes_written == 3 * 4 * 4 + 2 * 4 * 4
    assert counts.epilogue_rows == 3 * 4 + 2
    assert counts.ideal_cycles(CONFIG) == 36  # the k-slices dominate


def test_a_program_without_a_halt_or_looping_forever_is_unfinished():
    with pytest.raises(UnfinishedProgram, match="past its last word"):
        count_program(CONFIG, assemble("nop\nnop"), max_instructions=100)
    with pytest.raises(UnfinishedProgram, match="more than 100"):
        count_program(CONFIG, assemble("li rd=r1, imm=0\nloop:\nbnzd rc=r1, target=loop\nhalt"),
                      max_instructions=100)


KERNELS = [
    lambda c: compiled_gemm(c, 19, 40, 23, stages=c.epilogue),
    lambda c: compiled_gemm(c, 64, 64, 64, stages=("bias", "requant", "relu"), fused=False),
    lambda c: compiled_gemm(c, 40, 100, 44, stages=("requant", "clamp", "residual"),
                            tiling=Tiling(tm=1, tn=1, kt=8)),
    lambda c: compiled_gemm(c, 60, 100, 36, tiling=Tiling(tm=1, tn=1, kt=8,
                                                         double_buffer=False)),
    lambda c: compiled_pass(c, 24, 16, stages=("requant", "relu"),
                            params=EpilogueParams(mult=3 << 28, shift=33),
                            src_dtype="int32", out_dtype="int8"),
    lambda c: compiled_max(c, 24, c.cols, 4),
]


@pytest.mark.parametrize("config", [CONFIG, SMALL], ids=["4x4", "small"])
@pytest.mark.parametrize("make", KERNELS)
def test_the_interpreter_agrees_with_the_kernels_own_figures(config, make):
    """Two independent derivations: the interpreter runs the words; the kernel's metadata
    reads the loads statically and the builder adds up its stores."""
    kernel = make(config)
    counts = count_program(config, kernel.program, max_instructions=10**7)
    assert counts.bytes_read == kernel.bytes_loaded
    assert counts.bytes_written == kernel.bytes_stored


@pytest.mark.parametrize("fused", [True, False])
def test_the_interpreter_agrees_with_the_analytical_walk(fused):
    """The cost model walks the templates' contexts, not the words: a third derivation of
    the instruction count and the k-slices."""
    kernel = compiled_gemm(SMALL, 52, 72, 44, stages=("bias", "requant", "relu"), fused=fused)
    counts = count_program(SMALL, kernel.program, max_instructions=10**7)
    est = estimate(kernel.kind.features(SMALL, kernel.signature))
    assert (counts.instret, counts.k_slices) == (est.instret, est.k_slices)


def _counters(config, words, **changes):
    """The counters a correct run of ``words`` shows, with ``changes``."""
    c = count_program(config, words, max_instructions=10**7)
    counters = {"cycles": 3 * c.ideal_cycles(config), "array_busy": c.k_slices,
                "stall_memory": 5, "stall_epilogue": 0, "bytes_read": c.bytes_read,
                "bytes_written": c.bytes_written, "instret": c.instret}
    return {**counters, **changes}


def test_consistent_counters_pass():
    words = compiled_gemm(CONFIG, 19, 40, 23, stages=EPILOGUE_STAGES).program
    assert check_counters(CONFIG, words, _counters(CONFIG, words)) == []


def test_each_broken_invariant_is_named_with_expected_and_measured():
    words = compiled_gemm(CONFIG, 19, 40, 23, stages=EPILOGUE_STAGES).program
    good = _counters(CONFIG, words)
    # bytes_written counting write beats instead of bytes (the mutant)
    beats = good["bytes_written"] // CONFIG.port_bytes
    (v,) = check_counters(CONFIG, words, {**good, "bytes_written": beats})
    assert (v.counter, v.expected, v.measured) == ("bytes_written", good["bytes_written"], beats)
    assert f"reads {beats:,}, but the program implies == {good['bytes_written']:,}" in str(v)
    found = check_counters(CONFIG, words, {**good, "instret": good["instret"] - 1,
                                           "array_busy": good["array_busy"] + 4,
                                           "bytes_read": 0})
    assert {v.counter for v in found} == {"instret", "array_busy", "bytes_read"}


def test_cycles_below_the_ideal_or_busy_and_stalled_at_once_are_violations():
    words = compiled_gemm(CONFIG, 32, 96, 40).program
    good = _counters(CONFIG, words)
    slices = good["array_busy"]
    v = check_counters(CONFIG, words, {**good, "cycles": slices - 1})[0]
    assert v.counter == "cycles" and v.relation == ">=" and v.expected == slices
    # the caller's own ideal (a GEMM's M*N*K / (rows*cols)) counts too
    (v,) = check_counters(CONFIG, words, good, ideal_cycles=good["cycles"] + 1)
    assert v.counter == "cycles"
    (v,) = check_counters(CONFIG, words, {**good, "stall_epilogue": good["cycles"]})
    assert v.counter == "array_busy + stall_epilogue"


def test_a_run_too_short_for_its_program_is_a_cycles_violation():
    words = assemble("li rd=r1, imm=1000\nloop:\nbnzd rc=r1, target=loop\nhalt")
    (v,) = check_counters(CONFIG, words, _counters(CONFIG, words, cycles=50))
    assert v.counter == "cycles" and "cannot have finished" in str(v)


def test_violation_text_names_the_counter_and_both_values():
    v = Violation("instret", "==", 10, 9, "instructions the program retires")
    assert str(v) == ("counter instret reads 9, but the program implies == 10 (instructions "
                      "the program retires)")


def test_a_run_faster_than_the_timing_model_allows_is_a_violation():
    """A WAIT that ignores the compute unit leaves the outputs right when its race is lost
    harmlessly, but the run then beats the analytical model of correct hardware."""
    kernel = compiled_max(CONFIG, 36, CONFIG.cols, 4)  # three chained residual-max passes
    predicted = kernel.kind.features(CONFIG, kernel.signature).analytical_cycles()
    floor = timing_floor(CONFIG, kernel.program, predicted)
    assert predicted - predicted // 10 < floor < predicted  # a margin of a few percent
    good = _counters(CONFIG, kernel.program, cycles=predicted)
    assert check_counters(CONFIG, kernel.program, good, floor_cycles=floor) == []
    fast = {**good, "cycles": floor - 1}
    (v,) = check_counters(CONFIG, kernel.program, fast, floor_cycles=floor)
    assert v.counter == "cycles" and v.expected == floor and "timing model" in str(v)


def test_several_runs_of_one_program_are_each_checked():
    # a kernel and its directed input sets: one interpretation, one verdict per run
    words = compiled_gemm(CONFIG, 19, 40, 23, stages=EPILOGUE_STAGES).program
    good = _counters(CONFIG, words)
    beats = good["bytes_written"] // CONFIG.port_bytes
    too_short = {**good, "cycles": good["instret"] - 1}
    ok, bad, short = check_runs(CONFIG, words, [good, {**good, "bytes_written": beats},
                                                too_short])
    assert ok == [] and [v.counter for v in bad] == ["bytes_written"]
    assert [v.counter for v in short] == ["cycles"]
    assert "cannot have finished in that time" in str(short[0])
    assert short == check_counters(CONFIG, words, too_short)
