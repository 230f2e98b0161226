"""The K-major output store (``kmajor_out``) without Verilator: its layout, the MATMULs that
ask for it, who may use it, and its cost features. The simulator runs it in
``tests/sim/test_kmajor_store.py``."""

import numpy as np
import pytest

from fusion.kernels import layout
from fusion.kernels.gemm.features import GemmFeatures
from fusion.kernels.gemm.kind import GEMM, compiled_gemm, gemm_params
from fusion.kernels.layout import GemmDims
from fusion.kernels.program import KernelRefused
from hwgen.isa import Op, decode
from hwgen.presets import SIM_VARIANTS

SQUARE, TALL = SIM_VARIANTS["4x4"], SIM_VARIANTS["4x8"]


def test_a_kmajor_output_is_the_next_gemms_a_layout():
    """Tile (i, j) stored column by column is A's [Mb][Kp][R] layout of the same matrix."""
    m, n = 10, 12
    x = np.random.default_rng(0).integers(-128, 128, (m, n), dtype=np.int8)
    out = GemmDims(SQUARE, m, 8, n)
    tiles = np.frombuffer(layout.pack_tiles(out, x), np.int8).reshape(out.Mb, out.Nb, 4, 4)
    stored = tiles.transpose(0, 1, 3, 2).tobytes()  # what the transposer writes, tile by tile
    np.testing.assert_array_equal(layout.unpack_kmajor(out, stored), x)
    nxt = GemmDims(SQUARE, m, n, 5)
    assert nxt.Kp == out.Nb * out.C
    assert layout.pack_a(nxt, x) == stored
    assert GEMM.region_layout(SQUARE, gemm_params(m, n, 5), "a") == GEMM.region_layout(
        SQUARE, gemm_params(m, 8, n, stages=("requant",), kmajor_out=True), "out")


def test_only_the_tile_ending_matmuls_store_transposed():
    k = compiled_gemm(SQUARE, 9, 16, 9, stages=("requant",), kmajor_out=True)
    matmuls = [decode(int(w)) for w in k.program if decode(int(w)).op == Op.MATMUL]
    assert matmuls and all(i.get("tr") == i.get("last") for i in matmuls)
    assert any(i.get("last") for i in matmuls)
    plain = compiled_gemm(SQUARE, 9, 16, 9, stages=("requant",))
    assert not any(decode(int(w)).get("tr") for w in plain.program
                   if decode(int(w)).op == Op.MATMUL)


@pytest.mark.parametrize("config, kwargs, words", [
    (TALL, {"stages": ("requant",)}, "square array"),
    (SQUARE, {"stages": ()}, "int32"),
    (SQUARE, {"stages": ("requant",), "fused": False}, "fused drain"),
])
def test_refused_where_the_hardware_cannot(config, kwargs, words):
    with pytest.raises(KernelRefused, match=words):
        compiled_gemm(config, 8, 8, 8, kmajor_out=True, **kwargs)


def test_features_carry_it_and_price_the_corner_turn():
    f = GemmFeatures.for_gemm(SQUARE, 64, 64, 64, stages=("requant",), kmajor_out=True)
    assert GemmFeatures.from_dict(f.to_dict()) == f
    plain = GemmFeatures.for_gemm(SQUARE, 64, 64, 64, stages=("requant",))
    assert 0 < f.analytical_cycles() - plain.analytical_cycles() <= SQUARE.rows + 1
