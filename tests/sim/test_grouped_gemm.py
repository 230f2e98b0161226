"""Grouped GEMMs (block-diagonal B, ``kgroup``) on Verilator, bit for bit against the numpy
reference of the full ``a @ b``, with the analytical model's prediction equal to the measured
cycles; and DS-CNN end to end, its depthwise layers grouped, against the exact reference's
bundled output."""

import json

import numpy as np
import pytest

from examples.real_check import REAL
from fusion.kernels.tiling import Tiling
from sim.gemm_check import GemmCase, grouped_problem, run_gemms

pytestmark = pytest.mark.slow

FUSED = ("bias", "requant", "relu")


def cases(config):
    """Depthwise 3x3 shapes (K = 9 x channels, N = channels) on ``config``: ragged M, N not a
    multiple of the columns, K chunks, both loop orders, single and double buffering, the
    fused epilogue with per-tensor requantize; and groups of several column blocks."""
    c = config.cols
    shapes = [  # (M, channels, stages, tiling)
        (125, 4 * c, (), None),
        (33, 3 * c, FUSED, Tiling(order="mn")),
        (33, 3 * c, FUSED, Tiling(order="nm", double_buffer=False)),
        (17, 2 * c + 1, FUSED, None),                                   # last block partial
        (17, 5 * c, FUSED, Tiling(kt=config.k_align, order="mn")),      # k chunks
        (17, 5 * c, (), Tiling(kt=2 * config.k_align, order="nm", double_buffer=False)),
        (40, 2 * c + 1, ("bias", "requant"), Tiling(tm=2, order="mn")),
    ]
    out = []
    for i, (m, ch, stages, tiling) in enumerate(shapes):
        k, n = 9 * ch, ch
        kgroup = c * k // n
        problem = grouped_problem(config, m, k, n, kgroup, stages, seed=40 + i)
        out.append(GemmCase(m, k, n, stages=stages, tiling=tiling, problem=problem,
                            kgroup=kgroup))
    # ShuffleNet's grouped 1x1s: 3 groups of 2 column blocks each (kblocks), K = 3 x 12; a
    # super tile of one column block, or of a group's two (both read the group's A slice)
    for i, (m, stages, tn) in enumerate(((21, FUSED, 1), (8, (), 1), (21, FUSED, 2),
                                         (13, (), 2))):
        k, n, kblocks = 36, 6 * c, 2
        problem = grouped_problem(config, m, k, n, 12, stages, seed=60 + i, kblocks=kblocks)
        out.append(GemmCase(m, k, n, stages=stages, problem=problem, kgroup=12,
                            kblocks=kblocks, tiling=Tiling(tn=tn)))
    return out


def test_grouped_gemm_is_bit_exact_and_predicted_exactly(variant):
    grouped = cases(variant)
    # the same operands dense, for the cycles the grouping saves
    dense = [GemmCase(c.M, c.K, c.N, stages=c.stages, problem=c.problem) for c in grouped[:2]]
    reports = run_gemms(variant, grouped + dense)
    for case, r in zip(grouped + dense, reports, strict=True):
        assert r.ok, r.summary()
        kernel = case.kernel(variant)
        predicted = kernel.kind.features(variant, kernel.signature).analytical_cycles()
        assert predicted == r.cycles, f"{r.summary()}: predicted {predicted}"
    for g, d in zip(reports, reports[len(grouped):], strict=False):
        np.testing.assert_array_equal(g.got, d.got)
        assert g.cycles < d.cycles


def test_grouped_per_channel_requantize_is_bit_exact(v4x4):
    """Per-channel multipliers and shifts (as a quantized depthwise conv has them)."""
    from fusion.kernels.gemm.kind import compiled_gemm
    from hwgen.reference import EpilogueParams
    from sim.run import Job, MemoryImage, run_programs

    c, m, ch = v4x4.cols, 21, 10
    k, n, kgroup = 9 * ch, ch, 9 * v4x4.cols
    rng = np.random.default_rng(7)
    problem = grouped_problem(v4x4, m, k, n, kgroup, FUSED, seed=7)
    mult = rng.integers(1 << 29, 1 << 30, n).astype(np.int32)
    shift = rng.integers(36, 42, n).astype(np.int32)
    params = EpilogueParams(per_channel=True, zp=3)
    kernel = compiled_gemm(v4x4, m, k, n, stages=FUSED, params=params, kgroup=kgroup)
    ops = {"a": problem.a, "b": problem.b, "bias": problem.bias, "mult": mult, "shift": shift}
    (result,) = run_programs(v4x4, [Job(program=kernel.program, memory=MemoryImage(
        writes=tuple(kernel.memory(**ops)), reads=kernel.reads), name="grouped per-channel")])
    got = kernel.decode(bytes(result.outputs["out"]))
    want = kernel.expected(**ops)
    assert c * 3 > n and len(np.unique(want)) > 10  # three column blocks, spread outputs
    np.testing.assert_array_equal(got, want)
    predicted = kernel.kind.features(v4x4, kernel.signature).analytical_cycles()
    assert predicted == result.counters["cycles"]


def test_ds_cnn_runs_its_depthwise_layers_grouped_and_matches_the_reference(tmp_path, capsys):
    """``hwgen run`` (shadow-checked kernel by kernel) of DS-CNN on the 8x8 all-stage variant:
    each depthwise layer a grouped GEMM, the output within the bound of the bundled one."""
    from examples import real_check
    from hwgen.cli import main

    x, y, variant = tmp_path / "x.npy", tmp_path / "y.npy", tmp_path / "v"
    assert real_check.main(["input", "ds_cnn_qdq", str(x)]) == 0
    assert main(["generate", "--rows", "8", "--cols", "8", "--epilogue",
                 "bias,requant,relu,clamp,residual", "--mem-addr-bits", "24",
                 "-o", str(variant)]) == 0
    capsys.readouterr()
    assert main(["run", str(REAL / "ds_cnn_qdq.onnx"), "--variant", str(variant),
                 "--input", f"x={x}", "--output", f"y={y}", "--json",
                 "--cache", str(tmp_path / "cache")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    dw = [k for k in report["kernels"] if "_dw/" in k["name"]]
    assert len(dw) == 4 and all("grouped kgroup=72" in k["describe"] for k in dw)
    # 72 k steps a tile instead of 576, for 16 x 8 tiles (80,654 cycles each dense)
    assert all(k["cycles"] == k["predicted_cycles"] < 12_000 for k in dw)
    assert real_check.main(["output", "ds_cnn_qdq", str(y)]) == 0
