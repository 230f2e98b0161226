"""The import cache (fusion.frontend.import_cache): a model imported before is read back as
the same graph, without the onnx library; a damaged entry is imported again; a model that does
not import is never kept."""

import subprocess
import sys
from pathlib import Path

import pytest

from fusion.frontend.import_cache import ImportCache
from fusion.frontend.json_format import to_dict
from fusion.frontend.load import load_model
from fusion.ir.graph import GraphError

REAL = Path(__file__).parents[3] / "examples" / "real"
MODELS = ["resnet8_qdq.onnx", "lenet5_qop.onnx", "ds_cnn_qdq.onnx"]


@pytest.mark.parametrize("name", MODELS)
def test_a_cached_import_is_the_import(tmp_path, name):
    cache = ImportCache(tmp_path)
    first = cache.load(REAL / name)
    assert len(list(tmp_path.glob("*.json"))) == 1
    again = cache.load(REAL / name)
    assert to_dict(again) == to_dict(first) == to_dict(load_model(REAL / name))


def test_batch_and_shapes_are_part_of_the_key(tmp_path):
    cache = ImportCache(tmp_path)
    one = cache.load(REAL / "resnet8_qdq.onnx")
    four = cache.load(REAL / "resnet8_qdq.onnx", batch=4)
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert four.tensors[four.inputs[0]].shape[0] == 4 * one.tensors[one.inputs[0]].shape[0]


def test_a_damaged_entry_is_imported_again_and_replaced(tmp_path):
    cache = ImportCache(tmp_path)
    want = to_dict(cache.load(REAL / "lenet5_qop.onnx"))
    (entry,) = tmp_path.glob("*.json")
    for damage in ("{not json", '{"format": "hwgen-graph", "version": 1}', ""):
        entry.write_text(damage)
        assert to_dict(cache.load(REAL / "lenet5_qop.onnx")) == want
        assert to_dict(load_model(entry)) == want  # replaced by a whole entry


def test_a_model_that_does_not_import_is_not_kept(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    cache = ImportCache(tmp_path / "cache")
    for _ in range(2):
        with pytest.raises(GraphError):
            cache.load(bad)
    assert not (tmp_path / "cache").exists()


def test_a_cached_import_does_not_import_onnx(tmp_path):
    code = (f"import sys; from fusion.frontend.import_cache import ImportCache; "
            f"ImportCache({str(tmp_path)!r}).load({str(REAL / 'resnet8_qdq.onnx')!r}); "
            f"print('onnx' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)]
    assert runs == ["True", "False"]
