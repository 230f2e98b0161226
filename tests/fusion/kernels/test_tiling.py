"""default_tiling keeps the choices it is given, or refuses them: it never changes one."""

import pytest

from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import default_tiling
from hwgen.presets import SIM_VARIANTS

DIMS = GemmDims(SIM_VARIANTS["2x2"], 8, 16, 8)


@pytest.mark.parametrize(("choice", "message"), [
    ({"tm": 0}, "tm must be a whole number of at least 1, not 0"),  # was read as "choose"
    ({"tn": -2}, "tn must be a whole number of at least 1, not -2"),
    ({"kt": 0}, "kt must be a whole number of at least 1, not 0"),
    ({"tm": 1.5}, "tm must be a whole number of at least 1, not 1.5"),
    ({"tm": True}, "tm must be a whole number of at least 1, not True"),
    ({"order": "km"}, "order must be one of mn, nm, not 'km'"),
])
def test_a_choice_that_cannot_be_kept_is_refused(choice, message):
    with pytest.raises(ValueError, match=message):
        default_tiling(DIMS, **choice)


def test_given_choices_are_kept():
    t = default_tiling(DIMS, tm=2, tn=1, order="nm", double_buffer=False)
    assert (t.tm, t.tn, t.order, t.double_buffer) == (2, 1, "nm", False)


def test_a_choice_that_does_not_fit_is_refused_with_what_is_short():
    with pytest.raises(ValueError, match=r"the A super tile needs .* scratchpad rows"):
        default_tiling(GemmDims(SIM_VARIANTS["2x2"], 64, 512, 8), tm=8, double_buffer=True)


def test_accumulator_banks_let_a_chunked_super_tile_hold_several_tiles():
    """ResNet-50's 3x3 of 128 channels at a 4x4 plane on the 8x8: K = 1,152 does not fit a
    scratchpad half beside a second block, so it is chunked. One bank: one tile a chunk, both
    operands loaded for each; four banks: up to four tiles a chunk, fewer cycles and bytes."""
    import dataclasses

    from fusion.kernels.tiling import estimated_cycles, fit_problems, traffic
    from hwgen.config import VariantConfig

    one = VariantConfig(rows=8, cols=8, epilogue=("bias", "requant"))
    four = dataclasses.replace(one, acc_banks=4)
    alone = default_tiling(GemmDims(one, 16, 1152, 128), ("bias", "requant"))
    banked = default_tiling(GemmDims(four, 16, 1152, 128), ("bias", "requant"))
    assert alone.kt < 1152 and (alone.tm, alone.tn) == (1, 1)
    assert banked.kt < 1152 and 1 < banked.tm * banked.tn <= 4
    dims = GemmDims(four, 16, 1152, 128)
    assert estimated_cycles(dims, banked) < estimated_cycles(dims, alone)
    assert traffic(dims, banked) < traffic(dims, alone)
    # five tiles a chunk is one more than the banks
    too_many = dataclasses.replace(banked, tm=1, tn=5, kt=128)
    assert any("tm=1 x tn=5 tiles need 5, the variant has 4" in p
               for p in fit_problems(dims, ("bias", "requant"), too_many))
