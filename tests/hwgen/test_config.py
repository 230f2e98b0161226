import json

import pytest

from hwgen.config import VariantConfig


def test_defaults_are_valid_and_key_is_stable():
    a, b = VariantConfig(), VariantConfig()
    assert a.key() == b.key()
    assert len(a.key()) == 16
    assert VariantConfig(rows=8).key() != a.key()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rows": 0}, "rows must be a power of two from 1 to 64, not 0"),
        ({"cols": 6}, "cols must be a power of two from 1 to 64, not 6"),
        ({"epilogue": ("bias", "gelu")}, "unknown epilogue stage 'gelu'"),
        ({"epilogue": ("relu", "relu")}, "must each appear at most once"),
        ({"epilogue": "relu"}, "epilogue must be a tuple"),
        ({"operand_bits": 4}, "operand_bits must be 8"),
        ({"port_bytes": 3}, "port_bytes must be a power of two"),
        ({"rows": 2, "cols": 2, "port_bytes": 8}, "must be a whole number of memory words"),
        ({"spad_a_depth": 1}, "spad_a_depth must be an integer from 2 to 65536"),
        ({"port_latency": 0}, "port_latency must be from 1 to 64"),
        ({"cols": 4, "epilogue_share": 8}, "epilogue_share must be a power of two dividing "
                                           "cols=4"),
        ({"epilogue_share": 3}, "epilogue_share must be a power of two"),
        ({"epilogue_share": 0}, "epilogue_share must be a power of two"),
        ({"acc_banks": 3}, "acc_banks must be one of 1, 2, 4, 8"),
        ({"acc_banks": 16}, "acc_banks must be one of 1, 2, 4, 8"),
        ({"acc_banks": True}, "acc_banks must be one of 1, 2, 4, 8"),
    ],
)
def test_bad_config_is_refused_with_a_clear_message(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        VariantConfig(**fields)


def test_lane_sharing_keeps_unshared_keys_and_divides_the_lanes():
    # a variant without sharing keeps the key it had before the option existed
    assert "epilogue_share" not in VariantConfig().to_dict()
    shared = VariantConfig(cols=8, epilogue_share=4)
    assert shared.epilogue_lanes == 2
    assert shared.key() != VariantConfig(cols=8).key()
    assert VariantConfig.from_dict(shared.to_dict()) == shared


def test_accumulator_banks_keep_the_key_of_one_bank():
    # a variant of one bank keeps the key it had before the option existed
    assert "acc_banks" not in VariantConfig().to_dict()
    banked = VariantConfig(acc_banks=4)
    assert banked.key() != VariantConfig().key()
    assert VariantConfig.from_dict(banked.to_dict()) == banked


def test_descriptor_round_trip(tmp_path):
    config = VariantConfig(rows=4, cols=8, epilogue=("bias", "requant", "clamp", "residual"))
    config.write_descriptor(tmp_path / "v.json", top="x")
    again, data = VariantConfig.read_descriptor(tmp_path / "v.json")
    assert again == config
    assert data["top"] == "x"


def test_edited_descriptor_is_refused(tmp_path):
    path = tmp_path / "v.json"
    VariantConfig().write_descriptor(path)
    data = json.loads(path.read_text())
    data["config"]["rows"] = 8
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="edited or corrupted"):
        VariantConfig.read_descriptor(path)


@pytest.mark.parametrize("text", ["{not json", "[]", '{"format": "other"}'])
def test_corrupt_descriptor_is_refused(tmp_path, text):
    path = tmp_path / "v.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="regenerate"):
        VariantConfig.read_descriptor(path)


def test_unknown_field_is_named():
    with pytest.raises(ValueError, match="unknown variant config field.*colums"):
        VariantConfig.from_dict({"colums": 4})


def test_stage_bit_follows_the_chain():
    config = VariantConfig(epilogue=("relu", "bias"))
    assert config.stage_bit("relu") == 1 and config.stage_bit("bias") == 2
    with pytest.raises(ValueError, match="not in this variant's chain"):
        config.stage_bit("requant")
