"""Streamed GEMMs (tiling ``stream``), checked structurally: every hazard duty of the program
(the counted WAITs), every output row's operands, what is refused and why, and that the cost
model prices them where they pay (weight-bound GEMVs)."""

import re

import pytest

from fusion.cost.analytical import estimate
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.gemm.kind import GEMM, compiled_gemm
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.layout import GemmDims
from fusion.kernels.tiling import Tiling, resolve, stream_problems
from hwgen.asm import assemble, disassemble
from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.presets import SIM_VARIANTS, SMALL
from hwgen.reference import EpilogueParams
from tests.fusion.kernels.gemm.test_build import PARAMS, assert_sound
from tests.helpers.kernel_trace import HazardError, trace

V8 = VariantConfig(rows=8, cols=8, epilogue=EPILOGUE_STAGES)
STAGES = [(), ("bias",), ("requant",), ("bias", "requant", "relu"),
          ("bias", "requant", "relu", "clamp"), ("bias", "requant", "residual"),
          ("requant", "relu", "residual")]


@pytest.mark.parametrize("cfg", [SMALL, SIM_VARIANTS["2x2"], SIM_VARIANTS["4x8"], V8],
                         ids=lambda c: f"{c.rows}x{c.cols}")
@pytest.mark.parametrize("stages", STAGES, ids=lambda s: ",".join(s) or "none")
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("q, nb", [(2, 1), (2, 5), (4, 2), (4, 3), (8, 7)])
def test_streamed_kernels_are_hazard_free_and_compute_every_tile(cfg, stages, fused, q, nb):
    m, k, n = cfg.rows - 1 or 1, q * cfg.k_align * 2, nb * cfg.cols - 1
    kernel = compiled_gemm(cfg, m, k, n, stages=stages, fused=fused, params=PARAMS,
                           tiling=Tiling(stream=q))
    assert kernel.tiling.stream == q
    assert_sound(kernel)


def _counted(kernel):
    """(index, units, left) of each counted WAIT in the program."""
    out = []
    for n, line in enumerate(disassemble(kernel.program).splitlines()):
        if (hit := re.fullmatch(r"\s*wait units=(\d+), left=([1-9]\d*)", line)):
            out.append((n, int(hit[1]), int(hit[2])))
    return out


@pytest.mark.parametrize("q", [3, 4, 8])
def test_each_counted_wait_is_needed_and_no_looser_one_would_do(q):
    """Leaving one more load (or job) pending at any counted WAIT is a hazard the checker
    catches: a matmul reading a slot still loading, or a load into a slot a matmul reads."""
    kernel = compiled_gemm(V8, 1, q * 24, 40, stages=("bias", "requant"), params=PARAMS,
                           tiling=Tiling(stream=q))
    trace(V8, kernel.program, kernel.regions)  # as built: sound
    text = disassemble(kernel.program).splitlines()
    waits = _counted(kernel)
    assert {u for _, u, _ in waits} == {1, 2}
    for n, units, left in waits:
        looser = text[:n] + [f"wait units={units}, left={left + 1}"] + text[n + 1:]
        with pytest.raises(HazardError, match="while a load into rows|while a queued job"):
            trace(V8, assemble("\n".join(looser)), kernel.regions)


@pytest.mark.parametrize("kwargs, match", [
    ({"M": 9, "K": 64, "N": 16}, "one row block of A resident, and M=9 is 2 row blocks"),
    ({"M": 1, "K": 42, "N": 16}, "does not cut Kp=42 into 4 equal chunks"),
    ({"M": 1, "K": 64, "N": 16, "kgroup": 32}, "grouped GEMM"),
])
def test_what_cannot_stream_is_refused_with_the_reason(kwargs, match):
    p = GemmParams(**kwargs)
    dims = GemmDims(V8, p.M, p.K, p.N, kgroup=p.kgroup)
    assert any(match in problem for problem in stream_problems(dims, p.stages, 4))
    with pytest.raises(ValueError, match=match):
        resolve(dims, p.stages, Tiling(stream=4))


def test_a_residual_tile_loads_once_a_column_block_into_rows_after_the_bias():
    """Each column block's residual tile is loaded once, after a wait for the epilogue (the
    tile before read the rows), into the rows after the bias groups, and only the block's last
    chunk reads it; the hazard checker passes the program, and fails it without that wait."""
    pc = EpilogueParams(per_channel=True)
    kernel = compiled_gemm(V8, 1, 4 * 24, 5 * 8, stages=("bias", "requant", "residual"),
                           params=pc, tiling=Tiling(stream=4))
    trace(V8, kernel.program, kernel.regions)
    text = disassemble(kernel.program).splitlines()
    loads = [n for n, line in enumerate(text) if "load dst=e8" in line]
    matmuls = [line for line in text if line.strip().startswith("matmul")]
    assert len(loads) == 2  # the loop body's block and the peeled last one
    assert all(text[n - 1].split(",")[0].strip() == "wait units=4" for n in loads)
    reading = [line for line in matmuls if "res=r10" in line]
    assert reading and all("last=1" in line for line in reading)
    assert all("res=r0" in line for line in matmuls if "last=0" in line)
    rows = kernel.dims.bias_region_rows(True)
    assert f"li rd=r10, imm={rows}" in [line.strip() for line in text]
    unsafe = [line for n, line in enumerate(text) if n + 1 not in loads]
    with pytest.raises(HazardError):
        trace(V8, assemble("\n".join(unsafe)), kernel.regions)


def test_more_chunks_in_flight_than_a_wait_counts_are_refused():
    dims = GemmDims(V8, 1, 32 * 8, 8)
    assert any("a counted WAIT counts at most 15" in p for p in stream_problems(dims, (), 32))


@pytest.mark.parametrize("bad", [1, -2, True, 2.0])
def test_a_stream_of_one_chunk_or_not_a_count_is_refused(bad):
    with pytest.raises(ValueError, match="stream must be 0"):
        Tiling(stream=bad)


def test_a_streamed_tiling_resolves_to_its_normal_form():
    dims = GemmDims(V8, 3, 64, 20)
    assert resolve(dims, (), Tiling(tm=4, tn=3, kt=8, order="nm", stream=2)) == Tiling(
        tm=1, tn=1, kt=64, order="mn", double_buffer=False, stream=2)


def test_the_cost_model_streams_weight_bound_gemvs_and_tiles_the_rest():
    """A GEMV is bound by its weights: a streamed tiling is priced, and wins; with several row
    blocks none is offered."""
    pc = EpilogueParams(per_channel=True)
    gemv = GemmParams(M=1, K=128, N=128, stages=("bias", "requant"), epilogue=pc)
    priced = {v.tiling: estimate(GEMM.features(V8, v)).cycles
              for v in GEMM.variants(V8, gemv)}
    streamed = {t: c for t, c in priced.items() if t.stream}
    tiled = {t: c for t, c in priced.items() if not t.stream}
    assert streamed and tiled
    assert min(streamed.values()) < min(tiled.values())
    batch = GemmParams(M=32, K=128, N=128, stages=("bias", "requant"), epilogue=pc)
    assert not any(v.tiling.stream for v in GEMM.variants(V8, batch))


def test_a_weight_bound_gemv_with_a_residual_streams():
    """A ResNet-50 res4 block's last 1x1 convolution at one row block, its residual add
    fused: a streamed tiling is priced, and wins (the add ran as a pass of its own)."""
    pc = EpilogueParams(per_channel=True)
    gemv = GemmParams(M=4, K=256, N=1024, stages=("bias", "requant", "residual"),
                      epilogue=pc)
    priced = {v.tiling: estimate(GEMM.features(V8, v)).cycles
              for v in GEMM.variants(V8, gemv)}
    assert min(priced, key=priced.get).stream


def test_features_round_trip_the_stream():
    f = GemmFeatures.for_gemm(V8, 1, 64, 24, tiling=Tiling(stream=4))
    assert GemmFeatures.from_dict(f.to_dict()) == f
    assert f.tiling.stream == 4
