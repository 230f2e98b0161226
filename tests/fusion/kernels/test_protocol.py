"""The kernel-kind protocol: refusals are records made where the decision is made, and a
refused kernel is never built or cached."""

import dataclasses

import pytest

from fusion.kernels.cache import KernelCache
from fusion.kernels.eltmax.kind import MAX, MaxParams
from fusion.kernels.gemm.kind import GEMM, gemm_params
from fusion.kernels.program import compile_kernel, regions_of
from fusion.kernels.protocol import KernelRefused, Refusal, stage_refusal
from fusion.kernels.tiling import Tiling
from hwgen.config import VariantConfig
from hwgen.presets import SMALL

NO_RELU = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant"))
REVERSED = VariantConfig(rows=4, cols=4, epilogue=("requant", "bias"))


def test_a_refusal_is_a_frozen_record_with_its_details():
    r = Refusal("gemm", "stage_missing", "no relu here", stage="relu", chain=("bias",))
    assert (r.kind, r.reason, r.text, str(r)) == ("gemm", "stage_missing", "no relu here",
                                                  "no relu here")
    assert r.detail("stage") == "relu" and r.details == (("chain", ("bias",)),
                                                        ("stage", "relu"))
    assert r == Refusal("gemm", "stage_missing", "no relu here", chain=("bias",), stage="relu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.reason = "other"
    with pytest.raises(KeyError):
        r.detail("tiling")


def test_stage_refusals_name_the_stage_and_the_chain():
    missing = stage_refusal("pass", ("bias", "relu"), NO_RELU.epilogue)
    assert (missing.reason, missing.detail("stage"), missing.detail("chain")) == (
        "stage_missing", "relu", ("bias", "requant"))
    assert "epilogue stage 'relu' is not in the chain (bias, requant)" in missing.text
    order = stage_refusal("pass", ("bias", "requant"), REVERSED.epilogue)
    assert (order.reason, order.detail("stage")) == ("stage_order", "requant")
    assert stage_refusal("pass", ("requant", "bias"), REVERSED.epilogue) is None
    assert stage_refusal("pass", (), ()) is None


def test_the_legality_check_returns_the_record_where_it_decides():
    relu = GEMM.legality(NO_RELU, gemm_params(8, 8, 8, stages=("bias", "relu")))
    assert (relu.kind, relu.reason, relu.detail("stage")) == ("gemm", "stage_missing", "relu")
    big = Tiling(tm=16, tn=16, double_buffer=False)
    tiling = GEMM.legality(SMALL, gemm_params(64, 64, 64, tiling=big))
    assert tiling.reason == "tiling" and tiling.detail("tiling") == big
    assert "does not fit" in tiling.text
    tiny = VariantConfig(rows=8, cols=8, epilogue=("residual",), spad_e_depth=6)
    none = GEMM.legality(tiny, gemm_params(8, 8, 8, stages=("residual",)))
    assert none.reason == "no_tiling" and none.text.startswith("no tiling fits: tiling")
    no_residual = MAX.legality(NO_RELU, MaxParams(M=4, N=4, n_inputs=3))
    assert no_residual.reason == "no_residual_stage"
    assert GEMM.legality(NO_RELU, gemm_params(8, 8, 8, stages=("bias",))) is None


def test_a_refused_kernel_raises_with_its_record_and_is_never_cached(tmp_path):
    cache = KernelCache(tmp_path)
    params = gemm_params(8, 8, 8, stages=("relu",))
    with pytest.raises(KernelRefused, match="'relu' is not in the chain") as info:
        compile_kernel(GEMM, NO_RELU, params, cache=cache)
    assert info.value.refusal == GEMM.legality(NO_RELU, params)
    assert isinstance(info.value, ValueError)
    with pytest.raises(KernelRefused):
        regions_of(GEMM, NO_RELU, params)
    assert cache.stats.lookups == 0 and cache.stats.writes == 0


def test_malformed_params_are_errors_not_refusals():
    with pytest.raises(ValueError, match="M must be a positive integer, not 0"):
        gemm_params(0, 8, 8)
    with pytest.raises(ValueError, match="not the string 'bias'"):
        gemm_params(8, 8, 8, stages="bias")
    with pytest.raises(ValueError, match="n_inputs >= 2"):
        MaxParams(M=4, N=4, n_inputs=1)
