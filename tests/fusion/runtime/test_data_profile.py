"""Profiles of the data at kernel boundaries, each figure against an independent count."""

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.ir.graph import Node
from fusion.reference import executor
from fusion.runtime.data_profile import (
    HISTOGRAM_BINS,
    kernel_profiles,
    profile_table,
    profile_tensor,
    saturation,
    tile_shape,
)
from fusion.runtime.run import evaluate_nodes, random_inputs
from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.presets import SIM_VARIANTS

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
V4 = SIM_VARIANTS["4x4"]
V8 = VariantConfig(rows=8, cols=8, epilogue=EPILOGUE_STAGES)


def test_zeros_tiles_range_and_histogram_of_a_tensor():
    """A 6 x 10 int8 tensor of zero point 3 in 4 x 4 tiles: 2 x 3 tiles, the edge ones
    partial; the tile of rows 0..3, columns 4..7, the one below the first and the partial
    corner are all 3."""
    x = np.full((6, 10), 3, np.int8)
    x[0, 0], x[5, 5], x[1, 9] = -128, 127, 0
    p = profile_tensor("x", x, zero_point=3, dtype="int8", tile=(4, 4))
    assert p.zero_share == (60 - 3) / 60
    assert (p.tiles, p.zero_tiles) == (6, 3 / 6)  # tiles (0, 1), (1, 0) and (1, 2)
    assert (p.minimum, p.maximum) == (-128, 127)
    assert len(p.histogram) == HISTOGRAM_BINS and sum(p.histogram) == 60
    assert p.histogram[0] == 1 and p.histogram[-1] == 1  # -128 and 127, 16 codes a bin
    assert p.histogram[(0 + 128) // 16] == 58  # 0 and the 57 threes share bin 8


def test_a_pruned_weight_has_the_share_of_zero_blocks_it_was_pruned_to():
    """A 64 x 48 weight with 36 of its 48 8x8 blocks pruned, on an 8x8 array: 0.75."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (64, 48)).astype(np.int8)
    w[w == 0] = 1
    blocks = [(i, j) for i in range(8) for j in range(6)]
    pruned = [blocks[k] for k in rng.permutation(len(blocks))[:36]]  # 75% of 48
    for i, j in pruned:
        w[8 * i:8 * i + 8, 8 * j:8 * j + 8] = 0
    p = profile_tensor("w", w, zero_point=0, dtype="int8", tile=tile_shape(V8, "weight"),
                       role="weight")
    assert p.zero_tiles == 0.75 and p.zero_share == 0.75


def test_an_nchw_tensor_is_tiled_as_pixels_by_channels():
    """8 channels of 4x4: 16 pixels by 8 channels, two 8x8 tiles; one pixel non-zero in
    every channel leaves the other tile all zero (as rows of [N*C*H, W] it would not)."""
    x = np.zeros((1, 8, 4, 4), np.int8)
    x[0, :, 3, 3] = 5
    p = profile_tensor("x", x, zero_point=0, dtype="int8", tile=(8, 8))
    assert (p.tiles, p.zero_tiles) == (2, 0.5)


def test_tiles_follow_the_array_and_the_role():
    assert tile_shape(SIM_VARIANTS["4x8"], "activation") == (4, 4)
    assert tile_shape(SIM_VARIANTS["4x8"], "weight") == (4, 8)
    with pytest.raises(ValueError, match="role"):
        tile_shape(V4, "bias")


@pytest.mark.parametrize("values, dtype", [(np.zeros(0, np.int8), "int8"),
                                           (np.array([0.5]), "int8"),
                                           (np.array([300]), "uint8")])
def test_what_is_not_an_integer_tensor_of_its_dtype_is_refused(values, dtype):
    with pytest.raises(ValueError):
        profile_tensor("t", values, zero_point=0, dtype=dtype, tile=(4, 4))


@pytest.mark.parametrize("out_dtype, zp", [("int8", -5), ("uint8", 130)])
def test_saturation_counts_the_values_the_clamp_moved(out_dtype, zp):
    """Against the quotient in exact fractions, rounded half to even, plus the zero point,
    outside the output dtype's range."""
    rng = np.random.default_rng(7)
    acc = rng.integers(-40_000, 40_000, (5, 3)).astype(np.int32)
    mult, shift = (1_500_000_000, 1_200_000_000, 1_900_000_000), (37, 38, 36)
    node = Node("r", "requant", ("acc",), ("y",),
                {"mult": mult, "shift": shift, "zp": zp, "out_dtype": out_dtype, "axis": 1,
                 "round_even": 1})
    lo, hi = (-128, 127) if out_dtype == "int8" else (0, 255)
    outside = 0
    for (_, c), v in np.ndenumerate(acc):
        q = Fraction(int(v) * mult[c], 2 ** shift[c])
        y = round(q) + zp  # Python's round is half to even on a Fraction
        outside += not lo <= y <= hi
    assert outside > 0
    assert saturation(node, acc) == outside / acc.size


def test_kernel_profiles_of_a_compiled_model_are_the_reference_values():
    """Every kernel of the residual MLP: the inputs, weights and output it reads and writes,
    weights as weights, and the output's saturation that of its requantize."""
    compiled = compile_model(load_model(EXAMPLES / "qdq_mlp_residual.onnx"), V4)
    graph = compiled.graph
    env = dict(graph.initializers)
    env.update(executor.coerce_inputs(graph, random_inputs(graph, 0)))
    found = {}
    for step in compiled.steps:
        if not hasattr(step, "spec"):
            executor.evaluate_node(graph, step.node, env, float64=True)
            continue
        spec = step.spec
        ref = {**{t: env[t] for t in spec.inputs}, **graph.initializers}
        evaluate_nodes(graph, [graph.node(n) for n in spec.nodes], ref)
        env[spec.output] = ref[spec.output]
        for p in kernel_profiles(graph, V4, spec, ref):
            found.setdefault(p.tensor, p)
            assert p.shape == env[p.tensor].shape
            t = graph.tensors[p.tensor]
            zp = int(t.quant.zero_point[0]) if not t.quant.per_channel else 0
            assert p.zero_share == float(np.mean(env[p.tensor] == zp))
            assert (p.minimum, p.maximum) == (int(env[p.tensor].min()),
                                              int(env[p.tensor].max()))
    weights = [p for p in found.values() if p.role == "weight"]
    assert len(weights) == 2 and all(p.tensor in graph.initializers for p in weights)
    assert all(p.tile == (4, 4) for p in found.values())
    outputs = [p for p in found.values() if p.saturated is not None]
    assert outputs and all(0 <= p.saturated <= 1 for p in outputs)
    rows = profile_table([p.to_dict() for p in found.values()])
    assert len(rows) == len(found) + 1 and rows[0][0] == "tensor"
