"""The compiler's choice of each GEMM's store layout (fusion.compiler.store_layout): a GEMM
whose output only GEMMs read as their A stores it K-major, and they read it where it lies;
any reader of tiles, or a variant that cannot transpose, keeps the tiles. The plan folder
records the choice and refuses one the compiler would not make."""

import json
import math
from pathlib import Path

import pytest

from fusion.compiler.plan import HostStep, compile_model
from fusion.compiler.plan_folder import PlanError, plan_digest, write_plan
from fusion.compiler.plan_reader import read_plan
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from hwgen.presets import SIM_VARIANTS

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SQUARE, TALL = SIM_VARIANTS["4x4"], SIM_VARIANTS["4x8"]


def _kernels(name, config):
    compiled = compile_model(load_model(EXAMPLES / name), config,
                             cache=KernelCache(disk=False))
    return compiled, [s for s in compiled.steps if not isinstance(s, HostStep)]


def test_a_gemm_feeding_a_gemm_stores_k_major_and_is_read_in_place():
    compiled, (first, second) = _kernels("qop_mlp.onnx", SQUARE)
    assert first.spec.params.kmajor_out and not second.spec.params.kmajor_out
    assert "stored K-major" in first.spec.describe()
    assert compiled.memory.in_place(second.name) == {"a"}
    assert second.compiled.regions["a"].addr == first.compiled.regions["out"].addr
    assert second.spec.inputs[0] == first.spec.output


def test_a_non_square_array_keeps_the_tiles():
    compiled, kernels = _kernels("qop_mlp.onnx", TALL)
    assert not any(k.spec.params.kmajor_out for k in kernels)
    assert not any(compiled.memory.in_place(k.name) for k in kernels)


def test_an_output_read_as_a_residual_keeps_the_tiles():
    compiled, (first, second) = _kernels("qdq_mlp_residual.onnx", SQUARE)
    assert not first.spec.params.kmajor_out
    assert compiled.memory.in_place(second.name) == {"residual"}


def test_the_plan_folder_keeps_the_choice_and_refuses_another(tmp_path):
    compiled, _ = _kernels("qop_mlp.onnx", SQUARE)
    write_plan(compiled, tmp_path / "p", source=EXAMPLES / "qop_mlp.onnx")
    got = read_plan(tmp_path / "p", SQUARE)
    assert [s.spec.params.kmajor_out for s in got.steps if not isinstance(s, HostStep)] == [
        True, False]
    path = tmp_path / "p" / "plan.json"
    plan = json.loads(path.read_text())
    first = next(s for s in plan["steps"] if s["kind"] == "kernel")
    del first["params"]["kmajor_out"]  # as if the first GEMM stored tiles
    first["describe"] = first["describe"].replace(", stored K-major", "")
    plan["digest"] = plan_digest(plan)
    path.write_text(json.dumps(plan))
    with pytest.raises(PlanError, match="output layouts"):
        read_plan(tmp_path / "p", SQUARE)


def test_a_tensor_no_store_serves_is_a_priced_repack_in_the_plan():
    # the second GEMM reads the first's output twice: as its A (K-major) and as its residual
    # (tiles); the tiles serve the residual, and the host rewrites the A between the kernels
    compiled, (first, second) = _kernels("qdq_mlp_residual.onnx", SQUARE)
    (repack,) = compiled.repacks
    assert (repack.kernel, repack.region, repack.producer) == (second.name, "a", first.name)
    assert repack.tensor == first.spec.output == second.spec.inputs[0]
    assert repack.stored.startswith("tiles/") and repack.wanted.startswith("kmajor/")
    assert repack.written_bytes == second.compiled.regions["a"].nbytes
    assert repack.read_bytes == first.compiled.regions["out"].nbytes
    assert repack.predicted_cycles > 0 and repack.link_cycles > 0
    host = compiled.host_model
    assert compiled.predicted_host_seconds == pytest.approx(
        sum(h.predicted_seconds for h in compiled.host) + host.seconds_of(
            2 * math.prod(compiled.graph.tensors[repack.tensor].shape)))
    assert f"repack {second.name}.a" in compiled.explain()
    assert compiled.to_dict()["repacks"] == [repack.to_dict()]


def test_a_plan_whose_readers_take_every_output_in_place_has_no_repack():
    compiled, _ = _kernels("qop_mlp.onnx", SQUARE)
    assert compiled.repacks == [] and compiled.to_dict()["repacks"] == []


def _gemm_spec(name, inputs, output, stages=("requant",)):
    from fusion.compiler.kernels import KernelSpec
    from fusion.kernels.gemm.params import GemmParams
    from fusion.kernels.kinds import kind

    return KernelSpec(name=name, kind=kind("gemm"), nodes=(name,), inputs=tuple(inputs),
                      output=output, params=GemmParams(M=16, K=16, N=16, stages=stages))


@pytest.mark.parametrize("gemm_readers, kmajor", [(1, False), (2, True), (3, True)])
def test_the_store_serves_the_readers_of_more_bytes(gemm_readers, kmajor):
    # one producer, read as A by GEMMs and as a residual (tiles) by one more GEMM: a reader
    # the store does not serve is repacked by the host, so the store serves more bytes; on a
    # tie the tiles stay
    from fusion.compiler.store_layout import kmajor_producers

    specs = [_gemm_spec("p", ["x"], "t"),
             _gemm_spec("r", ["y", "t"], "u", stages=("residual", "requant"))]
    specs += [_gemm_spec(f"g{i}", ["t"], f"v{i}") for i in range(gemm_readers)]
    shapes = {s.output: (16, 16) for s in specs}
    assert kmajor_producers(SQUARE, specs, shapes) == ({"p"} if kmajor else set())
