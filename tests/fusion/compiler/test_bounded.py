"""Work is bounded before it starts: a model too big for the variant is refused, with the
figures, before any candidate is priced, and nothing on the way allocates its tensors."""

from pathlib import Path

import onnx
import pytest

from fusion.compiler.lower import CompileError
from fusion.compiler.plan import compile_model
from fusion.cost.analytical import AnalyticalModel
from fusion.frontend.onnx_import import import_onnx
from fusion.ir.synthetic import mlp
from hwgen.presets import SIM_VARIANTS

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
V2 = SIM_VARIANTS["2x2"]  # 2**17 words of 4 bytes


class CountingModel(AnalyticalModel):
    """The analytical model, counting the candidates it prices."""

    def __init__(self) -> None:
        self.priced = 0

    def predict(self, features) -> float:
        self.priced += 1
        return super().predict(features)


@pytest.mark.parametrize(("batch", "fix"), [
    (10**5, "generate a variant with --mem-addr-bits 19"),
    (10**12, "that needs --mem-addr-bits 42, which no variant has"),
])
def test_a_model_too_big_is_refused_before_any_candidate_is_priced(batch, fix):
    # every candidate was priced first, then the memory plan refused (10**9 took 244 s)
    model = CountingModel()
    with pytest.raises(CompileError) as exc:
        compile_model(mlp(layers=2, width=8, batch=batch), V2, model=model)
    message = str(exc.value)
    need = 2 * batch * 8  # the int8 input and output of the first layer
    assert f"needs at least {need + 160:,} bytes of external memory" in message
    assert "but the variant has 524,288 (mem_addr_bits=17)" in message
    assert fix in message
    assert model.priced == 0


def test_a_model_that_fits_is_priced_as_before():
    model = CountingModel()
    compiled = compile_model(mlp(layers=2, width=8, batch=4), V2, model=model)
    assert model.priced > 0 and len(compiled.kernels) == 2


def test_a_conv_model_with_a_huge_batch_never_allocates_its_tensors(tmp_path):
    # folding the conv's bias broadcast it to the whole output: 1 PiB, a MemoryError
    proto = onnx.load(EXAMPLES / "qdq_cnn.onnx")
    for value in (*proto.graph.input, *proto.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "N"
    del proto.graph.value_info[:]
    graph = import_onnx(proto, input_shapes={"x": (10**12, 3, 12, 12)})
    with pytest.raises(CompileError, match="bytes of external memory"):
        compile_model(graph, V2, model=CountingModel())
