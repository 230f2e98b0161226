"""The cost-model features of a GEMM kernel: from a built kernel and from a plan, through JSON,
and what they refuse to describe."""

import json

import pytest

from fusion.cost import AnalyticalModel
from fusion.kernels.cache import KernelCache
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.gemm.kind import compiled_gemm
from fusion.kernels.tiling import Tiling
from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.reference import EpilogueParams

CFG = VariantConfig(rows=4, cols=8, epilogue=EPILOGUE_STAGES, spad_a_depth=64,
                    spad_b_depth=64, spad_e_depth=64, imem_depth=4096)
STAGES = ("bias", "requant", "clamp", "residual")
PARAMS = EpilogueParams(mult=1 << 22, shift=30, zp=-5, clamp_lo=-60, clamp_hi=90)


def built(fused=False, tiling=None, cache=None):
    return compiled_gemm(CFG, 9, 20, 11, stages=STAGES, fused=fused, tiling=tiling,
                         params=PARAMS, cache=cache)


def test_features_of_a_built_kernel_and_of_a_plan_agree():
    kernel = built(fused=False, tiling=Tiling(tm=1, tn=2, double_buffer=False))
    f = GemmFeatures.from_kernel(kernel)
    planned = GemmFeatures.for_gemm(CFG, 9, 20, 11, stages=STAGES, fused=False,
                                      tiling=Tiling(tm=1, tn=2, double_buffer=False), params=PARAMS)
    assert f.tiling == planned.tiling == kernel.tiling
    assert f.pass_dtypes == planned.pass_dtypes == ("i32", "i8", "i8", "i8")
    assert f.program_words == len(kernel.program) and planned.program_words is None
    assert (f.bytes_loaded, f.bytes_stored) == (kernel.bytes_loaded, kernel.bytes_stored)
    assert AnalyticalModel().predict(f) == AnalyticalModel().predict(planned)


def test_features_of_a_cached_kernel_equal_those_of_the_built_one(tmp_path):
    kernel = built(fused=True)
    built(fused=True, cache=KernelCache(tmp_path))
    cached = built(fused=True, cache=KernelCache(tmp_path))  # from disk
    assert GemmFeatures.from_kernel(cached) == GemmFeatures.from_kernel(kernel)


def test_features_round_trip_through_json():
    f = GemmFeatures.from_kernel(built(fused=False))
    assert GemmFeatures.from_dict(json.loads(json.dumps(f.to_dict()))) == f


def test_features_refuse_what_they_cannot_describe():
    with pytest.raises(ValueError, match="resolved tiling"):
        GemmFeatures(config=CFG, M=4, K=4, N=4, tiling=Tiling())
    with pytest.raises(ValueError, match=r"has 1 pass dtype\(s\), not \[\]"):
        GemmFeatures(config=CFG, M=4, K=4, N=4, stages=("bias",), fused=False,
                       tiling=Tiling(kt=8))
    data = GemmFeatures.for_gemm(CFG, 4, 4, 4).to_dict()
    with pytest.raises(ValueError, match="features version 0"):
        GemmFeatures.from_dict({**data, "version": 0})
    with pytest.raises(ValueError, match="but their config hashes to"):
        GemmFeatures.from_dict({**data, "variant": "0" * 16})
