"""External-memory planning: lifetimes, reuse, in-place passes, and the peak."""

import pytest

from fusion.compiler.kernels import KernelSpec
from fusion.compiler.lower import CompileError
from fusion.compiler.memplan import plan_memory
from fusion.kernels.epipass.kind import PassParams
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.kinds import kind
from hwgen.config import VariantConfig

CFG = VariantConfig(rows=4, cols=4)


def _spec(name, form, inputs, output, m=16, n=16, src="int8", out="int8"):
    # a GEMM without stages stores int32; one with requant stores int8
    params = (GemmParams(M=m, K=16, N=n, stages=("requant",) if out == "int8" else ())
              if form == "gemm" else PassParams(M=m, N=n, src_dtype=src, out_dtype=out))
    return KernelSpec(name=name, kind=kind(form), params=params, nodes=(name,),
                      inputs=tuple(inputs), output=output)


def _shapes(steps):
    """Each produced tensor as its kernel's ``M x N`` output (one 2-D view)."""
    return {s.output: s.kind.output(s.params).shape for s in steps}


def _overlap(a, b):
    return a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes


def test_dead_buffers_are_reused_and_live_ones_never_overlap():
    # a chain of four GEMMs: t0 -> t1 -> t2 -> t3 -> t4; each A operand is packed by the host
    steps = [_spec(f"k{i}", "gemm", [f"t{i}"], f"t{i + 1}") for i in range(4)]
    regions = {s.name: {"a": 1024, "b": 4096, "out": 1024} for s in steps}
    last_use = {"t1": 1, "t2": 2, "t3": 3, "t4": 4}
    plan = plan_memory(CFG, steps, regions, last_use, _shapes(steps))
    for x in plan.buffers:
        for y in plan.buffers:
            if x is not y and x.first <= y.last and y.first <= x.last:
                assert not _overlap(x, y), (x.name, y.name)
    # weights live throughout (4 x 4096); activations reuse a few slots
    assert plan.peak_bytes < plan.unshared_bytes
    assert plan.peak_bytes <= 4 * 4096 + 3 * 1024
    assert set(plan.placements["k2"]) == {"a", "b", "out"}


def test_a_pass_reads_its_producers_output_in_place():
    gemm = _spec("g", "gemm", ["x"], "acc", out="int32")
    bias = _spec("p", "pass", ["acc"], "y", src="int32", out="int8")
    regions = {"g": {"a": 256, "b": 256, "out": 1024}, "p": {"src": 1024, "bias": 64,
                                                              "out": 256}}
    plan = plan_memory(CFG, [gemm, bias], regions, {"acc": 1, "y": 2}, _shapes([gemm, bias]))
    assert plan.placements["p"]["src"] == plan.placements["g"]["out"]
    shared = next(b for b in plan.buffers if b.name == "g.out")
    assert shared.users == ["g.out", "p.src"] and shared.last == 1


def test_a_layout_change_is_not_read_in_place():
    gemm = _spec("g", "gemm", ["x"], "acc", m=16, n=16, out="int32")
    other = _spec("p", "pass", ["acc"], "y", m=32, n=8, src="int32")  # another 2-D view
    regions = {"g": {"a": 256, "b": 256, "out": 1024}, "p": {"src": 1024, "out": 256}}
    plan = plan_memory(CFG, [gemm, other], regions, {"acc": 1, "y": 2},
                       _shapes([gemm, other]))
    assert plan.placements["p"]["src"] != plan.placements["g"]["out"]


def test_too_big_names_the_largest_buffers_and_the_fix():
    small = VariantConfig(rows=4, cols=4, mem_addr_bits=10)  # 8 KiB
    steps = [_spec("k", "gemm", ["x"], "y")]
    with pytest.raises(CompileError, match=r"k\.b \(9,000 B\).*--mem-addr-bits 11"):
        plan_memory(small, steps, {"k": {"a": 64, "b": 9000, "out": 64}}, {"y": 1},
                    _shapes(steps))


def test_a_pool_gathered_on_the_host_is_not_read_in_place_as_pixel_rows():
    """A max pool of host-gathered planes stores its NCHW output's elements in rows of
    ``cols``; a depthwise window kernel reads pixel rows (``N*H*W x C``). With ``C = cols``
    both operands are ``72 x 8`` int8 tiles, but they order the tensor's elements two ways:
    the window kernel is given its own operand, not the pool's buffer. A window-unit pool
    stores pixel rows, and the depthwise kernel reads those in place."""
    from fusion.kernels.eltmax.kind import MaxParams
    from fusion.kernels.window.params import WindowParams

    cfg = VariantConfig(rows=8, cols=8, window_unit=True)
    dw = KernelSpec(name="dw", kind=kind("window"), nodes=("dw",), inputs=("p",), output="y",
                    params=WindowParams(N=2, H=6, W=6, C=8, kh=3, kw=3))
    shapes = {"p": (2, 8, 6, 6), "y": (2, 16, 8)}
    for form, pool, in_place in (
            ("max", MaxParams(M=72, N=8, n_inputs=4), False),
            ("window", WindowParams(N=2, H=12, W=12, C=8, kh=2, kw=2, stride=2, mode="max",
                                    fill=-128), True)):
        spec = KernelSpec(name="pool", kind=kind(form), params=pool, nodes=("pool",),
                          inputs=("x",), output="p")
        regions = {"pool": spec.regions(cfg), "dw": dw.regions(cfg)}
        plan = plan_memory(cfg, [spec, dw], regions, {"x": 0, "p": 1, "y": 2}, shapes)
        assert ("x" in plan.in_place("dw")) is in_place, spec.kind.name
        assert (plan.placements["dw"]["x"] == plan.placements["pool"]["out"]) is in_place
