"""The cost-model interface: models predict from any kind's features, and the analytical model
asks each kind's features for their own walk (the interface knows no implementation)."""

import ast
from pathlib import Path

import numpy as np
import pytest

from fusion.cost import AnalyticalModel, CostModel, Features
from fusion.cost import model as model_module
from fusion.kernels.eltmax.kind import MAX, MaxParams
from fusion.kernels.epipass.kind import PASS, PassParams
from hwgen.presets import SMALL


class Fixed(Features):
    kind = "fixed"

    def __init__(self, cycles):
        self.cycles = cycles

    @property
    def problem(self):
        return ()

    def analytical_cycles(self, platform=None):
        return self.cycles

    def to_dict(self):
        return {"kind": self.kind, "cycles": self.cycles}


def test_features_are_abstract_and_the_analytical_model_asks_them():
    with pytest.raises(TypeError):
        Features()
    assert AnalyticalModel().predict(Fixed(123)) == 123.0
    np.testing.assert_array_equal(AnalyticalModel().predict_many([Fixed(1), Fixed(5)]),
                                  [1.0, 5.0])


def test_one_predict_serves_every_kind():
    features = [PASS.features(SMALL, PassParams(M=8, N=16, stages=("relu",))),
                MAX.features(SMALL, MaxParams(M=8, N=16, n_inputs=4))]
    predicted = AnalyticalModel().predict_many(features)
    assert list(predicted) == [float(f.analytical_cycles()) for f in features]
    assert all(p > 0 for p in predicted)


def test_a_model_needs_only_predict():
    class Constant(CostModel):
        def predict(self, features):
            return 7.0

    assert list(Constant().predict_many([Fixed(1), Fixed(2)])) == [7.0, 7.0]


def test_the_interface_imports_no_implementation():
    tree = ast.parse(Path(model_module.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.startswith(("fusion.", "sim"))}
