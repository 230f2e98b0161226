"""Block-sparse GEMMs (:mod:`fusion.kernels.gemm.sparse`) on Verilator: bit-exact against
the numpy reference of the same weights, zero blocks and all, with the analytical model's
cycles and the array's busy counter exactly, and faster than the dense program of the same
weights when most blocks are zero."""

import numpy as np
import pytest

from fusion.kernels.gemm.kind import GEMM
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.sparse import busy_slices, weight_blocks
from fusion.kernels.program import compile_kernel
from hwgen.reference import EpilogueParams, gemm_epilogue
from sim.run import Job, MemoryImage, run_programs
from tests.fusion.kernels.gemm.test_sparse import pruned

pytestmark = pytest.mark.slow

EPILOGUE = EpilogueParams(mult=1 << 14, shift=20, zp=3)


def test_sparse_gemms_are_bit_exact_predicted_exactly_and_faster(variant):
    """Ragged shapes, all-zero column blocks, several groups of A row blocks, one row block
    (a GEMV), fused stages and a K-major store; each beside the dense program of the same
    weights."""
    R, C = variant.rows, variant.cols
    cases = [(9, 40, 13, 0.6, ("bias", "requant", "relu"), False),
             (16, 64, 32, 0.75, ("bias", "requant"), R == C),
             (1, 96, 5 * C, 0.75, ("bias", "requant", "relu", "clamp"), False),
             (3, 24, 8, 0.5, (), False),
             (40, 256, 12, 0.8, ("requant",), False)]
    rng = np.random.default_rng(7)
    jobs, checks = [], []
    for i, (m, k, n, fraction, stages, kmajor) in enumerate(cases):
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = pruned(variant, k, n, fraction, seed=i)
        bias = rng.integers(-5000, 5000, n).astype(np.int32)
        values = {"a": a, "b": b, **({"bias": bias} if "bias" in stages else {})}
        want = gemm_epilogue(a, b, stages, EPILOGUE, **({"bias": bias} if "bias" in stages
                                                        else {}))
        for sparse in (False, True):
            p = GemmParams(M=m, K=k, N=n, stages=stages, epilogue=EPILOGUE,
                           blocks=weight_blocks(variant, b), sparse=sparse,
                           kmajor_out=kmajor and sparse)
            kernel = compile_kernel(GEMM, variant, p)
            jobs.append(Job(kernel.program, MemoryImage(writes=tuple(kernel.write(values)),
                                                        reads=kernel.reads),
                            name=f"{m}x{k}x{n} {'sparse' if sparse else 'dense'}"))
            checks.append((kernel, want, sparse))
    results = run_programs(variant, jobs)
    cycles = {}
    for (kernel, want, sparse), result, job in zip(checks, results, jobs, strict=True):
        np.testing.assert_array_equal(kernel.decode(result.outputs), want, err_msg=job.name)
        features = GEMM.features(variant, kernel.signature)
        assert features.analytical_cycles() == result.cycles, job.name
        if sparse:
            assert result.counters["array_busy"] == busy_slices(kernel.dims,
                                                                 kernel.sparse_blocks)
        cycles.setdefault(job.name.rsplit(" ", 1)[0], {})[sparse] = result.cycles
    for name, pair in cycles.items():
        assert pair[True] < pair[False], (name, pair)
