"""Whole models on the simulated accelerator: compiled, run kernel by kernel, shadow-checked.

For each bundled example (MLP, residual MLP, CNN), fused and unfused: the hardware's outputs
equal the reference executor's bit for bit, and are within the frontend's tolerance (1 LSB,
at least 99% exact) of onnx.reference.ReferenceEvaluator. A corrupted kernel stops the run
and is named. The kernel cache serves a second compile and rebuilds a corrupted entry.
"""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from examples.build_models import MODELS, sample_input
from fusion.compiler.plan import compile_model
from fusion.frontend import import_onnx
from fusion.kernels.cache import KernelCache
from fusion.reference import executor
from fusion.runtime.run import ShadowMismatch, run_compiled

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return KernelCache(tmp_path_factory.mktemp("kernel_cache"))


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_example_runs_bit_exact_against_the_executor(name, fusion, v4x4, cache):
    path = EXAMPLES / f"{name}.onnx"
    compiled = compile_model(import_onnx(path), v4x4, cache=cache, fusion=fusion)
    reference = ReferenceEvaluator(onnx.load(str(path)))
    scale = {i.name: onnx.numpy_helper.to_array(i)
             for i in onnx.load(str(path)).graph.initializer}.get("y_scale")
    for seed in SEEDS:
        x = sample_input(name, seed)
        report = run_compiled(compiled, {"x": x})
        out = compiled.graph.outputs[0]
        want = executor.run(compiled.graph, {"x": x})[out]
        np.testing.assert_array_equal(report.outputs[out], want)
        onnx_out = reference.run(None, {"x": x})[0]
        if onnx_out.dtype.kind == "f":
            lsb = np.rint((report.outputs[out].astype(np.float64) - onnx_out) / scale)
        else:
            lsb = report.outputs[out].astype(np.int64) - onnx_out
        assert np.abs(lsb).max() <= 1
        assert np.mean(lsb == 0) >= 0.99
    assert report.total_cycles > 0
    assert all(k.cycles > 0 and k.predicted_cycles > 0 for k in report.kernels)
    if not fusion:
        # every compute op is its own kernel
        assert all(len(k.ops) == 1 for k in report.kernels)


def test_fusion_saves_cycles_on_the_mlp(v4x4, cache):
    path = EXAMPLES / "qdq_mlp_residual.onnx"
    x = sample_input("qdq_mlp_residual", 1)
    totals = {}
    for fusion in (True, False):
        compiled = compile_model(import_onnx(path), v4x4, cache=cache, fusion=fusion)
        totals[fusion] = run_compiled(compiled, {"x": x}).total_cycles
    assert totals[True] < totals[False]


def test_a_corrupted_kernel_stops_the_run_naming_it(v4x4, cache):
    from hwgen import isa

    path = EXAMPLES / "qdq_mlp_residual.onnx"
    compiled = compile_model(import_onnx(path), v4x4, cache=cache)
    victim = compiled.kernels[1]
    # Change the requantize zero point the program writes: the program still runs to done,
    # but every output is off.
    words = list(victim.compiled.program)
    for i, word in enumerate(words):
        instr = isa.decode(word)
        if instr.op == isa.Op.CSRWI and instr.get("csr") == isa.Csr.REQ_ZP:
            words[i] = isa.encode(isa.Instr(isa.Op.CSRWI, {**instr.args,
                                                           "imm": instr.get("imm") + 3}))
            break
    else:
        pytest.fail("no requantize zero-point write in the kernel")
    victim.compiled = victim.compiled.with_program(words, victim.compiled.source)
    with pytest.raises(ShadowMismatch, match=victim.name) as info:
        run_compiled(compiled, {"x": sample_input("qdq_mlp_residual", 1)})
    assert info.value.kernel == victim.name


def test_a_corrupted_output_buffer_stops_the_run_naming_it(v4x4, cache, monkeypatch):
    """The kernel writes its result, then something overwrites the buffer: the read-back
    differs from the reference."""
    path = EXAMPLES / "qop_mlp.onnx"
    compiled = compile_model(import_onnx(path), v4x4, cache=cache)
    victim = compiled.kernels[-1]
    original = victim.compiled.decode

    def flip(outputs):
        raw = dict(outputs)
        raw["out"] = np.array(raw["out"], copy=True)
        raw["out"][0] ^= 0x01
        return original(raw)

    object.__setattr__(victim.compiled, "decode", flip)
    with pytest.raises(ShadowMismatch, match=victim.name):
        run_compiled(compiled, {"x": sample_input("qop_mlp", 1)})


def test_second_compile_is_served_from_the_cache_and_a_corrupt_entry_is_rebuilt(v4x4, tmp_path):
    path = EXAMPLES / "qdq_cnn.onnx"
    first = compile_model(import_onnx(path), v4x4, cache=KernelCache(tmp_path))
    n = len(first.kernels)
    assert first.cache_stats["misses"] == n
    second = compile_model(import_onnx(path), v4x4, cache=KernelCache(tmp_path))
    assert second.cache_stats["disk_hits"] == n and second.cache_stats["misses"] == 0
    entries = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".json")
    assert len(entries) >= n
    entries[0].write_bytes(entries[0].read_bytes()[:-20])  # truncated
    third = compile_model(import_onnx(path), v4x4, cache=KernelCache(tmp_path))
    assert third.cache_stats["corrupt"] == 1 and third.cache_stats["misses"] == 1
    for a, b in zip(first.kernels, third.kernels, strict=True):
        assert a.compiled.program == b.compiled.program
    report = run_compiled(third, {"x": sample_input("qdq_cnn", 1)})
    assert report.total_cycles > 0


def test_dispatch_refuses_a_kernel_compiled_for_other_quantization(v4x4, cache):
    import dataclasses

    from fusion.ir.graph import GraphError

    path = EXAMPLES / "qop_mlp.onnx"
    compiled = compile_model(import_onnx(path), v4x4, cache=cache)
    victim = compiled.kernels[0]
    epilogue = victim.spec.params.epilogue
    victim.spec = victim.spec.with_params(dataclasses.replace(
        victim.spec.params, epilogue=dataclasses.replace(epilogue, zp=epilogue.zp + 1)))
    with pytest.raises(GraphError, match=f"kernel '{victim.name}' was compiled for quant "):
        run_compiled(compiled, {"x": sample_input("qop_mlp", 1)})


def test_a_model_is_one_simulator_launch(v4x4, cache, monkeypatch):
    """Every kernel of the CNN and its directed sets are jobs of one launch (the real
    launcher, counted): the model's kernels first, back to back on one memory, then each
    kernel's directed sets; and each job ran its own kernel's program."""
    import sim.run

    launches = []
    real = sim.run.run_programs

    def counted(config, jobs, **kw):
        launches.append([job.name for job in jobs])
        return real(config, jobs, **kw)

    monkeypatch.setattr(sim.run, "run_programs", counted)
    compiled = compile_model(import_onnx(EXAMPLES / "qdq_cnn.onnx"), v4x4, cache=cache)
    report = run_compiled(compiled, {"x": sample_input("qdq_cnn", 1)}, shadow_inputs=2)
    (names,) = launches
    kernels = [k.name for k in report.kernels]
    n = len(kernels)
    assert n > 1 and names[:n] == kernels
    assert names[n:] == [f"{k}-directed{d}" for k in kernels for d in (1, 2)]
