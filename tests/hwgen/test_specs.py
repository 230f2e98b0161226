"""Variant specs (hwgen/specs.py): the grammar, its normal form and names, and one-line
refusals of bad specs."""

import pytest

from hwgen.specs import parse_spec


@pytest.mark.parametrize(("text", "normal", "name", "fields"), [
    ("8x8:bias,requant,relu", "8x8:bias,requant,relu", "8x8_bias_requant_relu",
     {"rows": 8, "cols": 8, "port_bytes": 8, "window_unit": False}),
    ("4x4:bias,requant,relu,clamp,residual+window",
     "4x4:bias,requant,relu,clamp,residual+window", "4x4_bias_requant_relu_clamp_residual_window",
     {"port_bytes": 4, "window_unit": True}),
    ("8x8:bias,requant,relu,clamp,residual+port16",
     "8x8:bias,requant,relu,clamp,residual+port16", "8x8_bias_requant_relu_clamp_residual_port16",
     {"port_bytes": 16}),
    # without stages: the default chain; options in normal order, defaults dropped
    ("4x4+addr18+window", "4x4:bias,requant,relu+window+addr18",
     "4x4_bias_requant_relu_window_addr18", {"mem_addr_bits": 18, "epilogue": (
         "bias", "requant", "relu")}),
    ("8x8+port8", "8x8:bias,requant,relu", "8x8_bias_requant_relu", {"port_bytes": 8}),
    # a small array's default port is its output tile
    ("2x2:none", "2x2:none", "2x2_none", {"port_bytes": 4, "epilogue": ()}),
    (" 4x8:bias ", "4x8:bias", "4x8_bias", {"rows": 4, "cols": 8}),
    ("4x4:bias,requant+share4+port4", "4x4:bias,requant+port4+share4",
     "4x4_bias_requant_port4_share4", {"epilogue_share": 4, "port_bytes": 4}),
    ("4x4+share1", "4x4:bias,requant,relu", "4x4_bias_requant_relu", {"epilogue_share": 1}),
    ("8x8+banks4+window", "8x8:bias,requant,relu+window+banks4",
     "8x8_bias_requant_relu_window_banks4", {"acc_banks": 4}),
])
def test_a_spec_parses_to_its_normal_form_and_name(text, normal, name, fields):
    spec = parse_spec(text)
    assert (spec.text, spec.name) == (normal, name)
    for key, value in fields.items():
        assert getattr(spec.config, key) == value
    assert parse_spec(spec.text) == spec  # the normal form is a fixed point


@pytest.mark.parametrize(("text", "message"), [
    ("8by8", "'8by8' is not a shape ROWSxCOLS"),
    ("3x3", "rows must be a power of two"),
    ("4x4:bogus", "unknown epilogue stage 'bogus'"),
    ("4x4:relu,bias", "out of order"),
    ("4x4+foo", "unknown option 'foo'"),
    ("4x4+port", "unknown option 'port'"),
    ("4x4+port3", "port_bytes must be a power of two"),
    ("4x4+window+window", "gives +window twice"),
    ("4x8+window", "the window unit needs port_bytes == rows == cols"),
    ("8x8+window+port16", "the window unit needs port_bytes == rows == cols"),
    ("4x4+addr99", "mem_addr_bits must be from 8 to 24"),
    ("4x4+share8", "epilogue_share must be a power of two dividing cols=4"),
    ("4x4+banks3", "acc_banks must be one of 1, 2, 4, 8"),
])
def test_a_bad_spec_is_one_line_naming_it(text, message):
    with pytest.raises(ValueError) as exc:
        parse_spec(text)
    text_of = str(exc.value)
    assert "\n" not in text_of
    assert text_of.startswith(f"variant spec {text!r}")
    assert message in text_of
