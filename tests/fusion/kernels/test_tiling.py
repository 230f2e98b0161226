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
