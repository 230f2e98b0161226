"""The model-zoo classics in ``examples/zoo/`` (small sizes; ``examples/build_zoo_models.py``).

The checked-in files are the source of truth (their calibration ran onnxruntime's float
kernels, whose last bits depend on the CPU): nothing here rebuilds and compares them.

* Each is a valid ONNX model, and the exact reference reproduces the output checked in beside
  it within the bound hwgen is held to.
* Each imports and compiles for the 8x8 all-stage variant with the window unit, and
  ``HOST_OPS`` records exactly the compute it leaves to the host today (issue 32 shrinks
  it): a model that changes fails here until the table says so.
* hwgen's graph after the passes, run by its reference executor, is within the bound of the
  exact reference on the checked-in input and three more seeded ones (exact on all today), as
  is the imported graph evaluated in float64.
"""

from pathlib import Path

import numpy as np
import onnx
import pytest

from examples.build_zoo_models import BUILDERS, FORMATS, input_shape, sample
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from fusion.passes.driver import optimize
from fusion.reference import executor
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from tests.fusion.references import check_within_one_lsb, lsb_errors, output_scale, session

ZOO = Path(__file__).resolve().parents[2] / "examples" / "zoo"
NAMES = [f"{name}_{fmt}" for name in BUILDERS for fmt in FORMATS[name]]
V8W = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24, window_unit=True)

#: The compute each model leaves to the host today, by op. Softmax (``softmax``, a QOperator
#: model's QLinearSoftmax too: fusion.passes.host_quantized) and LRN are there by design
#: (``lrn``: an LRN over a convolution's rows, fusion.passes.host_rows); the
#: rest is issue 32's work: a join (``qconcat``) whose inputs do not fill
#: whole column blocks of the 8x8 array (the small models' widths are not multiples of 8 but
#: SqueezeNet's: fusion.kernels.concat), the float tail onnxruntime's QOperator ShuffleNet
#: leaves unquantized (Sum, Relu, GlobalAveragePool: its residual stream stays float from one
#: block to the next, so no integer op computes it exactly), and the QDQ ShuffleNet's first
#: average pool, quantized in and out alike: its border windows' quotient by 6 has exact
#: halves, which round to even, and no requantize multiplier does that
#: (fusion.passes._qdq_pool).
HOST_OPS = {
    "squeezenet_qdq": {"softmax": 1},
    "squeezenet_qop": {"softmax": 1},
    "inception_v1_qdq": {"qconcat": 3, "lrn": 2, "softmax": 1},
    "inception_v2_qdq": {"qconcat": 4, "softmax": 1},
    "resnet50_qdq": {"softmax": 1},
    "shufflenet_qdq": {"AveragePool": 1, "qconcat": 1, "softmax": 1},
    "shufflenet_qop": {"GlobalAveragePool": 1, "qconcat": 1, "softmax": 1, "Relu": 1,
                       "Sum": 1},
    "densenet121_qdq": {"qconcat": 5, "softmax": 1},
}

def _checked_in(name: str):
    with np.load(ZOO / f"{name}.npz", allow_pickle=False) as data:
        return data["x"], data["y"]


def test_the_table_names_every_model():
    assert sorted(HOST_OPS) == sorted(NAMES)
    assert sorted(p.stem for p in ZOO.glob("*.onnx")) == sorted(NAMES)
    assert sorted(p.stem for p in ZOO.glob("*.npz")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_model_is_valid_and_the_reference_reproduces_its_output(name):
    path = ZOO / f"{name}.onnx"
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    x, y = _checked_in(name)
    assert x.shape == input_shape(name.rsplit("_", 1)[0], full=False)
    (got,) = session(path).run(["y"], {"x": x})
    check_within_one_lsb(lsb_errors(got, y, output_scale(model, "y")),
                         f"{name}: exact reference now vs checked in", integer=False)


@pytest.mark.parametrize("name", NAMES)
def test_the_host_computes_what_the_table_says(name):
    compiled = compile_model(load_model(ZOO / f"{name}.onnx"), V8W,
                             cache=KernelCache(disk=False))
    host = {}
    for h in compiled.host_ops:
        host[h.node.op] = host.get(h.node.op, 0) + 1
    assert host == HOST_OPS[name], f"{name}: host ops now {host}: update HOST_OPS"
    assert compiled.kernels


@pytest.mark.parametrize("name", NAMES)
def test_hwgen_matches_the_exact_reference(name, capsys):
    path = ZOO / f"{name}.onnx"
    imported = load_model(path)
    graph = optimize(imported, legalize=True)
    scale = output_scale(onnx.load(str(path)), "y")
    reference = session(path)
    inputs = [_checked_in(name)[0]] + [sample(name.rsplit("_", 1)[0], False, seed)
                                       for seed in (1001, 1002, 1003)]
    wants = [reference.run(["y"], {"x": x})[0] for x in inputs]
    lines = []
    for label, g, float64 in (("hwgen's graph", graph, False),
                              ("the imported graph in float64", imported, True)):
        errors = np.concatenate([lsb_errors(executor.run(g, {"x": x}, float64=float64)["y"],
                                            want, scale)
                                 for x, want in zip(inputs, wants, strict=True)])
        lines.append(check_within_one_lsb(errors, f"{name}: {label} vs the exact reference",
                                          integer=False))
    with capsys.disabled():
        print("\n" + "\n".join(lines))
