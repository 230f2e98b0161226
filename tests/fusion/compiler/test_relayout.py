"""Relayout copies (fusion.compiler.relayout): a tensor that kernels read in place both as
tiles and K-major is copied on the accelerator (a GEMM of the identity, requantized by 1)
for the readers of tiles, instead of the host repacking it between kernels; the plan keeps
the copy only when it is predicted cheaper, records it, and a plan read with its model applies
it again."""

import json
from pathlib import Path

import numpy as np
import pytest

from fusion.compiler.options import CompileOptions
from fusion.compiler.plan import compile_model
from fusion.compiler.plan_folder import PlanError, plan_digest, write_plan
from fusion.compiler.plan_reader import read_plan
from fusion.compiler.relayout import Relayout, apply
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from fusion.reference.executor import run
from fusion.runtime.run import random_inputs
from fusion.runtime.run_report import kernel_macs
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES

ROOT = Path(__file__).resolve().parents[3]
RESNET8 = ROOT / "examples/real/resnet8_qdq.onnx"
V8W = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24, window_unit=True)


def _compile(**options):
    return compile_model(load_model(RESNET8), V8W, cache=KernelCache(disk=False),
                         options=CompileOptions(**options))


@pytest.fixture(scope="module")
def both():
    return _compile(relayout=False), _compile()


def test_the_stems_output_is_copied_for_the_residual_and_no_longer_repacked(both):
    # the stem's output is the first block's residual (tiles) and its first convolution's
    # input (K-major): without copies the host repacks the input; with one, the stem stores
    # K-major, the convolution and the copy read it where it lies, the residual reads the copy
    plain, copied = both
    (repack,) = plain.repacks
    assert copied.repacks == []
    (copy,) = copied.relayouts
    assert copy.tensor == repack.tensor and copy.readers == ("s1_add/qadd",)
    kernels = {k.spec.output: k for k in copied.kernels}
    stem = kernels[copy.tensor]
    assert stem.spec.params.kmajor_out
    gemm = next(k for k in copied.kernels if k.name.startswith(f"{copy.tensor}/relayout"))
    assert gemm.spec.kind.name == "gemm" and gemm.spec.params.kgroup == V8W.cols
    assert copied.memory.in_place(gemm.name) == {"a"}
    assert copied.memory.in_place(repack.kernel) == {"x"}
    reader = next(k for k in copied.kernels if "s1_add/qadd" in k.spec.nodes)
    assert "residual" in copied.memory.in_place(reader.name)
    assert kernel_macs(copied.graph, list(gemm.spec.nodes)) == 0  # not the model's work
    # kept because cheaper: the copy's cycles against the host's repack
    assert copied.predicted_total_cycles < plain.predicted_total_cycles
    assert copied.predicted_cycles > plain.predicted_cycles
    assert copied.to_dict()["relayouts"] == [copy.to_dict()]


def test_a_copy_is_the_tensor_itself(both):
    # the graph with the copy computes the same values everywhere: each copied element is
    # its input, less and plus the zero point
    plain, copied = both
    (copy,) = copied.relayouts
    inputs = random_inputs(plain.graph, seed=5)
    env, env2 = run(plain.graph, inputs, keep=True), run(copied.graph, inputs, keep=True)
    copy_out = next(n for n in copied.graph.nodes if n.name.endswith("/relayout/requant"))
    assert np.array_equal(env2[copy_out.outputs[0]], env[copy.tensor])
    for name in copied.graph.outputs:
        assert np.array_equal(env2[name], env[name])


def test_apply_refuses_a_copy_not_of_its_graph(both):
    plain, _ = both
    graph = plain.graph
    with pytest.raises(ValueError, match="no tensor 'nothing'"):
        apply(graph, [Relayout("nothing", ("s1_add/qadd",), "gemm")])
    (repack,) = plain.repacks
    with pytest.raises(ValueError, match="is no single-output node of the graph reading it"):
        apply(graph, [Relayout(repack.tensor, ("y_dq",), "gemm")])
    with pytest.raises(ValueError, match="a relayout must be"):
        Relayout.from_dict({"tensor": "x", "readers": []})


def test_the_plan_folder_records_the_copies_and_applies_them_to_the_model(both, tmp_path):
    _, copied = both
    write_plan(copied, tmp_path / "p", source=RESNET8)
    back = read_plan(tmp_path / "p", V8W, model=RESNET8)
    assert back.relayouts == copied.relayouts
    assert [k.name for k in back.kernels] == [k.name for k in copied.kernels]
    path = tmp_path / "p" / "plan.json"
    plan = json.loads(path.read_text())
    plan["relayouts"] = []  # as if the graph's copy were not the compiler's
    plan["digest"] = plan_digest(plan)
    path.write_text(json.dumps(plan))
    with pytest.raises(PlanError, match="is not what hwgen compile makes of"):
        read_plan(tmp_path / "p", V8W, model=RESNET8)


def test_a_copy_serves_a_reader_of_an_nchw_view_of_the_rows():
    # Inception's branch max pool reads the join's NCHW view, which only renames the join's
    # rows: the copy of the rows gets the same view, and the pool reads that; the graph
    # computes what it did (and the max pool still finds the rows, now the copy's, in place)
    from fusion.compiler.plan import after_passes
    from fusion.passes.im2col_rows import rows_start

    zoo = ROOT / "examples/zoo/inception_v1_qdq.onnx"
    graph = after_passes(load_model(zoo), V8W)
    pool = next(n for n in graph.nodes if n.op == "maxpool"
                and (rows_start(graph, n.inputs[0]) or ("",))[0].endswith("/rows"))
    rows = rows_start(graph, pool.inputs[0])[0]
    copied = apply(graph, [Relayout(rows, (pool.name,), "gemm")])
    new_pool = copied.node(pool.name)
    assert new_pool.inputs[0] != pool.inputs[0]
    assert rows_start(copied, new_pool.inputs[0])[0] == f"{rows}/relayout/requant"
    inputs = random_inputs(graph, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(run(graph, inputs).values(),
                                                     run(copied, inputs).values(), strict=True))
