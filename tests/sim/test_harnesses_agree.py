"""The C++ driver (what :mod:`sim.run` launches on the ideal memory) and the cocotb testbench
run the real accelerator alike: the same jobs give the same bytes and the same counters on
both builds of one variant. Neither is the other's reference for correctness (the GEMMs are
checked against numpy here); this checks that the driver replaced the testbench exactly."""

import numpy as np
import pytest

from sim import build as sim_build
from sim.gemm_check import GemmCase
from sim.run import Job, MemoryImage, SimTimeout, run_programs

pytestmark = pytest.mark.slow


def _jobs(config):
    jobs = []
    for i, (m, k, n, stages) in enumerate([(33, 64, 17, ()), (9, 20, 11, ("bias", "requant")),
                                           (16, 32, 16, ("bias", "requant", "relu"))]):
        case = GemmCase(m, k, n, stages=stages, seed=40 + i)
        kernel = case.kernel(config)
        jobs.append((Job(program=kernel.program, name=f"gemm{i}",
                         memory=MemoryImage(writes=tuple(case.memory(kernel)),
                                            reads=kernel.reads)),
                     kernel, case.expected(kernel)))
    return jobs


def test_the_driver_and_cocotb_give_the_same_bytes_and_counters(v4x4):
    jobs = _jobs(v4x4)
    runs = {}
    for harness in ("cxx", "cocotb"):
        build = sim_build.build_variant(v4x4, harness=harness)
        assert build.harness == harness
        runs[harness] = run_programs(v4x4, [job for job, _, _ in jobs], build=build)
    for (_, kernel, want), cxx, cocotb in zip(jobs, runs["cxx"], runs["cocotb"], strict=True):
        np.testing.assert_array_equal(kernel.decode(bytes(cxx.outputs["out"])), want)
        assert cxx.outputs.keys() == cocotb.outputs.keys()
        for name in cxx.outputs:
            np.testing.assert_array_equal(cxx.outputs[name], cocotb.outputs[name])
        assert cxx.counters == cocotb.counters and cxx.cycles > 0


def test_a_timeout_reads_the_same_counters_on_both(v4x4):
    job, _, _ = _jobs(v4x4)[0]
    short = Job(program=job.program, memory=job.memory, name="short", timeout_cycles=300)
    seen = {}
    for harness in ("cxx", "cocotb"):
        build = sim_build.build_variant(v4x4, harness=harness)
        with pytest.raises(SimTimeout, match="'short'") as info:
            run_programs(v4x4, [short], build=build)
        seen[harness] = info.value.results[0].counters
    assert seen["cxx"] == seen["cocotb"] and 300 <= seen["cxx"]["cycles"] <= 304
