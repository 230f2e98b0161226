"""GEMM programs through the kernel cache: the cached program and layout are those of
``build_gemm``, operands are packed per run, and the key covers what the program depends
on. No Verilator."""

import json

import numpy as np
import pytest

from fusion.kernels.cache import KernelCache
from fusion.kernels.gemm.build import build_gemm
from fusion.kernels.program import compiled_gemm, gemm_key_parts
from fusion.kernels.tiling import Tiling
from hwgen.config import EPILOGUE_STAGES
from hwgen.presets import SMALL
from hwgen.reference import EpilogueParams

CFG = SMALL
PARAMS = EpilogueParams(mult=1 << 22, shift=30, zp=-5, clamp_lo=-60, clamp_hi=90)


def operands(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.integers(-128, 128, (m, k), dtype=np.int8),
            "b": rng.integers(-128, 128, (k, n), dtype=np.int8),
            "bias": rng.integers(-5000, 5000, n).astype(np.int32),
            "residual": rng.integers(-128, 128, (m, n), dtype=np.int8)}


@pytest.mark.parametrize("stages, fused, tiling", [
    ((), True, None),
    (("bias", "requant", "relu"), True, Tiling(tm=2, tn=2, order="nm", double_buffer=False)),
    (("bias", "requant", "relu"), False, None),
    (EPILOGUE_STAGES, False, Tiling(kt=8, double_buffer=False)),
    (("requant", "clamp", "residual"), True, None),
])
def test_cached_program_and_memory_equal_build_gemm(tmp_path, stages, fused, tiling):
    m, k, n = 13, 20, 27
    ops = operands(m, k, n)
    used = {name: ops[name] if name in ("a", "b") or name in stages else None for name in ops}
    direct = build_gemm(CFG, m, k, n, stages=stages, fused=fused, tiling=tiling, params=PARAMS,
                        **used)
    cache = KernelCache(tmp_path)
    for _ in range(2):  # a miss, then a memory hit
        got = compiled_gemm(CFG, m, k, n, stages=stages, fused=fused, tiling=tiling,
                            params=PARAMS, cache=cache)
        assert got.program == direct.program and got.source == direct.source
        assert got.tiling == direct.tiling and got.reads == direct.reads
        assert (got.bytes_loaded, got.bytes_stored) == (direct.bytes_loaded, direct.bytes_stored)
        assert got.memory(used["a"], used["b"], bias=used["bias"],
                          residual=used["residual"]) == direct.memory
        np.testing.assert_array_equal(
            got.expected(used["a"], used["b"], bias=used["bias"], residual=used["residual"]),
            direct.expected)
    assert (cache.stats.misses, cache.stats.memory_hits) == (1, 1)
    # a fresh process (instance) on the same folder: from disk, same program
    again = compiled_gemm(CFG, m, k, n, stages=stages, fused=fused, tiling=tiling,
                          params=PARAMS, cache=KernelCache(tmp_path))
    assert again.program == direct.program


def test_decode_reads_the_output_layout(tmp_path):
    got = compiled_gemm(CFG, 5, 8, 9, stages=("bias", "requant"), params=PARAMS,
                        cache=KernelCache(tmp_path))
    direct = build_gemm(CFG, 5, 8, 9, stages=("bias", "requant"), params=PARAMS,
                        **{k: v for k, v in operands(5, 8, 9).items() if k != "residual"})
    from fusion.kernels import layout
    blob = layout.pack_tiles(direct.dims, direct.expected, np.int8)
    np.testing.assert_array_equal(got.decode({"out": blob}), direct.expected)


def test_key_covers_what_the_program_depends_on():
    base = gemm_key_parts(CFG, 8, 8, 8, stages=("requant",), params=PARAMS)
    variants = [
        gemm_key_parts(CFG.__class__(**{**CFG.to_dict(), "epilogue": EPILOGUE_STAGES,
                                        "port_latency": 5}), 8, 8, 8,
                       stages=("requant",), params=PARAMS),
        gemm_key_parts(CFG, 8, 8, 9, stages=("requant",), params=PARAMS),
        gemm_key_parts(CFG, 8, 8, 8, stages=("requant", "relu"), params=PARAMS),
        gemm_key_parts(CFG, 8, 8, 8, stages=("requant",), fused=False, params=PARAMS),
        gemm_key_parts(CFG, 8, 8, 8, stages=("requant",), params=EpilogueParams(mult=3)),
        gemm_key_parts(CFG, 8, 8, 8, stages=("requant",), params=PARAMS, tiling=Tiling()),
    ]
    texts = {json.dumps(p, sort_keys=True) for p in [base, *variants]}
    assert len(texts) == 1 + len(variants)
    assert base["dtypes"] == {"a": "int8", "b": "int8", "out": "int8"}


def test_quantization_changes_the_program(tmp_path):
    cache = KernelCache(tmp_path)
    one = compiled_gemm(CFG, 8, 8, 8, stages=("requant",), params=PARAMS, cache=cache)
    two = compiled_gemm(CFG, 8, 8, 8, stages=("requant",), params=EpilogueParams(mult=3),
                        cache=cache)
    assert one.program != two.program and cache.stats.misses == 2


def test_dispatch_checks_operands_against_the_metadata(tmp_path):
    got = compiled_gemm(CFG, 6, 8, 10, stages=("bias",), cache=KernelCache(tmp_path))
    ops = operands(6, 8, 10)
    with pytest.raises(ValueError, match=r"operand a has shape \(6, 9\), the kernel was "
                                         r"compiled for \(6, 8\)"):
        got.memory(np.zeros((6, 9), np.int8), ops["b"], bias=ops["bias"])
    with pytest.raises(ValueError, match=r"needs a bias operand of shape \(10,\)"):
        got.memory(ops["a"], ops["b"])


def test_problems_that_do_not_fit_are_not_cached(tmp_path):
    cache = KernelCache(tmp_path)
    with pytest.raises(ValueError, match="does not fit"):
        compiled_gemm(CFG, 64, 64, 64, tiling=Tiling(tm=16, tn=16, double_buffer=False),
                      cache=cache)
    assert cache.stats.writes == 0 and len(cache) == 0
