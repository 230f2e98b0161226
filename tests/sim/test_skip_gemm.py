"""Zero-skipping GEMMs (:mod:`fusion.kernels.gemm.skip`) on Verilator: conditional execution
on data. Each is bit-exact against the exact reference ``epilogue((a - za) @ b + bias)``
(computed here in int64, independently of the kernel), its cycles are the analytical model's
for the same tile flags, and the counters show what it skipped: ``tiles_skipped`` the BZTs
taken, ``array_busy`` only the slices of the tiles it ran. The store unit's tile flags
(MATMUL ``zf``) are checked against the stored tiles, and a second GEMM skips on the flags
the first one's hardware wrote."""

import numpy as np
import pytest

from fusion.kernels.gemm.kind import GEMM
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.skip import skipped_tiles, tile_flags
from fusion.kernels.gemm.sparse import block_rows
from fusion.kernels.layout import GemmDims
from fusion.kernels.program import compile_kernel
from hwgen.lanes import INT8_MAX, INT8_MIN
from hwgen.reference import EpilogueParams, epilogue, to_dtype
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow

EPILOGUE = EpilogueParams(mult=1 << 14, shift=20, zp=0)


def zero_tiled(variant, m, k, zp, share, rng, rows_from=None):
    """An ``m x k`` int8 A with about ``share`` of its tiles all ``zp`` (or, with
    ``rows_from``, every row from there on ``zp``: a padded batch)."""
    a = rng.integers(INT8_MIN, INT8_MAX + 1, (m, k), dtype=np.int8)
    a[a == zp] = zp + 1 if zp < INT8_MAX else zp - 1  # only the planted tiles are zero point
    if rows_from is not None:
        a[rows_from:] = zp
        return a
    r, br = variant.rows, block_rows(variant)
    for i in range(0, m, r):
        for j in range(0, k, br):
            if rng.random() < share:
                a[i:i + r, j:j + br] = zp
    return a


def exact(a, zp, b, stages, bias):
    """The exact result: the zero point subtracted in int64, then the epilogue stages."""
    acc = (a.astype(np.int64) - zp) @ b.astype(np.int64)
    return to_dtype(epilogue(acc.astype(np.int32), stages, EPILOGUE, bias=bias),
                    np.int8 if "requant" in stages else np.int32)


def folded(bias, zp, b):
    """The bias as the lowering gives every GEMM: A's zero-point share folded in."""
    return (bias.astype(np.int64) - zp * b.astype(np.int64).sum(axis=0)).astype(np.int32)


def run(variant, cases):
    """Compile and run each ``(a, zp, b, bias, stages, kmajor, out_flags)`` (``bias``
    without A's zero-point share: the kernel gets it :func:`folded`); returns the kernels,
    their flags and the results."""
    jobs, kernels = [], []
    for a, zp, b, bias, stages, kmajor, out_flags in cases:
        m, k = a.shape
        n = b.shape[1]
        dims = GemmDims(variant, m, k, n)
        flags = tile_flags(dims, a, zp)
        p = GemmParams(M=m, K=k, N=n, stages=stages, epilogue=EPILOGUE, skip_zp=zp,
                       flags=tuple(map(tuple, flags)), skip=True, out_flags=out_flags,
                       kmajor_out=kmajor)
        kernel = compile_kernel(GEMM, variant, p)
        reads = dict(kernel.reads)
        if out_flags:
            region = kernel.regions["out_flags"]
            reads["out_flags"] = (region.addr, region.nbytes)
        writes = kernel.write({"a": a, "b": b, "bias": folded(bias, zp, b)})
        jobs.append(Job(kernel.program, MemoryImage(writes=tuple(writes), reads=reads),
                        name=f"{m}x{k}x{n} zp={zp}"))
        kernels.append((kernel, flags))
    return kernels, run_programs(variant, jobs)


def test_zero_skipping_gemms_are_exact_predicted_and_skip(variant):
    """Ragged shapes, zero points of both signs, several groups of row blocks, one row block,
    a padded batch, and dense data (nothing to skip)."""
    rng = np.random.default_rng(3)
    R, C = variant.rows, variant.cols
    shapes = [(16, 64, 32, -5, 0.5, None, ("bias", "requant", "relu")),
              (9, 40, 13, 100, 0.7, None, ("bias",)),
              (1, 96, 5 * C, -128, 0.5, None, ("bias", "requant", "relu", "clamp")),
              (4 * R, 64, 2 * C, 0, 0.0, R, ("bias", "requant", "relu")),
              (40, 128, 12, 7, 0.6, None, ("bias", "requant")),
              (8, 32, 8, 3, 0.0, None, ("bias", "requant"))]
    cases = []
    for m, k, n, zp, share, rows_from, stages in shapes:
        a = zero_tiled(variant, m, k, zp, share, rng, rows_from)
        b = rng.integers(INT8_MIN, INT8_MAX + 1, (k, n), dtype=np.int8)
        bias = rng.integers(-5000, 5000, n).astype(np.int32)
        cases.append((a, zp, b, bias, stages, False, False))
    kernels, results = run(variant, cases)
    for (a, zp, b, bias, stages, *_), (kernel, flags), result in zip(cases, kernels, results,
                                                                    strict=True):
        name = f"{a.shape} zp={zp}"
        np.testing.assert_array_equal(kernel.decode(result.outputs),
                                      exact(a, zp, b, stages, bias), err_msg=name)
        assert GEMM.features(variant, kernel.signature).analytical_cycles() == result.cycles, \
            name
        dims = kernel.dims
        assert result.counters["tiles_skipped"] == skipped_tiles(dims, flags), name
        br = block_rows(variant)
        ran = dims.Mb * dims.Nb * dims.Kp - dims.Nb * br * int(flags[:, :-1].sum())
        assert result.counters["array_busy"] == ran, name
    assert sum(r.counters["tiles_skipped"] for r in results) > 0


def test_the_store_unit_flags_tiles_and_a_second_gemm_skips_on_them(v4x4):
    """GEMM 1 (a padded batch: rows from 4 on are zero point; columns whose bias keeps the
    ReLU output at 0 there) stores its output K-major with tile flags; the flags equal the
    stored tiles' (every byte the output zero point), and GEMM 2 runs on GEMM 1's output and
    the flags its hardware wrote, exact and skipping them."""
    variant = v4x4
    rng = np.random.default_rng(5)
    stages = ("bias", "requant", "relu")
    m, k, n, n2 = 16, 64, 32, 16
    a = zero_tiled(variant, m, k, -3, 0.0, rng, rows_from=4)
    b = rng.integers(INT8_MIN, INT8_MAX + 1, (k, n), dtype=np.int8)
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    bias[8:24] = -(1 << 20)  # these columns are 0 after the ReLU wherever A is zero point
    kernels, results = run(variant, [(a, -3, b, bias, stages, True, True)])
    (k1, _), r1 = kernels[0], results[0]
    out1 = k1.decode(r1.outputs)
    np.testing.assert_array_equal(out1, exact(a, -3, b, stages, bias))
    # the hardware's flags: output tile (row block, column block) all zero point (0)
    hw_flags = np.frombuffer(bytes(r1.outputs["out_flags"]), np.uint64).reshape(m // 4, n // 4)
    want = (out1.reshape(m // 4, 4, n // 4, 4) == 0).all(axis=(1, 3))
    np.testing.assert_array_equal(hw_flags != 0, want)
    assert want.sum() >= 6  # rows 4.. of columns 8..23: 3 row blocks x 4 column blocks
    # GEMM 2 reads GEMM 1's output where the host puts it, with the flags its store wrote
    b2 = rng.integers(INT8_MIN, INT8_MAX + 1, (n, n2), dtype=np.int8)
    bias2 = rng.integers(-5000, 5000, n2).astype(np.int32)
    p2 = GemmParams(M=m, K=n, N=n2, stages=stages, epilogue=EPILOGUE, skip_zp=0,
                    flags=tuple(map(tuple, want)), skip=True)
    k2 = compile_kernel(GEMM, variant, p2)
    writes = [w for w in k2.write({"a": out1, "b": b2, "bias": bias2})
              if w[0] != k2.regions["a_flags"].addr]
    writes.append((k2.regions["a_flags"].addr, bytes(r1.outputs["out_flags"])))
    (r2,) = run_programs(variant, [Job(k2.program, MemoryImage(writes=tuple(writes),
                                                               reads=k2.reads))])
    np.testing.assert_array_equal(k2.decode(r2.outputs), exact(out1, 0, b2, stages, bias2))
    assert r2.counters["tiles_skipped"] == skipped_tiles(k2.dims, want) > 0
    assert GEMM.features(variant, k2.signature).analytical_cycles() == r2.cycles
