"""The registry of kernel kinds, and what every kind answers the same way: one metadata
schema, regions before building, operands packed into exactly their regions, features the
analytical model prices with the kind's own walk."""

import numpy as np
import pytest

from fusion.cost.analytical import (
    AnalyticalModel,
    estimate,
    estimate_max,
    estimate_pass,
    estimate_program,
)
from fusion.kernels.cache import KernelCache
from fusion.kernels.concat.kind import ConcatParams
from fusion.kernels.conv.params import ConvParams
from fusion.kernels.eltmax.kind import MaxParams
from fusion.kernels.epipass.kind import PassParams
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.kinds import KINDS, features_from_dict, kind
from fusion.kernels.program import Kernel, compile_kernel
from fusion.kernels.protocol import KernelKind
from fusion.kernels.window.params import WindowParams
from hwgen.config import VariantConfig
from hwgen.isa import decode
from hwgen.presets import ALL_STAGES, SMALL
from hwgen.reference import EpilogueParams

QUANT = EpilogueParams(mult=1 << 22, shift=14, zp=-5, clamp_lo=-60, clamp_hi=90)
#: One params object per kind.
PARAMS = {
    "gemm": GemmParams(M=13, K=20, N=27, stages=("bias", "requant", "relu"), epilogue=QUANT),
    "pass": PassParams(M=13, N=27, stages=("bias", "requant", "residual"), epilogue=QUANT,
                       out_dtype="int8"),
    "max": MaxParams(M=13, N=27, n_inputs=3),
    "conv": ConvParams(N=1, H=6, W=8, Cin=5, Cout=27, kh=3, kw=3, pads=(1, 1, 1, 1), fill=-2,
                       stages=("bias", "requant", "residual"), epilogue=QUANT),
    "window": WindowParams(N=1, H=6, W=7, C=6, kh=3, kw=3, pads=(1, 1, 1, 1), fill=-2,
                           stages=("bias", "requant", "relu"), epilogue=QUANT),
    "concat": ConcatParams(M=13, widths=(8, 16, 5), mult=(1 << 30, 1518500250, 1 << 30),
                           shift=(30, 31, 30), x_zp=(3, -5, 3), zp=3),
}
#: The variant each kind is checked on: SMALL, or (the window convolution) one whose A row
#: is one memory word, or (the window unit) one that has it.
WINDOWS = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES)
CONFIG = {name: SMALL for name in PARAMS} | {
    "conv": WINDOWS, "window": VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES,
                                             window_unit=True)}


def values(operands, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, (dtype, shape) in operands.items():
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -5000), min(info.max, 5000)
        out[name] = rng.integers(lo, hi + 1, shape).astype(dtype)
    return out


def test_the_registry_has_one_entry_per_kind():
    assert set(KINDS) == {"gemm", "pass", "max", "conv", "window", "concat"} == set(PARAMS)
    for name, k in KINDS.items():
        assert isinstance(k, KernelKind) and k.name == name and kind(name) is k
        assert issubclass(k.kernel_type, Kernel)
        assert isinstance(PARAMS[name], k.params_type)
    with pytest.raises(ValueError, match=r"no kernel kind 'winograd'; the kinds are concat, "
                                         r"conv, gemm, max, pass, window$"):
        kind("winograd")


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_every_kind_has_one_metadata_schema_and_fills_its_regions(name, tmp_path):
    k, p, cfg = KINDS[name], PARAMS[name], CONFIG[name]
    assert k.legality(cfg, p) is None
    kernel = compile_kernel(k, cfg, p, cache=KernelCache(tmp_path))
    assert isinstance(kernel, k.kernel_type)
    meta = kernel.meta
    assert set(meta) == {"kind", "variant", "params", "dims", "stages", "quant", "operands",
                         "out", "regions", "reads", "placement", "chosen", "bytes_loaded",
                         "bytes_stored", "ideal_cycles", "program_words"}
    assert meta["kind"] == name and meta["params"] == k.key_params(p)
    assert list(kernel.regions) == list(k.regions(cfg, p))  # allocation order
    assert {n: r.nbytes for n, r in kernel.regions.items()} == k.regions(cfg, p)
    assert kernel.reads == {"out": (kernel.regions["out"].addr, kernel.regions["out"].nbytes)}
    m, _, n = meta["dims"]
    assert meta["out"] == [k.output(p).dtype, [m, n]]
    ops = values(k.operands(cfg, p))
    writes = kernel.write(ops)
    by_addr = {r.addr: r for r in kernel.regions.values()}
    for addr, blob in writes:  # every write fills one input or constant region exactly
        assert len(blob) == by_addr[addr].nbytes
        assert k.region_role(by_addr[addr].name) in ("input", "const")
    want = kernel.result_of(ops)
    assert want.shape == (m, n) and want.dtype == kernel.out_dtype
    assert len(kernel.program) == meta["program_words"] <= cfg.imem_depth


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_the_analytical_model_prices_every_kind_with_its_own_walk(name):
    k, p, cfg = KINDS[name], PARAMS[name], CONFIG[name]
    f = k.features(cfg, p)
    assert f.kind == name
    if name == "gemm":
        want = estimate(f).cycles
    elif name == "pass":
        want = estimate_pass(cfg, p.M, p.N, stages=p.stages, params=p.epilogue,
                             src_dtype=p.src_dtype, out_dtype=p.out_dtype)
    elif name == "max":
        want = estimate_max(cfg, p.M, p.N, p.n_inputs)
    else:  # run through the machine model instruction by instruction
        kernel = compile_kernel(k, cfg, p)
        want = estimate_program(cfg, [decode(w) for w in kernel.program])
    assert AnalyticalModel().predict(f) == float(want) == f.analytical_cycles()
    assert features_from_dict(f.to_dict()) == f


def test_features_rows_without_a_kind_are_gemm_rows():
    f = KINDS["gemm"].features(SMALL, PARAMS["gemm"])
    data = f.to_dict()
    del data["kind"]
    assert features_from_dict(data) == f


def test_a_kernel_can_run_another_program_with_the_same_metadata():
    kernel = compile_kernel(KINDS["max"], SMALL, PARAMS["max"])
    other = kernel.with_program(kernel.program[:-1], "cut")
    assert other.program == kernel.program[:-1] and other.source == "cut"
    assert other.meta == kernel.meta and type(other) is type(kernel)
