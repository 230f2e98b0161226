"""The MLPerf Tiny-style models in ``examples/real/`` (see ``examples/build_real_models.py``).

The checked-in files are the source of truth (their calibration ran onnxruntime's float
kernels, whose last bits depend on the CPU): nothing here rebuilds and compares them.

* Each model is a valid ONNX model, and onnxruntime reproduces the output checked in beside
  it. The bound is the one hwgen is held to: within 1 LSB of the output scale with at least
  99% exact. On the machine that wrote the files it is exact; on another CPU, onnxruntime's
  float convolutions (between DequantizeLinear and QuantizeLinear, optimizations off) may sum
  in another order and move a rounding tie by one LSB.
* ``ACCEPTED`` records, per model, whether hwgen imports and compiles it today for an 8x8
  all-stage variant, or the refusal it gives. It is exact in both directions: a model that
  starts compiling, or refuses differently, fails this test until the table says so.
* A model hwgen compiles runs, through the passes and hwgen's reference executor, within the
  bound of onnxruntime's checked-in output.
"""

from pathlib import Path

import numpy as np
import onnx
import pytest

from examples.build_real_models import MODELS, sample_input
from fusion.compiler.lower import CompileError
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.ir.graph import GraphError
from fusion.passes.driver import optimize
from fusion.reference import executor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from tests.fusion.ort_reference import check_within_one_lsb, lsb_errors, output_scale, session

REAL = Path(__file__).resolve().parents[2] / "examples" / "real"
NAMES = [f"{name}_{fmt}" for name, (_, formats) in MODELS.items() for fmt in formats]
V8X8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)
_NO_KERNEL = "has no accelerator kernel, and the host runs only layout and boundary ops"

#: What hwgen makes of each model today: "ok" (imports and compiles for V8X8) or the start of
#: its refusal. Update a row when coverage changes (issue 10 items 1-3).
ACCEPTED = {name: "ok" for name in NAMES}
#: Accepted models known to miss the 1-LSB bound against onnxruntime: name -> the measured
#: figures and the issue item that fixes them (a strict xfail: fixing one fails until its row
#: goes).
KNOWN_DRIFT: dict[str, str] = {
    # 71.82% with qadd's former int8 input multipliers. The residual adds are exact now; the
    # first tensor off onnxruntime is conv s1_a (2 of 163,840 elements over 10 inputs, where
    # onnxruntime's float convolution rounds a near-half the other way), and later layers
    # amplify that to 3 of 110 logits.
    "resnet8_qdq": "110 elements, max 1 LSB, 97.27% exact: onnxruntime's float convolutions "
                   "resolve near-halves otherwise (first at conv s1_a), amplified to the logits",
    "resnet8_qop": "110 elements, max 1 LSB, 97.27% exact: as resnet8_qdq",
    "mobilenet_v1_025_qdq": "22 elements, max 4 LSB, 90.91% exact: not yet diagnosed (no "
                            "residual add; 2 of 22 logits differ)",
}


def test_the_table_names_every_bundled_model():
    assert sorted(ACCEPTED) == sorted(NAMES)
    assert all(ACCEPTED[n] == "ok" for n in KNOWN_DRIFT), "a drift row for a refused model"
    assert sorted(p.stem for p in REAL.glob("*.onnx")) == sorted(NAMES)
    assert sorted(p.stem for p in REAL.glob("*.npz")) == sorted(NAMES)


def _checked_in(name: str):
    with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
        return data["x"], data["y"]


@pytest.mark.parametrize("name", NAMES)
def test_model_is_valid_and_onnxruntime_reproduces_its_output(name):
    path = REAL / f"{name}.onnx"
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    x, y = _checked_in(name)
    assert x.dtype == np.float32 and x.shape == MODELS[name.rsplit("_", 1)[0]][0]
    (got,) = session(path).run(["y"], {"x": x})
    check_within_one_lsb(lsb_errors(got, y, output_scale(model, "y")),
                         f"{name}: onnxruntime now vs checked in", integer=y.dtype.kind in "iu")


@pytest.mark.parametrize("name", NAMES)
def test_hwgen_accepts_what_the_table_says(name):
    expected = ACCEPTED[name]
    try:
        compiled = compile_model(load_model(REAL / f"{name}.onnx"), V8X8)
    except (GraphError, CompileError) as exc:
        assert expected != "ok", f"{name} is refused: {exc}"
        assert str(exc).startswith(expected), f"{name} is refused otherwise: {exc}"
    else:
        assert expected == "ok", f"{name} compiles now ({len(compiled.kernels)} kernels): " \
                                 f"update ACCEPTED"
        assert compiled.kernels


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_DRIFT[n])]
                 if n in KNOWN_DRIFT else []) for n, v in ACCEPTED.items() if v == "ok"])
def test_accepted_model_matches_onnxruntime(name, capsys):
    """The checked-in output, and onnxruntime live on more seeded inputs."""
    path = REAL / f"{name}.onnx"
    graph = optimize(load_model(path), legalize=True)
    ort, scale = session(path), output_scale(onnx.load(str(path)), "y")
    x, y = _checked_in(name)
    errors = [lsb_errors(executor.run(graph, {"x": x})["y"], y, scale)]
    for seed in range(1001, 1011):
        x = sample_input(name.rsplit("_", 1)[0], seed)
        errors.append(lsb_errors(executor.run(graph, {"x": x})["y"], ort.run(["y"], {"x": x})[0],
                                 scale))
    figures = check_within_one_lsb(np.concatenate(errors),
                                   f"{name}: hwgen executor vs onnxruntime",
                                   integer=y.dtype.kind in "iu")
    with capsys.disabled():
        print(f"\n{figures}")
