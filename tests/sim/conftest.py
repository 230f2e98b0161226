"""Variants shared by the Verilator tests: each is built once per session (and cached on
disk by its key, so later sessions reuse the build)."""

import pytest

from hwgen.config import VariantConfig

ALL_STAGES = ("bias", "requant", "relu", "clamp", "residual")

#: Three array shapes, one of them non-square, each with the whole epilogue chain.
VARIANTS = {
    "2x2": VariantConfig(rows=2, cols=2, port_bytes=4, port_latency=3, epilogue=ALL_STAGES,
                         spad_a_depth=512, spad_b_depth=512, spad_e_depth=128),
    "4x4": VariantConfig(rows=4, cols=4, epilogue=ALL_STAGES),
    "4x8": VariantConfig(rows=4, cols=8, port_bytes=8, port_latency=6, epilogue=ALL_STAGES),
}


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
