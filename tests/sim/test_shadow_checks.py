"""Shadow checks that catch faults, on Verilator: counter invariants after every kernel, the
directed input sets beside a model's own, and one mutant of ``make mutate`` end to end."""

import pytest

from bench import mutate
from bench.mutations import MUTATIONS
from sim.gemm_check import GemmCase, report
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow


def test_a_byte_counter_counting_beats_fails_the_gemm_check(v4x4):
    """The issue's mutant: bytes_written counting write beats passed `hwgen gemm`, which only
    compared the outputs. The run's counters read as that mutant's would."""
    case = GemmCase(19, 40, 23, stages=v4x4.epilogue, seed=3)
    kernel = case.kernel(v4x4)
    (result,) = run_programs(v4x4, [Job(program=kernel.program, memory=MemoryImage(
        writes=tuple(case.memory(kernel)), reads=kernel.reads))])
    good = report(v4x4, case, kernel, result)
    assert good.ok and good.violations == ()
    beats = dict(result.counters, bytes_written=result.counters["bytes_written"]
                 // v4x4.port_bytes)
    bad = report(v4x4, case, kernel, type(result)(result.outputs, beats, result.wall_seconds))
    assert not bad.ok and bad.mismatches == 0
    (text,) = bad.violations
    assert text.startswith("counter bytes_written reads")
    assert "COUNTER VIOLATION" in bad.summary()
    assert bad.to_dict()["counter_violations"] == [text]


def test_directed_sets_run_beside_each_kernel(v4x4):
    from fusion.compiler.plan import compile_model
    from fusion.runtime.run import run_compiled

    compiled = compile_model(_example("qdq_cnn"), v4x4)
    plain = run_compiled(compiled, _inputs(compiled), shadow_inputs=0)
    directed = run_compiled(compiled, _inputs(compiled), shadow_inputs=3)
    # the model's own results and measurements are those of the model's own values
    assert [k.counters for k in plain.kernels] == [k.counters for k in directed.kernels]
    assert all((plain.outputs[n] == directed.outputs[n]).all() for n in plain.outputs)


def _example(name):
    from pathlib import Path

    from fusion.frontend.load import load_model

    return load_model(str(Path(__file__).resolve().parents[2] / "examples" / f"{name}.onnx"), {})


def _inputs(compiled):
    from fusion.runtime.run import random_inputs

    return random_inputs(compiled.graph, 0)


def test_the_relu_mutant_is_caught_by_gemm_and_by_run(tmp_path):
    """One mutant of the campaign end to end: patched in a scratch copy, regenerated, built
    and checked there (HWGEN_BUILD_DIR of its own); with the default seed, `hwgen run
    qdq_cnn.onnx` now catches it through its directed inputs."""
    relu = next(m for m in MUTATIONS if m.name == "relu-lets-minus-one")
    mutate.scratch_copy(tmp_path / "sources")
    outcome = mutate.run_mutant(relu, tmp_path)
    assert outcome.errors == []
    assert {"gemm 19x40x23", "run qdq_cnn"} <= set(outcome.caught_by)
