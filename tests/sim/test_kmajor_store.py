"""The transposing store (MATMUL ``tr``) on Verilator: a GEMM's int8 output stored K-major is
the same matrix, bit for bit, as the numpy reference; the analytical model predicts its cycles
exactly; and a second GEMM placed on that output reads it as its A operand where it lies,
in the same simulator launch, with nothing rewritten between the two."""

import numpy as np
import pytest

from fusion.kernels.gemm.kind import compiled_gemm
from fusion.kernels.layout import place
from fusion.kernels.tiling import Tiling
from hwgen.presets import SIM_VARIANTS
from hwgen.reference import EpilogueParams, gemm_epilogue
from sim.gemm_check import GemmCase, run_gemms
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow

EPI = ("bias", "requant", "relu")


@pytest.fixture(scope="module", params=["2x2", "4x4"])
def square(request):
    from sim.build import build_variant

    config = SIM_VARIANTS[request.param]
    build_variant(config)
    return config


def test_kmajor_store_is_bit_exact_and_predicted_exactly(square):
    """Ragged M and N, K chunks, both loop orders, single buffering, a store-bound shape
    (K one alignment step: tiles come faster than the port stores them)."""
    ka = square.k_align
    shapes = [
        (23, 5 * ka, 13, EPI, None),
        (9, 12 * ka, 3 * square.cols, ("bias", "requant"), Tiling(order="nm")),
        (17, 6 * ka, 7, ("requant", "clamp"), Tiling(kt=ka, order="mn", double_buffer=False)),
        (40, ka, 4 * square.cols, ("requant",), None),
        (1, 16 * ka, 5, EPI, None),
    ]
    cases = [GemmCase(m, k, n, stages=st, tiling=t, seed=60 + i, kmajor_out=tr)
             for i, (m, k, n, st, t) in enumerate(shapes) for tr in (True, False)]
    reports = run_gemms(square, cases)
    for case, r in zip(cases, reports, strict=True):
        assert r.ok, r.summary()
        kernel = case.kernel(square)
        predicted = kernel.kind.features(square, kernel.signature).analytical_cycles()
        assert predicted == r.cycles, f"{r.summary()}: predicted {predicted}"
    for kmajor, tiles in zip(reports[::2], reports[1::2], strict=True):
        np.testing.assert_array_equal(kmajor.got, tiles.got)
        # the corner turn costs latency (one tile's rows at the end: rows * share beats),
        # no bandwidth
        assert 0 < kmajor.cycles - tiles.cycles <= square.rows * square.epilogue_share + 1
        assert kmajor.counters["bytes_written"] == tiles.counters["bytes_written"]


def _chain(config, m, k1, n1, n2, *, kmajor):
    """GEMM 1 (``m x k1 x n1``, int8 out) then GEMM 2 reading GEMM 1's output region as its A,
    in one launch; returns (GEMM 2's result, the numpy reference of the chain)."""
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (m, k1), dtype=np.int8)
    b1 = rng.integers(-128, 128, (k1, n1), dtype=np.int8)
    b2 = rng.integers(-128, 128, (n1, n2), dtype=np.int8)
    bias1 = rng.integers(-5000, 5000, n1).astype(np.int32)
    p1 = EpilogueParams(mult=1 << 30, shift=40, zp=-3)
    p2 = EpilogueParams(mult=1 << 30, shift=38, zp=2)
    k1_ = compiled_gemm(config, m, k1, n1, stages=("bias", "requant"), params=p1,
                        kmajor_out=kmajor)
    first = place(config, k1_.kind.regions(config, k1_.signature))
    end = max(r.addr + r.words(config.port_bytes) for r in first.values())
    k2_ = compiled_gemm(config, m, n1, n2, stages=("requant",), params=p2)
    sizes = k2_.kind.regions(config, k2_.signature)
    assert sizes["a"] == first["out"].nbytes  # the K-major output is exactly A's region
    placement = {"a": first["out"].addr}
    for name in sizes:
        if name != "a":
            placement[name] = end
            end += -(-sizes[name] // config.port_bytes) + 8
    k1_ = compiled_gemm(config, m, k1, n1, stages=("bias", "requant"), params=p1,
                        kmajor_out=kmajor, placement={n: r.addr for n, r in first.items()})
    k2_ = compiled_gemm(config, m, n1, n2, stages=("requant",), params=p2, placement=placement)
    w1 = k1_.memory(a=a, b=b1, bias=bias1)
    # GEMM 2 writes only its weights: its A is what GEMM 1 stored
    w2 = [(addr, data) for addr, data in k2_.memory(a=np.zeros((m, n1), np.int8), b=b2)
          if addr != placement["a"]]
    jobs = [Job(k1_.program, MemoryImage(writes=tuple(w1), reads=k1_.reads), name="gemm1"),
            Job(k2_.program, MemoryImage(writes=tuple(w2), reads=k2_.reads), name="gemm2",
                keep_memory=True)]
    one, two = run_programs(config, jobs)
    y1 = gemm_epilogue(a, b1, ("bias", "requant"), p1, bias=bias1)
    np.testing.assert_array_equal(k1_.decode(bytes(one.outputs["out"])), y1)
    return k2_.decode(bytes(two.outputs["out"])), gemm_epilogue(y1, b2, ("requant",), p2)


@pytest.mark.parametrize("m, k1, n1, n2", [(13, 20, 16, 6), (8, 8, 8, 8)])
def test_next_gemm_reads_the_kmajor_output_in_place(square, m, k1, n1, n2):
    got, want = _chain(square, m, k1, n1, n2, kmajor=True)
    np.testing.assert_array_equal(got, want)


def test_the_tile_layout_in_place_is_not_the_same_matrix(square):
    """The control: the same chain with GEMM 1 storing row-major tiles gives GEMM 2 the wrong
    A, so the chain test above can fail."""
    got, want = _chain(square, 13, 20, 16, 6, kmajor=False)
    assert not np.array_equal(got, want)


def test_a_model_runs_its_gemm_chain_on_one_memory():
    """``hwgen run``'s runtime: the MLP's second GEMM reads the first one's K-major output
    where it lies (the host writes only the model's input), and the output still matches
    the exact reference (not onnxruntime, whose QLinearMatMul saturates without VNNI)."""
    import onnx

    from examples.exact_reference import reference_session
    from examples.real_check import lsb_errors, output_scale, within_one_lsb
    from fusion.compiler.plan import HostStep, compile_model
    from fusion.frontend.load import load_model
    from fusion.kernels.cache import KernelCache
    from fusion.runtime.run import random_inputs, run_compiled
    from tests.fusion.compiler.test_store_layout import EXAMPLES

    config = SIM_VARIANTS["4x4"]
    path = EXAMPLES / "qop_mlp.onnx"
    compiled = compile_model(load_model(path), config, cache=KernelCache(disk=False))
    first, second = (s for s in compiled.steps if not isinstance(s, HostStep))
    assert first.spec.params.kmajor_out and compiled.memory.in_place(second.name) == {"a"}
    inputs = random_inputs(compiled.graph, seed=3)
    report = run_compiled(compiled, inputs)
    assert report.host_written_bytes == first.compiled.regions["a"].nbytes
    (name,) = compiled.graph.outputs
    model = onnx.load(str(path))
    want = reference_session(model).run([name], dict(inputs))[0]
    ok, figures = within_one_lsb(lsb_errors(report.outputs[name], want,
                                            output_scale(model, name)),
                                 "vs the exact reference", integer=want.dtype.kind in "iu")
    assert ok, figures


def test_the_runtime_writes_a_repack_the_plan_lists():
    """The residual MLP's second GEMM reads the first one's output as its A and as its
    residual: the tiles serve the residual where they lie, and the A is the plan's one
    repack, which the host writes (and the run report counts) beside the model's input."""
    from fusion.compiler.plan import HostStep, compile_model
    from fusion.frontend.load import load_model
    from fusion.kernels.cache import KernelCache
    from fusion.runtime.run import random_inputs, run_compiled
    from tests.fusion.compiler.test_store_layout import EXAMPLES

    config = SIM_VARIANTS["4x4"]
    compiled = compile_model(load_model(EXAMPLES / "qdq_mlp_residual.onnx"), config,
                             cache=KernelCache(disk=False))
    first, second = (s for s in compiled.steps if not isinstance(s, HostStep))
    (repack,) = compiled.repacks
    report = run_compiled(compiled, random_inputs(compiled.graph, seed=3))
    assert report.repacks == [repack.to_dict()]
    assert report.host_written_bytes == (first.compiled.regions["a"].nbytes
                                         + repack.written_bytes)


def test_a_relayout_copy_runs_exactly_and_the_host_writes_only_the_input():
    """ResNet-8 on Verilator (8x8, window unit): its stem's output is copied on the
    accelerator for the first block's residual (fusion.compiler.relayout), so no kernel
    input is repacked by the host: it writes the model's input and nothing else. The copy's
    cycles are measured and predicted alike, and the output is the checked-in exact one."""
    from fusion.compiler.plan import compile_model
    from fusion.frontend.load import load_model
    from fusion.kernels.cache import KernelCache
    from fusion.runtime.run import run_compiled
    from tests.fusion.compiler.test_relayout import RESNET8, V8W

    compiled = compile_model(load_model(RESNET8), V8W, cache=KernelCache(disk=False))
    assert compiled.relayouts and compiled.repacks == []
    with np.load(RESNET8.with_suffix(".npz"), allow_pickle=False) as data:
        x, want = data["x"], data["y"]
    report = run_compiled(compiled, {"x": x})
    assert np.array_equal(report.outputs["y"], want)
    first = compiled.kernels[0]
    assert report.repacks == [] and report.host_written_bytes == sum(
        r.nbytes for name, r in first.compiled.regions.items()
        if first.spec.region_role(name) == "input")
    copy = next(k for k in report.kernels if "/relayout/" in k.name)
    assert copy.cycles == round(copy.predicted_cycles) and copy.macs == 0
