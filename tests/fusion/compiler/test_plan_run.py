"""A plan folder runs on the simulator exactly as the model it was compiled from: the same
outputs, the same cycles and counters, kernel by kernel."""

from pathlib import Path

import numpy as np
import pytest

from examples.build_models import sample_input
from fusion.compiler.plan import compile_model
from fusion.compiler.plan_folder import write_plan
from fusion.compiler.plan_reader import read_plan
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from fusion.runtime.run import run_compiled
from hwgen.presets import SIM_VARIANTS

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_a_run_from_the_plan_equals_compile_and_run(tmp_path):
    from sim.build import build_variant

    config = SIM_VARIANTS["4x4"]
    model = EXAMPLES / "qdq_cnn.onnx"
    compiled = compile_model(load_model(model), config, cache=KernelCache(disk=False))
    write_plan(compiled, tmp_path / "plan", source=model)
    restored = read_plan(tmp_path / "plan", config, model=model)
    build = build_variant(config)
    x = {"x": sample_input("qdq_cnn", 1)}
    want = run_compiled(compiled, x, build=build)
    got = run_compiled(restored, x, build=build)
    assert got.outputs.keys() == want.outputs.keys()
    for name, value in want.outputs.items():
        np.testing.assert_array_equal(got.outputs[name], value)
    assert [(k.name, k.cycles, k.counters) for k in got.kernels] == \
        [(k.name, k.cycles, k.counters) for k in want.kernels]
    assert len(got.kernels) == 4 and got.total_cycles > 0
    assert got.host_steps == want.host_steps
