"""Standalone epilogue passes, checked structurally (no hardware model): regions, metadata,
operand checks, the cache, and every output row's provenance through ``kernel_trace``."""

import numpy as np
import pytest

from fusion.kernels.cache import KernelCache
from fusion.kernels.epipass.kind import PassKernel, compiled_pass, pass_key_parts, pass_regions
from hwgen.config import EPILOGUE_STAGES
from hwgen.presets import SMALL, WIDE
from hwgen.reference import EpilogueParams, epilogue, to_dtype
from tests.helpers.kernel_trace import Label, check_loops, trace

ALL = EPILOGUE_STAGES
PARAMS = EpilogueParams(mult=1 << 22, shift=14, zp=-5, clamp_lo=-60, clamp_hi=90)


def values(m, n, src_dtype="int32", seed=0):
    rng = np.random.default_rng(seed)
    lim = 1 << 20 if src_dtype == "int32" else 128
    return {"src": rng.integers(-lim, lim, (m, n)), "bias": rng.integers(-5000, 5000, n),
            "residual": rng.integers(-128, 128, (m, n)),
            "mult": rng.integers(1 << 20, 1 << 24, n), "shift": rng.integers(10, 24, n)}


def out_rows(kernel, itemsize):
    """Byte address of each output row, by (tile row i, tile column j, row r)."""
    d, out = kernel.dims, kernel.regions["out"]
    for i in range(d.Mb):
        for j in range(d.Nb):
            for r in range(d.R):
                yield i, j, r, out.addr * d.W + ((i * d.Nb + j) * d.R + r) * d.C * itemsize


def final_stores(kernel):
    check_loops(kernel.program)
    t = trace(kernel.config, kernel.program, kernel.regions)
    out = kernel.regions["out"]
    lo, hi = out.addr * kernel.dims.W, out.addr * kernel.dims.W + out.nbytes
    stores = [s for s in t.stores if lo <= s.addr < hi]
    by_addr = {s.addr: s for s in stores}
    assert len(by_addr) == len(stores), "an output row is written twice"
    return t, by_addr


def check_pass(kernel: PassKernel):
    """Every output row is one epipass with the stages' mask, of the right src, bias and
    residual rows; the trace's byte count is the kernel's."""
    t, stores = final_stores(kernel)
    d, cfg = kernel.dims, kernel.config
    src_e = "e8" if kernel.src_dtype == np.int8 else "e32"
    group = 3 if kernel.params.per_channel else 1
    mask = sum(cfg.stage_bit(s) for s in kernel.stages)
    assert len(stores) == d.Mb * d.Nb * d.R
    for i, j, r, addr in out_rows(kernel, kernel.out_dtype.itemsize):
        s, row = stores[addr], (i * d.Nb + j) * d.R + r
        assert (s.kind, s.mask, s.dt) == ("epipass", mask, "i8" if kernel.out_dtype == np.int8
                                          else "i32")
        assert s.src == Label("src", row * d.C * kernel.src_dtype.itemsize, src_e)
        assert s.src.producer is None
        if "bias" in kernel.stages:
            assert s.bias == Label("bias", j * group * cfg.e_row_bytes, "e32")
        if "residual" in kernel.stages:
            assert s.res == Label("residual", row * d.C, "e8")
    assert t.bytes_loaded == kernel.bytes_loaded
    return t


SINGLE = [(s,) for s in ALL]


@pytest.mark.parametrize("cfg", [SMALL, WIDE], ids=["4x8", "8x2w16"])
@pytest.mark.parametrize("stages", SINGLE + [(), ("bias", "requant", "relu"), ALL],
                         ids=lambda s: ",".join(s) or "copy")
@pytest.mark.parametrize("src_dtype", ["int32", "int8"])
def test_passes_are_hazard_free_and_read_the_right_rows(cfg, stages, src_dtype):
    for m, n in [(1, 1), (13, 27), (33, 17)]:
        out_dtype = "int8" if {"requant", "residual"} & set(stages) else "int32"
        kernel = compiled_pass(cfg, m, n, stages=stages, params=PARAMS, src_dtype=src_dtype,
                               out_dtype=out_dtype)
        check_pass(kernel)
        sizes = pass_regions(cfg, m, n, stages=stages, params=PARAMS, src_dtype=src_dtype,
                             out_dtype=out_dtype)
        assert sizes == {name: r.nbytes for name, r in kernel.regions.items()}
        assert kernel.reads == {"out": (kernel.regions["out"].addr, sizes["out"])}
        assert kernel.bytes_stored == sizes["out"]
        assert kernel.ideal_cycles >= kernel.dims.Mb * kernel.dims.Nb * kernel.dims.R


def test_per_channel_pass_reads_the_bias_groups():
    params = EpilogueParams(per_channel=True, zp=3)
    for stages in [("requant",), ("bias", "requant", "relu")]:
        kernel = compiled_pass(SMALL, 13, 27, stages=stages, params=params, out_dtype="int8")
        check_pass(kernel)
        assert kernel.meta["operands"]["mult"] == ["int32", [27]]
        v = values(13, 27)
        writes = dict(kernel.memory(v["src"], bias=v["bias"], mult=v["mult"], shift=v["shift"]))
        assert len(writes[kernel.regions["bias"].addr]) == kernel.regions["bias"].nbytes
        want = to_dtype(epilogue(v["src"], stages, params, bias=v["bias"], mult=v["mult"],
                                 shift=v["shift"]), np.int8)
        np.testing.assert_array_equal(
            kernel.expected(v["src"], bias=v["bias"], mult=v["mult"], shift=v["shift"]), want)
    with pytest.raises(ValueError, match="per-channel requantize .* needs the requant stage"):
        pass_regions(SMALL, 4, 4, stages=("bias",), params=params)


def test_regions_and_metadata():
    stages = ("bias", "requant", "residual")
    sizes = pass_regions(SMALL, 13, 27, stages=stages, params=PARAMS, src_dtype="int32",
                         out_dtype=np.int8)
    tiles, tile = 4 * 4, 4 * 8
    assert list(sizes) == ["src", "bias", "residual", "out"]
    assert sizes == {"src": tiles * tile * 4, "bias": 4 * 32, "residual": tiles * tile,
                     "out": tiles * tile}
    kernel = compiled_pass(SMALL, 13, 27, stages=stages, params=PARAMS, out_dtype=np.int8)
    assert kernel.stages == stages and kernel.params == PARAMS
    assert (kernel.src_dtype, kernel.out_dtype) == (np.int32, np.int8)
    assert kernel.meta["operands"] == {"src": ["int32", [13, 27]], "bias": ["int32", [27]],
                                       "residual": ["int8", [13, 27]]}
    assert kernel.meta["out"] == ["int8", [13, 27]] and kernel.meta["dims"] == [13, 1, 27]
    assert kernel.meta["params"] == {"shape": [13, 27], "stages": list(stages),
                                     "quant": kernel.meta["quant"], "src_dtype": "int32",
                                     "out_dtype": "int8"}
    assert kernel.placement is None and kernel.meta["kind"] == "pass"
    assert list(pass_regions(SMALL, 5, 5, stages=("relu",))) == ["src", "out"]


def test_memory_expected_and_decode():
    stages = ("bias", "requant", "relu", "residual")
    kernel = compiled_pass(WIDE, 13, 27, stages=stages, params=PARAMS, src_dtype="int8",
                           out_dtype="int8")
    v = values(13, 27, "int8")
    writes = kernel.memory(v["src"], bias=v["bias"], residual=v["residual"])
    regions = kernel.regions
    assert [a for a, _ in writes] == [regions[n].addr for n in ("src", "bias", "residual")]
    assert [len(b) for _, b in writes] == [regions[n].nbytes for n in ("src", "bias",
                                                                       "residual")]
    want = to_dtype(epilogue(v["src"], stages, PARAMS, bias=v["bias"], residual=v["residual"]),
                    np.int8)
    got = kernel.expected(v["src"], bias=v["bias"], residual=v["residual"])
    np.testing.assert_array_equal(got, want)
    # decode reads the tile-blocked layout the residual was packed in
    res_bytes = dict(writes)[regions["residual"].addr]
    np.testing.assert_array_equal(kernel.decode({"out": res_bytes}), v["residual"])
    # operands no stage uses are ignored
    assert kernel.memory(v["src"], bias=v["bias"], residual=v["residual"],
                         mult=v["mult"]) == writes


@pytest.mark.parametrize("call, match", [
    (lambda k, v: k.memory(v["src"][:, :-1], bias=v["bias"], residual=v["residual"]),
     r"operand src has shape \(13, 26\), the pass 13x27 int32->int8 stages=bias,residual "
     r"was compiled for \(13, 27\)"),
    (lambda k, v: k.memory(v["src"], residual=v["residual"]),
     r"needs a bias operand: int32 of shape \(27,\)"),
    (lambda k, v: k.memory(v["src"], bias=v["bias"], residual=v["residual"] * 2),
     r"operand residual has values outside int8"),
    (lambda k, v: k.memory(v["src"] * 1e3, bias=v["bias"], residual=v["residual"]),
     r"operand src must be an integer array"),
    (lambda k, v: k.expected(v["src"], bias=v["bias"][:3], residual=v["residual"]),
     r"operand bias has shape \(3,\)"),
])
def test_operands_are_checked_against_the_metadata(call, match):
    kernel = compiled_pass(SMALL, 13, 27, stages=("bias", "residual"), out_dtype="int8")
    with pytest.raises(ValueError, match=match):
        call(kernel, values(13, 27))


@pytest.mark.parametrize("kwargs, match", [
    ({"stages": ("relu", "bias")}, r"not an ordered subset"),
    ({"stages": ("relu",), "src_dtype": "int16"}, r"src_dtype must be int8 or int32"),
    ({"stages": ("relu",), "out_dtype": "float32"}, r"out_dtype must be int8 or int32"),
    ({"stages": ("relu",), "placement": {"src": 0}}, r"regions \(src, out\): missing out"),
    ({"stages": ("relu",), "placement": {"src": 0, "out": 100}},
     r"'src' .* and 'out' .* overlap"),
])
def test_pass_errors_name_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compiled_pass(SMALL, 33, 65, **kwargs)


def test_a_placed_pass_uses_its_placement():
    stages = ("requant", "residual")
    sizes = pass_regions(SMALL, 13, 27, stages=stages, params=PARAMS, out_dtype="int8")
    placement = {"out": 10, "residual": 200, "src": 300}
    kernel = compiled_pass(SMALL, 13, 27, stages=stages, params=PARAMS, out_dtype="int8",
                           placement=placement)
    assert {n: r.addr for n, r in kernel.regions.items()} == placement
    assert {n: r.nbytes for n, r in kernel.regions.items()} == sizes
    assert kernel.placement == placement and kernel.reads["out"] == (10, sizes["out"])
    check_pass(kernel)


def test_passes_are_cached_by_signature(tmp_path):
    cache = KernelCache(tmp_path)
    kw = {"stages": ("bias", "requant"), "params": PARAMS, "out_dtype": "int8", "cache": cache}
    first = compiled_pass(SMALL, 13, 27, **kw)
    again = compiled_pass(SMALL, 13, 27, **kw)
    assert again.program == first.program
    assert (cache.stats.misses, cache.stats.memory_hits) == (1, 1)
    # what the program depends on is in the key
    compiled_pass(SMALL, 13, 27, **{**kw, "src_dtype": "int8"})
    compiled_pass(SMALL, 13, 27, **{**kw, "params": EpilogueParams(mult=3)})
    compiled_pass(SMALL, 13, 27, **kw, placement={"src": 1000, "bias": 0, "out": 500})
    assert cache.stats.misses == 4
    # from disk in a fresh cache instance
    fresh = KernelCache(tmp_path)
    assert compiled_pass(SMALL, 13, 27, **{**kw, "cache": fresh}).program == first.program
    assert fresh.stats.disk_hits == 1
    parts = pass_key_parts(SMALL, 13, 27, stages=("bias", "requant"), params=PARAMS,
                           out_dtype="int8")
    assert parts["op"] == "pass" and parts["params"]["shape"] == [13, 27]
    assert parts["placement"] is None


def test_a_scaled_add_pass_from_int32_is_refused_and_from_int8_compiles():
    params = EpilogueParams(residual_op="scaled", res_x_mult=3, res_r_mult=2, res_shift=1)
    with pytest.raises(ValueError, match="requantize to int8 before it"):
        compiled_pass(SMALL, 4, 4, stages=("residual",), params=params, src_dtype="int32",
                      out_dtype="int8")
    compiled_pass(SMALL, 4, 4, stages=("residual",), params=params, src_dtype="int8",
                  out_dtype="int8")
