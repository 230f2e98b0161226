"""The JSON text hwgen writes (:func:`hwgen.files.dumps_json`): what ``json.dumps`` gives,
indented only to a depth, and refusing what JSON cannot hold."""

import json
import math

import pytest

from hwgen.files import dumps_json

VALUE = {"format": "x", "tensors": {"t": {"shape": [1, 2], "quant": {"scale": [0.5, 0.25]}}},
         "nodes": [{"name": "n", "attrs": {}}, {"name": "m", "inputs": []}], "empty": {},
         "list": [], 3: None, "text": "é\"\\\n"}


@pytest.mark.parametrize("levels", [0, 1, 2, 3, 10])
def test_it_reads_back_as_the_value_at_any_depth(levels):
    assert json.loads(dumps_json(VALUE, levels)) == json.loads(json.dumps(VALUE))


def test_the_first_levels_are_indented_and_the_rest_is_one_line_each():
    lines = dumps_json(VALUE, 2).splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert ' "format": "x",' in lines
    assert '  "t": {"shape": [1, 2], "quant": {"scale": [0.5, 0.25]}}' in lines
    assert '  {"name": "n", "attrs": {}},' in lines
    assert ' "empty": {},' in lines and ' "3": null,' in lines
    # indented whole, it is json.dumps with indent=1
    assert dumps_json(VALUE, 10) == json.dumps(VALUE, indent=1)
    assert dumps_json(VALUE, 0) == json.dumps(VALUE)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_number_json_cannot_hold_is_refused_at_any_depth(bad):
    for levels in (0, 1, 5):
        with pytest.raises(ValueError):
            dumps_json({"a": [1.0, {"b": bad}]}, levels)


def test_a_value_json_cannot_hold_is_refused():
    with pytest.raises(TypeError):
        dumps_json({"a": object()})
    with pytest.raises(TypeError):
        dumps_json({(1, 2): 3})
