"""The GEMM kind through the kernel cache: a cached program is the one built without the
cache, it is built without operand values, operands are packed per run into its regions, and
the key covers what the program depends on. No Verilator."""

import json

import numpy as np
import pytest

from fusion.kernels import layout
from fusion.kernels.cache import KernelCache
from fusion.kernels.gemm.kind import compiled_gemm, gemm_key_parts
from fusion.kernels.tiling import Tiling
from hwgen.config import EPILOGUE_STAGES
from hwgen.presets import SMALL
from hwgen.reference import EpilogueParams, gemm_epilogue

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
def test_cached_program_and_memory_equal_the_uncached_ones(tmp_path, stages, fused, tiling):
    m, k, n = 13, 20, 27
    ops = operands(m, k, n)
    used = {name: ops[name] if name in ("a", "b") or name in stages else None for name in ops}
    direct = compiled_gemm(CFG, m, k, n, stages=stages, fused=fused, tiling=tiling,
                           params=PARAMS)
    dims = direct.dims
    packed = {"a": layout.pack_a(dims, ops["a"]), "b": layout.pack_b(dims, ops["b"]),
              "bias": layout.pack_bias(dims, ops["bias"]),
              "residual": layout.pack_tiles(dims, ops["residual"])}
    assert direct.memory(**used) == [(direct.regions[name].addr, packed[name])
                                     for name in direct.regions if name in packed
                                     and used[name] is not None]
    np.testing.assert_array_equal(direct.expected(**used), gemm_epilogue(
        ops["a"], ops["b"], stages, PARAMS, **{name: used[name] for name in
                                               ("bias", "residual") if name in stages}))
    cache = KernelCache(tmp_path)
    for _ in range(2):  # a miss, then a memory hit
        got = compiled_gemm(CFG, m, k, n, stages=stages, fused=fused, tiling=tiling,
                            params=PARAMS, cache=cache)
        assert got.program == direct.program and got.source == direct.source
        assert got.tiling == direct.tiling and got.reads == direct.reads
        assert (got.bytes_loaded, got.bytes_stored) == (direct.bytes_loaded, direct.bytes_stored)
        assert got.memory(used["a"], used["b"], bias=used["bias"],
                          residual=used["residual"]) == direct.memory(**used)
        np.testing.assert_array_equal(
            got.expected(used["a"], used["b"], bias=used["bias"], residual=used["residual"]),
            direct.expected(**used))
    assert (cache.stats.misses, cache.stats.memory_hits) == (1, 1)
    # a fresh process (instance) on the same folder: from disk, same program
    again = compiled_gemm(CFG, m, k, n, stages=stages, fused=fused, tiling=tiling,
                          params=PARAMS, cache=KernelCache(tmp_path))
    assert again.program == direct.program


def test_decode_reads_the_output_layout(tmp_path):
    got = compiled_gemm(CFG, 5, 8, 9, stages=("bias", "requant"), params=PARAMS,
                        cache=KernelCache(tmp_path))
    want = got.expected(**{k: v for k, v in operands(5, 8, 9).items() if k != "residual"})
    blob = layout.pack_tiles(got.dims, want, np.int8)
    np.testing.assert_array_equal(got.decode({"out": blob}), want)


def test_the_program_is_built_without_operand_values(monkeypatch):
    """The builder never sees operand values: packing and the reference are not called."""
    from fusion.kernels.gemm import kind

    def refuse(*args, **kwargs):
        raise AssertionError("the program build touched operand values")

    monkeypatch.setattr(kind.GEMM.__class__, "pack", refuse)
    monkeypatch.setattr(kind.GEMM.__class__, "reference", refuse)
    monkeypatch.setattr(layout, "pack_a", refuse)
    kernel = compiled_gemm(CFG, 13, 20, 27, stages=EPILOGUE_STAGES, fused=False, params=PARAMS)
    assert kernel.program and set(kernel.meta["operands"]) == {"a", "b", "bias", "residual"}


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
    assert base["op"] == "gemm" and base["params"]["shape"] == [8, 8, 8]


def test_quantization_changes_the_program(tmp_path):
    cache = KernelCache(tmp_path)
    one = compiled_gemm(CFG, 8, 8, 8, stages=("requant",), params=PARAMS, cache=cache)
    two = compiled_gemm(CFG, 8, 8, 8, stages=("requant",), params=EpilogueParams(mult=3),
                        cache=cache)
    assert one.program != two.program and cache.stats.misses == 2


def test_dispatch_checks_operands_against_the_metadata(tmp_path):
    got = compiled_gemm(CFG, 6, 8, 10, stages=("bias",), cache=KernelCache(tmp_path))
    ops = operands(6, 8, 10)
    with pytest.raises(ValueError, match=r"operand a has shape \(6, 9\), the gemm 6x8x10 "
                                         r"stages=bias was compiled for \(6, 8\)"):
        got.memory(np.zeros((6, 9), np.int8), ops["b"], bias=ops["bias"])
    with pytest.raises(ValueError, match=r"needs a bias operand: int32 of shape \(10,\)"):
        got.memory(ops["a"], ops["b"])
    with pytest.raises(ValueError, match=r"operand b has values outside int8"):
        got.memory(ops["a"], ops["b"].astype(np.int32) * 2, bias=ops["bias"])


def test_problems_that_do_not_fit_are_not_cached(tmp_path):
    cache = KernelCache(tmp_path)
    with pytest.raises(ValueError, match="does not fit"):
        compiled_gemm(CFG, 64, 64, 64, tiling=Tiling(tm=16, tn=16, double_buffer=False),
                      cache=cache)
    assert cache.stats.writes == 0 and len(cache) == 0
