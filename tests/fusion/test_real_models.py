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
  bound of onnxruntime's checked-in output, and of onnxruntime's integer kernels (its graph
  optimizations on: ``QLinearConv``, ``QGemm``...).
* Layer by layer, each QDQ model's requantized tensors, hwgen fed onnxruntime's integer inputs,
  differ only where onnxruntime's float32 value stood within float32 error of a rounding half.
  This is what MobileNetV1-0.25's drift is: twice in 2.85 million layer outputs (11 inputs)
  onnxruntime's float convolution lands a few ulps on the wrong side of a half (21.4999988
  exactly, 21.500002 in float32), and 26 later layers grow that one LSB into four at the
  logits. onnxruntime's own integer kernels agree with hwgen bit for bit.
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
from fusion.passes import conv_legalize, dce, weight_zero_point
from fusion.passes.driver import optimize, run_to_fixed_point
from fusion.reference import executor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from tests.fusion.ort_reference import (
    check_within_one_lsb,
    integer_session,
    lsb_errors,
    output_scale,
    quantized_tensors,
    session,
)

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
    "mobilenet_v1_025_qdq": "22 elements, max 4 LSB, 90.91% exact: onnxruntime's float32 "
                            "convolutions flip two near-halves hwgen rounds exactly, and 26 "
                            "layers amplify them (see test_layers_differ_only_at_float_halves)",
}
#: The same against onnxruntime's integer kernels (graph optimizations on).
#: (71.82% with qadd's former int8 multipliers, whose layer-by-layer differences stood 1e-3 to
#: 6e-3 LSB from a half; now every one is a float32 near-half: onnxruntime keeps two of the
#: three residual adds in float and runs the third with 22-bit multipliers of float32 ratios.)
_ADDS = ("110 logits, max 1 LSB, 97.27% exact: onnxruntime's float32 residual adds and "
         "convolutions resolve near-halves otherwise (test_layers_differ_only_at_float_halves)")
KNOWN_DRIFT_INTEGER: dict[str, str] = {"resnet8_qdq": _ADDS, "resnet8_qop": _ADDS}
#: How near a rounding half (in output LSBs) onnxruntime's float32 value must be where hwgen,
#: fed the same integer inputs, rounds the other way. Float32 products summed in another order
#: move a value by a few ulps: 2e-6 and 1e-5 LSB in MobileNet. A difference farther from a half
#: is hwgen's error (one at random lands this near with probability 2e-3).
NEAR_HALF = 1e-3
_LAYOUT = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}


def test_the_table_names_every_bundled_model():
    assert sorted(ACCEPTED) == sorted(NAMES)
    assert all(ACCEPTED[n] == "ok" for n in KNOWN_DRIFT), "a drift row for a refused model"
    assert all(ACCEPTED[n] == "ok" for n in KNOWN_DRIFT_INTEGER), "a drift row for a refusal"
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


def _accepted(drift: dict[str, str], names=NAMES):
    """The accepted models among ``names``, a strict xfail on those ``drift`` names."""
    return [pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=drift[n])]
                         if n in drift else []) for n in names if ACCEPTED[n] == "ok"]


def _inputs(name: str):
    """The checked-in input, then ten more seeded ones."""
    yield _checked_in(name)[0]
    for seed in range(1001, 1011):
        yield sample_input(name.rsplit("_", 1)[0], seed)


@pytest.mark.parametrize("name", _accepted(KNOWN_DRIFT))
def test_accepted_model_matches_onnxruntime(name, capsys):
    """The checked-in output, and onnxruntime live on more seeded inputs."""
    path = REAL / f"{name}.onnx"
    graph = optimize(load_model(path), legalize=True)
    ort, scale = session(path), output_scale(onnx.load(str(path)), "y")
    x, y = _checked_in(name)
    errors = [lsb_errors(executor.run(graph, {"x": x})["y"], y, scale)]
    for x in list(_inputs(name))[1:]:
        errors.append(lsb_errors(executor.run(graph, {"x": x})["y"], ort.run(["y"], {"x": x})[0],
                                 scale))
    figures = check_within_one_lsb(np.concatenate(errors),
                                   f"{name}: hwgen executor vs onnxruntime",
                                   integer=y.dtype.kind in "iu")
    with capsys.disabled():
        print(f"\n{figures}")


@pytest.mark.parametrize("name", _accepted(KNOWN_DRIFT_INTEGER))
def test_accepted_model_matches_onnxruntime_integer_kernels(name, capsys):
    path = REAL / f"{name}.onnx"
    graph = optimize(load_model(path), legalize=True)
    ort, scale = integer_session(path), output_scale(onnx.load(str(path)), "y")
    errors = [lsb_errors(executor.run(graph, {"x": x})["y"], ort.run(["y"], {"x": x})[0], scale)
              for x in _inputs(name)]
    figures = check_within_one_lsb(np.concatenate(errors),
                                   f"{name}: hwgen executor vs onnxruntime's integer kernels",
                                   integer=_checked_in(name)[1].dtype.kind in "iu")
    with capsys.disabled():
        print(f"\n{figures}")


@pytest.mark.parametrize("name", _accepted({}, [n for n in NAMES if n.endswith("_qdq")]))
def test_layers_differ_only_at_float_halves(name, capsys):
    """Each requantized tensor hwgen's graph still names, computed from onnxruntime's values of
    its inputs (so that one difference does not spread): within 1 LSB of onnxruntime, and
    different only where onnxruntime's float value is within ``NEAR_HALF`` of a half."""
    path = REAL / f"{name}.onnx"
    # Legalized but with the residual adds left after their inputs' layout changes
    # (fusion.passes.add_layout moves them before, bit-exactly: tests/fusion/passes/
    # test_add_layout.py), so that every convolution's output keeps its ONNX name here.
    graph = run_to_fixed_point(optimize(load_model(path), legalize=False),
                               (conv_legalize.run, weight_zero_point.run, dce.run))
    model = onnx.load(str(path))
    compared, total, differ, far = set(), 0, 0, []
    for x in _inputs(name):
        ort = quantized_tensors(model, {"x": x})
        env = dict(graph.initializers)
        env.update(executor.coerce_inputs(graph, {"x": x}))
        for node in graph.topo_order():
            executor.evaluate_node(graph, node, env)
            for out in set(node.outputs) & set(ort):
                want, real = ort[out]
                diff = env[out].astype(np.int64) - want.astype(np.int64)
                assert np.abs(diff).max() <= 1, f"{out}: {np.abs(diff).max()} LSB off"
                half = np.abs(real - np.floor(real) - 0.5)[diff != 0]
                far += [f"{out}: {r:.6f}" for r in real[diff != 0][half > NEAR_HALF]]
                compared.add(out)
                total, differ = total + diff.size, differ + np.count_nonzero(diff)
                env[out] = want
    # a layout op's requantize (same scale) has no tensor of its own once folded
    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    quantize_input = {n.output[0]: n.input[0] for n in model.graph.node}
    computed = {q for q in ort if producer.get(quantize_input[q]) not in _LAYOUT}
    assert computed <= compared, f"not compared: {sorted(computed - compared)}"
    assert not far, f"{len(far)} of {differ} differences are not at a half: {far[:5]}"
    with capsys.disabled():
        print(f"\n{name}: {len(compared)} tensors, {total} elements, {differ} differ, all at a "
              f"float32 half")
