"""Window convolutions in the column-chunk schedules beside the plain one, on Verilator, bit
for bit against a direct convolution and predicted exactly by the analytical model:

- *looped*: the chunks in a hardware loop (:class:`~fusion.kernels.conv.loops.ChunkLoop`),
  where unrolled the program exceeds the instruction memory, plain and banked, the last
  chunk narrower where the column blocks do not divide, and chunks narrower than the B
  scratchpad allows where only those fit looped (:func:`~fusion.kernels.conv.program.
  plain_plan`);
- *prefetch*: each chunk loading the next one's weights into the other B half while it
  computes (:func:`~fusion.kernels.conv.program.b_prefetch`), with one step (whose windows
  every chunk then shares) and with several;
- *deep*: banked, windows deeper than the A scratchpad (no plain program exists), streamed
  chunk by chunk, or their first rows resident and the rest streamed, one block a step or
  two;
- banked with resident windows, unrolled, its equal steps folded into a loop (each step's
  code relative to its input and output bases);
- with *own bias rows* (:func:`~fusion.kernels.conv.program.bias_windowed`): per-channel
  parameters of more column blocks than the epilogue scratchpad holds at three rows each,
  each chunk loading its own, prefetching and plain (with a residual).

Each is a shape the compiler used to refuse (a program too long, windows too deep) or price
dearer than the host's im2col and the GEMM: 3x3 convolutions of 64 to 320 channels and 1x1
convolutions of 128 on the 4x4 with 4-byte words and the 8x8."""

import dataclasses

import numpy as np
import pytest

from fusion.kernels.codegen import render
from fusion.kernels.conv.kind import CONV, conv_problem
from fusion.kernels.conv.program import (
    _DUMMY,
    banked_plan,
    bias_windowed,
    build_context,
    column_chunk,
    geometry,
    schedule,
)
from hwgen.reference import output_dtype
from tests.sim.test_window_conv import BRR, V4P4, V8, case, direct_conv, run_cases

pytestmark = pytest.mark.slow

BANKED = dataclasses.replace(V4P4, window_unit=False, acc_banks=4)
ONE_BY_ONE = dict(kh=1, kw=1, pads=(0, 0, 0, 0))

#: (name, params, variant, schedule)
CASES = [
    (*case("plain: 16 chunks of 1 block", H=4, W=4, Cin=128, Cout=64, fill=-2, stages=BRR),
     V4P4, "looped"),
    (*case("plain, per-channel: 10 chunks of 3 blocks, then 2", H=5, W=5, Cin=64, Cout=128,
           stages=BRR, per_channel=True, quant={"zp": 3}), V4P4, "looped"),
    (*case("plain, per-channel, narrower: 4 chunks of 4 blocks (7 fit B, not imem)", H=14,
           W=14, Cin=32, Cout=128, stages=BRR, per_channel=True), V8, "looped"),
    (*case("banked, per-channel, windows resident a step at a time: 3 chunks of 4 blocks, "
           "then 3", H=3, W=6, Cin=128, Cout=60, fill=5, stages=BRR, per_channel=True),
     BANKED, "looped"),
    (*case("banked, two blocks a step, windows resident a step at a time: 8 chunks of 2",
           H=3, W=8, Cin=64, Cout=64, stages=BRR), BANKED, "looped"),
    # 2,880 window rows a block: the first 1,536 stay, the rest stream in k chunks of 256
    (*case("banked, windows deeper than A, their first rows resident: 2 chunks of 4, then 3",
           H=3, W=3, Cin=320, Cout=44, stages=("bias", "requant")), BANKED, "deep"),
    # two blocks a step deeper than A: the first 896 of each block's 1,152 (2,304) rows
    # stay, block j's from A row 896 j, the rest stream into two halves after both
    (*case("banked, two blocks a step deeper than A, the first rows of each resident: 3 "
           "chunks of 2", H=2, W=8, Cin=128, Cout=24, fill=-5, stages=BRR), BANKED, "deep"),
    (*case("banked, per-channel, two blocks a step deeper than A, the first rows of each "
           "resident: 3 chunks of 2", H=4, W=6, Cin=256, Cout=24, fill=4, stages=BRR,
           per_channel=True), BANKED, "looped"),
    # one step: the windows load once and stay while the chunks' weights stream past
    (*case("banked, windows resident, per-channel: 2 chunks of 4, then 2", H=2, W=2, Cin=120,
           Cout=40, fill=-6, stages=BRR, per_channel=True), BANKED, "plain"),
    (*case("banked, 1,800 window rows resident: 2 chunks of 4", H=2, W=2, Cin=200, Cout=30,
           stages=BRR), BANKED, "plain"),
    # resident and unrolled, the steps' code is relative to r14/r15: equal steps fold
    (*case("banked, windows resident, the steps in a loop: 8 steps of 2 blocks, 3 chunks of "
           "2", H=8, W=8, Cin=96, Cout=24, fill=2, stages=BRR), BANKED, "plain"),
    (*case("banked, per-channel, windows resident, the steps in a loop: 12 steps of 1 block, "
           "a chunk of 4, then 1", H=6, W=8, Cin=176, Cout=20, fill=-3, stages=BRR,
           per_channel=True), BANKED, "plain"),
    (*case("1x1 stride 2, one step: chunks of 8, then 2", H=4, W=4, Cin=128, Cout=40,
           stride=(2, 2), stages=BRR, **ONE_BY_ONE), V4P4, "prefetch"),
    (*case("1x1, 4 steps, per-channel: chunks of 8, then 2", H=4, W=4, Cin=128, Cout=40,
           stages=BRR, per_channel=True, **ONE_BY_ONE), V4P4, "prefetch"),
    (*case("3x3 stride 2, one step, 3 chunks of 1", H=2, W=2, Cin=64, Cout=24, stride=(2, 2),
           fill=-4, stages=BRR), V8, "prefetch"),
    # Inception-v1's 3x3 at 4x4 with fewer outputs: both blocks' windows (2 x 864 rows)
    # in one single-buffered step, the weights streaming past them
    (*case("3x3 at 4x4, one step of every block, 5 chunks of 1", H=4, W=4, Cin=96, Cout=40,
           fill=3, stages=BRR, per_channel=True), V8, "prefetch"),
    (*case("banked, 2,304 window rows, int32 out", H=2, W=4, Cin=256, Cout=16, fill=-1,
           stages=("bias",)), BANKED, "deep"),
    (*case("1x1 stride 2, one step, per-channel, own bias rows: chunks of 32, then 26", H=4,
           W=4, Cin=32, Cout=360, stride=(2, 2), stages=BRR, per_channel=True, **ONE_BY_ONE),
     V4P4, "prefetch"),
    (*case("1x1, residual, per-channel, own bias rows: chunks of 23, then 21", H=4, W=4,
           Cin=8, Cout=360, stages=("bias", "requant", "residual"), per_channel=True,
           quant={"zp": -2}, **ONE_BY_ONE), V4P4, "plain"),
    # ResNet-50's res4_0_proj (512 -> 1,024 channels) with fewer input channels
    (*case("1x1 stride 2, one step, per-channel, own bias rows: 8 chunks of 16", H=4, W=4,
           Cin=64, Cout=1024, stride=(2, 2), stages=BRR, per_channel=True, **ONE_BY_ONE),
     V8, "prefetch"),
]


def _schedule(config, p) -> str:
    """Which schedule the compiler picks for ``p`` on ``config``."""
    geo = geometry(config, p)
    _tn, part, looped, prefetch = schedule(geo)
    if prefetch:
        return "prefetch"
    if looped:
        return "looped"
    return "deep" if part and geo.a_half > config.spad_a_depth else "plain"


def test_the_cases_are_what_they_claim():
    for name, p, config, kind in CASES:
        assert conv_problem(config, p) is None, name
        assert _schedule(config, p) == kind, name
        geo = geometry(config, p)
        banked = banked_plan(config, p)
        assert (banked is not None) == (config is BANKED), name
        tn = schedule(geo)[0]
        assert (geo.Nb % tn > 0) == ("then" in name), name
        assert (tn < column_chunk(geo, "residual" in p.stages) and not banked
                and kind != "prefetch") == ("narrower" in name), name
        if kind == "prefetch":
            assert (geo.steps == 1) == ("one step" in name), name
        assert bias_windowed(geo, tn) == ("own bias rows" in name), name
        if banked:
            assert geo.resident == ("resident" in name), name
        text = render("conv.j2", **build_context(geo, _DUMMY, *schedule(geo)))
        assert ("conv_steps_loop" in text) == ("the steps in a loop" in name), name
    assert sum(geometry(BANKED, p).a_half > BANKED.spad_a_depth
               for _, p, config, _ in CASES if config is BANKED) == 4
    # resident, deeper than A: one block of 2,880 rows, two of 1,152 and two of 2,304
    deep = [geo for geo in (geometry(BANKED, p) for _, p, config, _ in CASES
                            if config is BANKED) if geo.resident and geo.deep]
    assert sorted((geo.bps, geo.Kp) for geo in deep) == [(1, 2880), (2, 1152), (2, 2304)]
    assert all(geo.kept_rows(schedule(geo)[1]) < geo.Kp for geo in deep)
    for name, p, _config, kind in CASES:
        if kind == "deep":
            assert conv_problem(V4P4, p)[0] == "a_scratchpad", name


@pytest.fixture(scope="module")
def runs():
    found = []
    for config in (V4P4, BANKED, V8):
        cases = [(name, p) for name, p, c, _ in CASES if c is config]
        found += [(config, run) for run in run_cases(config, cases)]
    return found


def test_the_schedules_are_bit_exact_and_predicted_exactly(runs):
    assert len(runs) == len(CASES)
    for config, run in runs:
        p = run.params
        assert len(run.kernel.program) <= config.imem_depth, run.name
        want = direct_conv(p, run.ops).astype(output_dtype(p.stages))
        np.testing.assert_array_equal(run.kernel.decode(run.result.outputs), want,
                                      err_msg=run.name)
        assert len(np.unique(want)) > min(20, want.size // 4), run.name
        predicted = CONV.features(config, p).analytical_cycles()
        assert predicted == run.result.counters["cycles"], run.name
