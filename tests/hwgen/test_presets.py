"""The named variants: each simulation preset is named for its array shape."""

import pytest

from hwgen.presets import ALL_STAGES, SIM_VARIANTS, SMALL, WIDE


@pytest.mark.parametrize("name", sorted(SIM_VARIANTS))
def test_a_sim_preset_is_named_for_its_shape_and_has_every_stage(name):
    config = SIM_VARIANTS[name]
    assert name == f"{config.rows}x{config.cols}"
    assert config.epilogue == ALL_STAGES


def test_presets_are_distinct_variants():
    keys = [c.key() for c in (*SIM_VARIANTS.values(), SMALL, WIDE)]
    assert len(set(keys)) == len(keys)
