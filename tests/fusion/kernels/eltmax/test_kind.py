"""The element-wise max kernel, checked structurally (no hardware model): regions, inputs,
the cache, refusals, and every output row's provenance through ``kernel_trace``."""

import numpy as np
import pytest

from fusion.kernels.cache import KernelCache
from fusion.kernels.eltmax.kind import MaxKernel, compiled_max, max_regions
from hwgen.config import VariantConfig
from hwgen.presets import SMALL, WIDE
from tests.fusion.kernels.epipass.test_kind import final_stores, out_rows
from tests.helpers.kernel_trace import Label

NO_RESIDUAL = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant", "relu"))


def check_max(kernel: MaxKernel):
    """Every output row is the last of a chain of residual-only epipasses: in0 with in1, the
    result with in2, ... in order."""
    t, stores = final_stores(kernel)
    d, cfg, n = kernel.dims, kernel.config, kernel.n_inputs
    for i, j, r, addr in out_rows(kernel, 1):
        s, off = stores[addr], ((i * d.Nb + j) * d.R + r) * d.C
        for k in range(n - 1, 0, -1):
            assert (s.kind, s.mask, s.dt) == ("epipass", cfg.stage_bit("residual"), "i8")
            assert s.res == Label(f"in{k}", off, "e8"), (k, s.res)
            assert s.src.offset == off and s.src.dst == "e8"
            if k > 1:
                assert s.src.region in ("tmp0", "tmp1") and s.src.producer is not None
                s = s.src.producer
        assert s.src == Label("in0", off, "e8") and s.src.producer is None
    assert t.csrs["res_mode"] == 1
    assert t.bytes_loaded == kernel.bytes_loaded
    return t


@pytest.mark.parametrize("n_inputs, tmps", [(2, []), (3, ["tmp0"]), (4, ["tmp0", "tmp1"]),
                                            (9, ["tmp0", "tmp1"])])
@pytest.mark.parametrize("cfg", [SMALL, WIDE], ids=["4x8", "8x2w16"])
def test_max_chains_residual_passes(cfg, n_inputs, tmps):
    for m, n in [(1, 1), (13, 27)]:
        kernel = compiled_max(cfg, m, n, n_inputs)
        sizes = max_regions(cfg, m, n, n_inputs)
        assert list(sizes) == [f"in{i}" for i in range(n_inputs)] + tmps + ["out"]
        assert sizes == {name: r.nbytes for name, r in kernel.regions.items()}
        check_max(kernel)
        assert kernel.source.count("halt") == 1 and kernel.n_inputs == n_inputs
        assert kernel.bytes_stored == (n_inputs - 1) * sizes["out"]


def test_max_memory_expected_and_errors(tmp_path):
    cache = KernelCache(tmp_path)
    kernel = compiled_max(SMALL, 13, 27, 3, cache=cache)
    assert compiled_max(SMALL, 13, 27, 3, cache=cache).program == kernel.program
    assert (cache.stats.misses, cache.stats.hits) == (1, 1)
    rng = np.random.default_rng(1)
    xs = [rng.integers(-128, 128, (13, 27)) for _ in range(3)]
    writes = kernel.memory(xs)
    assert [a for a, _ in writes] == [kernel.regions[f"in{i}"].addr for i in range(3)]
    np.testing.assert_array_equal(kernel.expected(xs), np.maximum.reduce(xs))
    assert kernel.expected(xs).dtype == np.int8
    # the inputs by region name, as a model compiler holds them
    named = {f"in{i}": x for i, x in enumerate(xs)}
    assert kernel.memory(**named) == writes
    np.testing.assert_array_equal(kernel.expected(**named), np.maximum.reduce(xs))
    with pytest.raises(ValueError, match="needs a in2 operand"):
        kernel.memory(in0=xs[0], in1=xs[1])
    with pytest.raises(ValueError, match="inputs in0..in2, not in3"):
        kernel.memory(**named, in3=xs[0])
    with pytest.raises(ValueError, match="not both"):
        kernel.memory(xs, in0=xs[0])
    with pytest.raises(ValueError, match="compiled for 3 inputs, got 2"):
        kernel.memory(xs[:2])
    with pytest.raises(ValueError, match=r"operand in1 has shape \(13, 26\)"):
        kernel.memory([xs[0], xs[1][:, 1:], xs[2]])
    with pytest.raises(ValueError, match="operand in2 has values outside int8"):
        kernel.memory([xs[0], xs[1], xs[2] + 200])
    with pytest.raises(ValueError, match="a sequence of 3 arrays"):
        kernel.memory(np.stack(xs))


def test_max_refuses_a_variant_without_the_residual_stage():
    with pytest.raises(ValueError, match=r"residual stage .* lacks; use a variant generated "
                                         r"with the residual stage"):
        compiled_max(NO_RESIDUAL, 8, 8, 2)
    with pytest.raises(ValueError, match="residual stage"):
        max_regions(NO_RESIDUAL, 8, 8, 2)
    for bad in (1, 0, 2.0, True):
        with pytest.raises(ValueError, match="n_inputs >= 2"):
            compiled_max(SMALL, 8, 8, bad)


def test_a_placed_max_uses_its_placement(tmp_path):
    sizes = max_regions(SMALL, 13, 27, 4)
    words = sizes["out"] // SMALL.port_bytes
    placement = {name: 4000 - n * words for n, name in enumerate(sizes)}
    kernel = compiled_max(SMALL, 13, 27, 4, placement=placement)
    assert {n: r.addr for n, r in kernel.regions.items()} == placement
    check_max(kernel)
    with pytest.raises(ValueError, match="missing tmp1"):
        compiled_max(SMALL, 13, 27, 4, placement={k: v for k, v in placement.items()
                                                  if k != "tmp1"})
