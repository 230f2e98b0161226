"""The bundled examples against references independent of hwgen.

``test_examples.py`` checks hwgen against ``onnx.reference`` and hwgen's own executor; being
exact against yourself is not being right. Here the references are the exact one and, for QDQ
models, onnxruntime's float path, the runtime people deploy these models with, with its
optimizations off (``tests/fusion/references.py``; never onnxruntime's integer kernels, which
saturate without VNNI): integer outputs must be exact, dequantized outputs within 1 LSB of the
output scale with at least 99% exact. Fast: the graph after the passes through hwgen's
reference executor, on many seeds. Slow: ``hwgen run`` on the simulator (a 4x4 all-stage
variant), one seed, through ``--input``/``--output``.
"""

from pathlib import Path

import numpy as np
import onnx
import pytest

from examples.build_models import MODELS, sample_input
from fusion.frontend.load import load_model
from fusion.passes.driver import optimize
from fusion.reference import executor
from hwgen.cli import main
from tests.fusion.references import check_within_one_lsb, lsb_errors, output_scale, references

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEEDS = range(1, 26)


def _reference(name: str):
    path = EXAMPLES / f"{name}.onnx"
    model = onnx.load(str(path))
    out = model.graph.output[0].name
    return path, references(model), out, output_scale(model, out)


@pytest.mark.parametrize("legalize", [False, True], ids=["folded", "legalized"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_executor_after_the_passes_matches_the_references(name, legalize, capsys):
    path, found, out, scale = _reference(name)
    graph = optimize(load_model(path), legalize=legalize)
    got = {seed: executor.run(graph, {"x": sample_input(name, seed)})[out] for seed in SEEDS}
    for label, reference in found:
        errors, integer = [], True
        for seed in SEEDS:
            want = reference.run([out], {"x": sample_input(name, seed)})[0]
            integer = want.dtype.kind in "iu"
            errors.append(lsb_errors(got[seed], want, scale))
        figures = check_within_one_lsb(np.concatenate(errors), f"{name} executor "
                                       f"({'legalized' if legalize else 'folded'}) vs {label}",
                                       integer=integer)
        with capsys.disabled():
            print(f"\n{figures}")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_hwgen_run_on_the_simulator_matches_the_references(name, variant_dir,  # noqa: F811
                                                           tmp_path, capsys):
    path, found, out, scale = _reference(name)
    x = sample_input(name, 1)
    np.save(tmp_path / "x.npy", x)
    y = tmp_path / "y.npy"
    assert main(["run", str(path), "--variant", str(variant_dir), "--input",
                 f"x={tmp_path / 'x.npy'}", "--output", f"{out}={y}",
                 "--cache", str(tmp_path / "cache")]) == 0, capsys.readouterr().err
    for label, reference in found:
        want = reference.run([out], {"x": x})[0]
        figures = check_within_one_lsb(lsb_errors(np.load(y), want, scale),
                                       f"{name} hwgen run (4x4 simulator) vs {label}",
                                       integer=want.dtype.kind in "iu")
        with capsys.disabled():
            print(f"\n{figures}")
