"""Variants shared by the Verilator tests: each is built once per session (and cached on
disk by its key, so later sessions reuse the build). The presets live in
:mod:`hwgen.presets`, shared with ``sim.calibrate``."""

import pytest

from hwgen.config import VariantConfig
from hwgen.presets import SIM_VARIANTS as VARIANTS


@pytest.fixture(scope="session", params=sorted(VARIANTS))
def variant(request) -> VariantConfig:
    from sim.build import build_variant

    config = VARIANTS[request.param]
    build_variant(config)
    return config


@pytest.fixture(scope="session")
def v4x4() -> VariantConfig:
    from sim.build import build_variant

    build_variant(VARIANTS["4x4"])
    return VARIANTS["4x4"]
