"""The MLPerf Tiny-style models in ``examples/real/`` (see ``examples/build_real_models.py``).

The checked-in files are the source of truth (their calibration ran onnxruntime's float
kernels, whose last bits depend on the CPU): nothing here rebuilds and compares them.

* Each model is a valid ONNX model, and the exact reference (``tests/fusion/references.py``)
  reproduces the output checked in beside it, within the bound hwgen is held to: 1 LSB of the
  output scale with at least 99% exact (float64 sums may differ in a last bit between CPUs).
* ``ACCEPTED`` records, per model, whether hwgen imports and compiles it today for an 8x8
  all-stage variant, or the refusal it gives. It is exact in both directions: a model that
  starts compiling, or refuses differently, fails this test until the table says so.
* A model hwgen compiles runs, through the passes and hwgen's reference executor, within the
  bound of the checked-in output and of the exact reference on more seeded inputs (exact on
  every one today), and of onnxruntime's float path (QDQ, optimizations off) where it runs no
  integer kernel. onnxruntime's integer kernels are not a reference: without VNNI they
  saturate (``test_references.py``).
* Layer by layer, each QDQ model's requantized tensors, hwgen fed the reference's integer
  inputs, differ only where the reference's float64 value stood within ``NEAR_HALF`` of a
  rounding half. Against onnxruntime's float32 path this is where MobileNetV1-0.25 drifts:
  twice in 2.85 million layer outputs (11 inputs) its float convolution lands a few ulps on
  the wrong side of a half (21.4999988 exactly, 21.500002 in float32), and 26 later layers
  grow that one LSB into four at the logits (within the bound for 10 of 11 inputs, not for
  the 11 together: 90.91% exact). Against the exact reference hwgen is exact.
"""

from pathlib import Path

import numpy as np
import onnx
import pytest

from examples.build_real_models import MODELS, sample_input
from examples.real_check import within_one_lsb
from fusion.compiler.lower import CompileError
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.ir.graph import GraphError
from fusion.passes import conv_legalize, dce, weight_zero_point
from fusion.passes.driver import optimize, run_to_fixed_point
from fusion.reference import executor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from tests.fusion.references import (
    check_within_one_lsb,
    lsb_errors,
    output_scale,
    quantized_tensors,
    references,
    session,
)

REAL = Path(__file__).resolve().parents[2] / "examples" / "real"
NAMES = [f"{name}_{fmt}" for name, (_, formats) in MODELS.items() for fmt in formats]
V8X8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)
_NO_KERNEL = "has no accelerator kernel, and the host runs only layout and boundary ops"

#: What hwgen makes of each model today: "ok" (imports and compiles for V8X8) or the start of
#: its refusal. Update a row when coverage changes (issue 10 items 1-3).
ACCEPTED = {name: "ok" for name in NAMES}
#: How near a rounding half (in output LSBs) the reference's float value must be where hwgen,
#: fed the same integer inputs, rounds the other way. Float64 sums in another order move a
#: value by about 1e-13 LSB (onnxruntime's float32 ones by 2e-6 and 1e-5 LSB in MobileNet). A
#: difference farther from a half is hwgen's error (one at random lands this near with
#: probability 2e-3).
NEAR_HALF = 1e-3
_LAYOUT = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}


def test_the_table_names_every_bundled_model():
    assert sorted(ACCEPTED) == sorted(NAMES)
    assert sorted(p.stem for p in REAL.glob("*.onnx")) == sorted(NAMES)
    assert sorted(p.stem for p in REAL.glob("*.npz")) == sorted(NAMES)


def _checked_in(name: str):
    with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
        return data["x"], data["y"]


@pytest.mark.parametrize("name", NAMES)
def test_model_is_valid_and_the_reference_reproduces_its_output(name):
    path = REAL / f"{name}.onnx"
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    x, y = _checked_in(name)
    assert x.dtype == np.float32 and x.shape == MODELS[name.rsplit("_", 1)[0]][0]
    (got,) = session(path).run(["y"], {"x": x})
    check_within_one_lsb(lsb_errors(got, y, output_scale(model, "y")),
                         f"{name}: exact reference now vs checked in",
                         integer=y.dtype.kind in "iu")


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


def _accepted(names=NAMES):
    """The accepted models among ``names``."""
    return [n for n in names if ACCEPTED[n] == "ok"]


def _inputs(name: str):
    """The checked-in input, then ten more seeded ones."""
    yield _checked_in(name)[0]
    for seed in range(1001, 1011):
        yield sample_input(name.rsplit("_", 1)[0], seed)


#: Models whose hwgen output (exact against the exact reference) misses the bound against
#: onnxruntime's float path, as measured here over the ten seeded inputs of ``_inputs``. Not
#: asserted either way: float32 sums in another order (another CPU) may move them.
FLOAT_PATH_DRIFT = {
    "resnet8_qdq": "max 1 LSB, 97.00% exact here: onnxruntime's float32 convolutions resolve "
                   "near-halves otherwise (first at conv s1_a), amplified to the logits",
    "mobilenet_v1_025_qdq": "exact on these ten here, but 4 LSB off on the input checked in "
                            "(seed 1000): two float32 near-halves, amplified by 26 layers",
}


@pytest.mark.parametrize("name", _accepted())
def test_accepted_model_matches_the_references(name, capsys):
    """The checked-in output, then the exact reference and onnxruntime's float path (where it
    runs no integer kernel) live on more seeded inputs."""
    path = REAL / f"{name}.onnx"
    graph = optimize(load_model(path), legalize=True)
    scale = output_scale(onnx.load(str(path)), "y")
    x, y = _checked_in(name)
    lines = [check_within_one_lsb(lsb_errors(executor.run(graph, {"x": x})["y"], y, scale),
                                  f"{name}: hwgen executor vs checked in",
                                  integer=y.dtype.kind in "iu")]
    inputs = list(_inputs(name))[1:]
    got = [executor.run(graph, {"x": x})["y"] for x in inputs]
    for label, reference in references(path):
        errors = np.concatenate([lsb_errors(g, reference.run(["y"], {"x": x})[0], scale)
                                 for g, x in zip(got, inputs, strict=True)])
        label = f"{name}: hwgen executor vs {label}"
        if label.endswith("float path") and name in FLOAT_PATH_DRIFT:
            # a comparison, not a reference: its float32 sums depend on the CPU
            lines.append(within_one_lsb(errors, label, integer=False)[1] + " (not asserted: "
                         + FLOAT_PATH_DRIFT[name] + ")")
            continue
        lines.append(check_within_one_lsb(errors, label, integer=y.dtype.kind in "iu"))
    with capsys.disabled():
        print("\n" + "\n".join(lines))


@pytest.mark.parametrize("name", _accepted([n for n in NAMES if n.endswith("_qdq")]))
def test_layers_differ_only_at_float_halves(name, capsys):
    """Each requantized tensor hwgen's graph still names, computed from the exact reference's
    values of its inputs (so that one difference does not spread): within 1 LSB of it, and
    different only where its float value is within ``NEAR_HALF`` of a half."""
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
              f"float half")
