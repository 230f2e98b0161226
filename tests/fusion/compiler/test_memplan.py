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


def _overlap(a, b):
    return a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes


def test_dead_buffers_are_reused_and_live_ones_never_overlap():
    # a chain of four GEMMs: t0 -> t1 -> t2 -> t3 -> t4; each A operand is packed by the host
    steps = [_spec(f"k{i}", "gemm", [f"t{i}"], f"t{i + 1}") for i in range(4)]
    regions = {s.name: {"a": 1024, "b": 4096, "out": 1024} for s in steps}
    last_use = {"t1": 1, "t2": 2, "t3": 3, "t4": 4}
    plan = plan_memory(CFG, steps, regions, last_use)
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
    plan = plan_memory(CFG, [gemm, bias], regions, {"acc": 1, "y": 2})
    assert plan.placements["p"]["src"] == plan.placements["g"]["out"]
    shared = next(b for b in plan.buffers if b.name == "g.out")
    assert shared.users == ["g.out", "p.src"] and shared.last == 1


def test_a_layout_change_is_not_read_in_place():
    gemm = _spec("g", "gemm", ["x"], "acc", m=16, n=16, out="int32")
    other = _spec("p", "pass", ["acc"], "y", m=32, n=8, src="int32")  # another 2-D view
    regions = {"g": {"a": 256, "b": 256, "out": 1024}, "p": {"src": 1024, "out": 256}}
    plan = plan_memory(CFG, [gemm, other], regions, {"acc": 1, "y": 2})
    assert plan.placements["p"]["src"] != plan.placements["g"]["out"]


def test_too_big_names_the_largest_buffers_and_the_fix():
    small = VariantConfig(rows=4, cols=4, mem_addr_bits=10)  # 8 KiB
    steps = [_spec("k", "gemm", ["x"], "y")]
    with pytest.raises(CompileError, match=r"k\.b \(9,000 B\).*--mem-addr-bits 11"):
        plan_memory(small, steps, {"k": {"a": 64, "b": 9000, "out": 64}}, {"y": 1})
