"""Capabilities (fusion/kernels/capabilities.py): the kinds a variant runs come from each
kind's own refusal, and covers() refuses what a descriptor's capabilities do not cover."""

import pytest

from fusion.kernels.capabilities import capabilities, covers
from fusion.kernels.kinds import KINDS
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES

PLAIN = VariantConfig(rows=4, cols=4, port_bytes=8)  # no window loads, no residual
FULL = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES, window_unit=True)


@pytest.mark.parametrize(("config", "kinds"), [
    (PLAIN, ["concat", "gemm", "pass"]),  # a join of copies needs no stage
    (VariantConfig(rows=4, cols=4, port_bytes=4), ["concat", "conv", "gemm", "pass"]),
    (VariantConfig(rows=8, cols=8, port_bytes=16, epilogue=ALL_STAGES),
     ["concat", "gemm", "max", "pass"]),
    (FULL, ["concat", "conv", "gemm", "max", "pass", "window"]),
])
def test_the_kinds_are_those_whose_variant_refusal_is_none(config, kinds):
    caps = capabilities(config)
    assert caps == {"kinds": kinds, "stages": list(config.epilogue)}
    for name in set(KINDS) - set(kinds):
        refusal = KINDS[name].variant_refusal(config)
        assert refusal is not None and refusal.kind == name


def test_the_window_kinds_legality_starts_with_its_variant_refusal():
    # the capability and the kernel's own legality agree: one sentence, defined once
    refusal = KINDS["window"].variant_refusal(PLAIN)
    assert refusal.reason == "no_window_unit"
    assert KINDS["max"].variant_refusal(PLAIN).reason == "no_residual_stage"
    assert KINDS["conv"].variant_refusal(PLAIN).reason == "no_window_loads"


def test_covers_accepts_an_ordered_subset_of_the_chain():
    caps = capabilities(FULL)
    assert covers(caps, "gemm", ("bias", "relu")) is None
    assert covers(caps, "window", ()) is None


@pytest.mark.parametrize(("caps", "kind", "stages", "message"), [
    (capabilities(PLAIN), "window", (), "cannot run window kernels (it runs concat, gemm, pass)"),
    (capabilities(PLAIN), "gemm", ("clamp",), "epilogue stage 'clamp' is not in the chain"),
    (capabilities(PLAIN), "gemm", ("relu", "bias"), "not an ordered subset"),
    (None, "gemm", (), "has no capabilities object"),
    ({"kinds": "gemm", "stages": []}, "gemm", (), "name no list of kernel kinds"),
    ({"kinds": ["gemm", "fft"], "stages": []}, "gemm", (), "unknown kernel kinds fft"),
    ({"kinds": ["gemm"], "stages": ["tanh"]}, "gemm", (), "not a list of epilogue stages"),
])
def test_covers_names_what_is_missing(caps, kind, stages, message):
    reason = covers(caps, kind, stages)
    assert reason is not None and message in reason
