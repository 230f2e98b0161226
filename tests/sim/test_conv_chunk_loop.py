"""Window convolutions whose column chunks run in a hardware loop (:class:`~fusion.kernels.
conv.loops.ChunkLoop`) because, unrolled, their programs exceed the instruction memory, and
banked convolutions whose windows are deeper than the A scratchpad: on Verilator, bit for bit
against a direct convolution, and predicted exactly by the analytical model.

The cases are ones the compiler used to refuse (a program too long, or windows too deep) and
sent to host im2col: 3x3 convolutions of 64 to 320 channels on the 4x4 with 4-byte words,
one column block a chunk (plain) or four (banked), the last chunk narrower where the column
blocks do not divide."""

import dataclasses

import numpy as np
import pytest

from fusion.kernels.conv.kind import CONV, conv_problem
from fusion.kernels.conv.program import banked_plan, chunk_loop, column_chunk, geometry
from hwgen.reference import output_dtype
from tests.sim.test_window_conv import BRR, V4P4, case, direct_conv, run_cases

pytestmark = pytest.mark.slow

BANKED = dataclasses.replace(V4P4, window_unit=False, acc_banks=4)

#: (name, params, variant, chunks in the loop, blocks of the last chunk; 0: none after it)
LOOPED = [
    (*case("plain: 16 chunks of 1 block", H=4, W=4, Cin=128, Cout=64, fill=-2, stages=BRR),
     V4P4),
    (*case("plain, per-channel: 10 chunks of 3 blocks, then 2", H=5, W=5, Cin=64, Cout=128,
           stages=BRR, per_channel=True, quant={"zp": 3}), V4P4),
    (*case("banked, per-channel: 3 chunks of 4 blocks, then 3", H=3, W=6, Cin=128, Cout=60,
           fill=5, stages=BRR, per_channel=True), BANKED),
    (*case("banked, windows deeper than A: 2 chunks of 4, then 3", H=3, W=3, Cin=320,
           Cout=44, stages=("bias", "requant")), BANKED),
]
#: windows deeper than the A scratchpad, no loop: only the banked program exists
DEEP = [case("banked, 2,304 window rows, int32 out", H=2, W=4, Cin=256, Cout=16,
             fill=-1, stages=("bias",))]


def _plan(config, p):
    geo = geometry(config, p)
    tn, part = banked_plan(config, p) or (column_chunk(geo, False), 0)
    return geo, tn, part


def test_the_cases_are_what_they_claim():
    for name, p, config in LOOPED:
        geo, tn, part = _plan(config, p)
        assert conv_problem(config, p) is None, name
        assert chunk_loop(geo, tn, part) is True, name
        assert (part > 0) == (config is BANKED), name
        assert (geo.Nb % tn > 0) == ("then" in name), name
    deep = [p for _, p, config in LOOPED if config is BANKED] + [p for _, p in DEEP]
    assert sum(geometry(BANKED, p).a_half > BANKED.spad_a_depth for p in deep) == 2
    for name, p in DEEP:
        assert conv_problem(V4P4, p)[0] == "a_scratchpad", name
        geo, tn, part = _plan(BANKED, p)
        assert part and chunk_loop(geo, tn, part) is False, name


@pytest.fixture(scope="module")
def runs():
    from sim.build import build_variant

    found = []
    for config in (V4P4, BANKED):
        build_variant(config)
        cases = [(name, p) for name, p, c in LOOPED if c is config]
        cases += DEEP if config is BANKED else []
        found += [(config, run) for run in run_cases(config, cases)]
    return found


def test_looped_and_deep_convolutions_are_bit_exact_and_predicted_exactly(runs):
    assert len(runs) == len(LOOPED) + len(DEEP)
    for config, run in runs:
        p = run.params
        assert len(run.kernel.program) <= config.imem_depth, run.name
        want = direct_conv(p, run.ops).astype(output_dtype(p.stages))
        np.testing.assert_array_equal(run.kernel.decode(run.result.outputs), want,
                                      err_msg=run.name)
        assert len(np.unique(want)) > min(20, want.size // 4), run.name
        predicted = CONV.features(config, p).analytical_cycles()
        assert predicted == run.result.counters["cycles"], run.name
