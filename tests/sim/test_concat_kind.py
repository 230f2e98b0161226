"""The channel-join kernel kind (:mod:`fusion.kernels.concat`) on Verilator: every case
bit-exact against an independent computation (numpy concatenation, each rescaled input
rounded half to even by ``fractions.Fraction``); the kind's own reference agrees; the
analytical cycles equal the measured ones; and the counters' invariants hold.

Cases: copies only, rescaled inputs beside copies, three inputs with a last one that ends
inside a column block, inputs stored K-major, inputs of more column blocks than a chunk of
the epilogue scratchpad holds (a block row in several chunks), and block rows in one chunk.
All cases run in one simulator launch on the 4x4 array with 4-byte words (the build the
window tests share)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fusion.kernels.concat.build import part_dims
from fusion.kernels.concat.kind import CONCAT, UNIT, ConcatParams
from fusion.kernels.epilogue import pass_context
from fusion.kernels.layout import Region
from fusion.runtime.invariants import check_counters, timing_floor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from hwgen.reference import EpilogueParams
from tests.helpers import kernel_runs

pytestmark = pytest.mark.slow

V4P4 = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES, window_unit=True)
#: A rescale by about 0.707 (2**30.5 / 2**31).
HALF_SQRT = (1518500250, 31)


def join(M, widths, rescaled, *, kmajor=False, x_zp=-5, zp=3):  # noqa: N803
    """Params of a join; a copied input has the output's zero point."""
    return ConcatParams(
        M=M, widths=tuple(widths),
        mult=tuple(HALF_SQRT[0] if r else UNIT[0] for r in rescaled),
        shift=tuple(HALF_SQRT[1] if r else UNIT[1] for r in rescaled),
        x_zp=tuple(x_zp if r else zp for r in rescaled), zp=zp, kmajor_out=kmajor)


CASES = [
    ("copies", join(10, (8, 4), (False, False))),
    ("rescaled and copied, ragged last", join(13, (4, 8, 6), (True, False, True))),
    ("K-major", join(9, (4, 4, 4), (False, True, False), kmajor=True)),
    ("block rows in one chunk", join(40, (64, 72), (True, True))),
    ("a block row in chunks", join(9, (160, 132), (True, False))),
]


def values(p: ConcatParams, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"in{i}": rng.integers(-128, 128, (p.M, w), dtype=np.int8)
            for i, w in enumerate(p.widths)}


def independent(p: ConcatParams, ops: dict[str, np.ndarray]) -> np.ndarray:
    """The join computed without the kind: exact rationals, halves to even, saturated."""
    parts = []
    for i in range(len(p.widths)):
        x = ops[f"in{i}"].astype(np.int64)
        scale = Fraction(p.mult[i], 2 ** p.shift[i])
        y = np.vectorize(lambda v, i=i, s=scale: round((int(v) - p.x_zp[i]) * s))(x)
        parts.append(np.clip(y + p.zp, -128, 127))
    return np.concatenate(parts, axis=1).astype(np.int8)


@pytest.fixture(scope="module")
def runs():
    return kernel_runs.run_cases(CONCAT, V4P4, CASES, values)


def test_joins_are_bit_exact_against_an_independent_computation(runs):
    for run in runs:
        want = independent(run.params, run.ops)
        np.testing.assert_array_equal(run.kernel.decode(run.result.outputs), want,
                                      err_msg=run.name)
        np.testing.assert_array_equal(run.kernel.expected(**run.ops), want, err_msg=run.name)


def test_analytical_cycles_equal_the_measured_cycles(runs):
    for run in runs:
        predicted = CONCAT.features(V4P4, run.params).analytical_cycles()
        assert predicted == run.result.counters["cycles"], run.name


def test_counter_invariants_hold(runs):
    for run in runs:
        features = CONCAT.features(V4P4, run.params)
        floor = timing_floor(V4P4, run.kernel.program, features.analytical_cycles())
        violations = check_counters(V4P4, run.kernel.program, run.result.counters,
                                    floor_cycles=floor)
        assert not violations, (run.name, [str(v) for v in violations])


def test_the_cases_cover_both_chunkings_and_what_they_claim():
    """One case whose parts' block rows fit one chunk, one whose block row does not (the
    ``out_adjust`` path of the pass), a ragged last input, K-major and copies."""
    whole, split = set(), set()
    for _, p in CASES:
        for w, rescaled in zip(p.widths, p.rescaled, strict=True):
            dims = part_dims(V4P4, p.M, w)
            region = Region("r", 0, 1 << 12)
            ctx = pass_context(dims, stages=("bias", "requant") if rescaled else (),
                               params=EpilogueParams(mult=UNIT[0], shift=UNIT[1],
                                                     round_even=True) if rescaled else
                               EpilogueParams(), src=region, src_dt="i8", out=region,
                               out_dt="i8", bias=region if rescaled else None,
                               out_pitch=dims.Nb + 1)
            (split if ctx["out_adjust"] else whole).add(p.M)
    assert whole and split
    assert any(p.widths[-1] % V4P4.cols for _, p in CASES)
    assert any(p.kmajor_out for _, p in CASES)
    assert any(not any(p.rescaled) for _, p in CASES)
