"""The engine: chains, legality vs profitability, covers, before/expected plans."""

import numpy as np
import pytest

from fusion.compiler.engine import decide_chain
from fusion.compiler.lower import CompileError, chains
from fusion.compiler.plan import compile_model
from fusion.cost.analytical import AnalyticalModel
from fusion.cost.host import HostCostModel
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.kernels.protocol import Refusal
from hwgen.config import VariantConfig

ALL = ("bias", "requant", "relu", "clamp", "residual")


def _layer(m=64, k=64, n=64, *, relu=True, clamp=False, x_dtype="int8", x_zp=0):
    rng = np.random.default_rng(0)
    b = GraphBuilder("layer")
    x = b.input("x", (m, k), x_dtype, quant=Quant(0.05, x_zp))
    w = b.const("w", rng.integers(-127, 128, (k, n)).astype(np.int8),
                quant=Quant(tuple([0.003] * n), (0,) * n, 1))
    acc = b.qmatmul(x, w, name="mm")
    acc = b.bias_add(acc, b.const("bvec", rng.integers(-999, 999, n).astype(np.int32)),
                     name="bias")
    y = b.requant(acc, Quant(0.1, 0), name="req")
    if relu:
        y = b.relu(y, name="relu")
    if clamp:
        y = b.clamp(y, -20, 90, name="clamp")
    return b.build(outputs=[y])


def _plan(graph, config, **kw):
    compiled_chains, _ = chains(graph)
    return [decide_chain(graph, config, AnalyticalModel(), c, **kw) for c in compiled_chains]


def _kernels(decisions):
    return [[n.rsplit("/", 1)[-1] for n in k.nodes] for d in decisions for k in d.kernels]


def test_full_chain_fuses_into_one_kernel():
    config = VariantConfig(rows=4, cols=4, epilogue=ALL)
    decisions = _plan(_layer(), config)
    assert _kernels(decisions) == [["mm", "bias", "req", "relu"]]
    assert decisions[0].kernels[0].params.stages == ("bias", "requant", "relu")


def test_no_fusion_runs_every_op_alone():
    config = VariantConfig(rows=4, cols=4, epilogue=ALL)
    decisions = _plan(_layer(), config, fusion=False)
    assert _kernels(decisions) == [["mm"], ["bias"], ["req"], ["relu"]]
    assert [k.kind.name for k in decisions[0].kernels] == ["gemm", "pass", "pass", "pass"]


def test_a_stage_the_variant_lacks_is_refused_with_the_reason():
    config = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant"))
    with pytest.raises(CompileError, match="relu"):
        _plan(_layer(), config)
    # without the relu every legal cover is weighed and the fused one wins
    decisions = _plan(_layer(relu=False), config)
    assert _kernels(decisions) == [["mm", "bias", "req"]]


def test_variant_chain_order_limits_what_fuses():
    # clamp before requant in the variant: the GEMM may fuse bias only; the rest are passes
    config = VariantConfig(rows=4, cols=4, epilogue=("bias", "requant", "relu"))
    decisions = _plan(_layer(relu=True), config)
    refused = [c for c in decisions[0].covers if c.status == "refused"]
    assert not refused  # every cover is legal on the full order
    assert _kernels(decisions) == [["mm", "bias", "req", "relu"]]


def test_min_gain_keeps_the_unfused_cover():
    config = VariantConfig(rows=4, cols=4, epilogue=ALL)
    decisions = _plan(_layer(), config, min_gain=0.99)
    assert _kernels(decisions) == [["mm"], ["bias"], ["req"], ["relu"]]
    assert "minimum gain" in decisions[0].note


def test_min_gain_never_moves_compute_to_the_host():
    """A GEMV's passes cost about what the host does: the unfused cover runs them on the
    host, and fusing saves under the minimum gain. Keeping that cover would move the bias and
    requantize to the host on a prediction too close to trust; the fused kernel stays."""
    config = VariantConfig(rows=4, cols=4, epilogue=ALL)
    host = HostCostModel(seconds_per_op=1e-6, seconds_per_element=0.0)
    decisions = _plan(_layer(m=1, relu=False), config, min_gain=0.5, host=host)
    unfused = next(c for c in decisions[0].covers if len(c.cuts) == 3)
    assert [o.on_host for o in unfused.options] == [False, True, True]
    assert 0 < unfused.cycles - decisions[0].chosen.cycles < 0.5 * unfused.cycles
    assert _kernels(decisions) == [["mm", "bias", "req"]]
    assert not decisions[0].note


def test_explain_prices_every_cover_and_says_why_losers_lost():
    from fusion.compiler.engine import explain_lines

    config = VariantConfig(rows=4, cols=4, epilogue=ALL)
    decisions = _plan(_layer(), config)
    covers = decisions[0].covers
    assert len(covers) == 8  # 2**(4-1) ways to cut a chain of four
    chosen = [c for c in covers if c.status == "chosen"]
    assert len(chosen) == 1
    assert all(c.cycles > chosen[0].cycles for c in covers if c.status == "lost")
    text = "\n".join(explain_lines(decisions))
    assert "chosen" in text and "lost: +" in text
    assert "weight layout row-major: refused" in text
    assert "tm=" in text  # the tiling candidates of the GEMM


def test_maxpool_without_residual_stage_is_refused():
    b = GraphBuilder("pool")
    x = b.input("x", (1, 4, 8, 8), "int8", quant=Quant(0.1, 0))
    y = b.maxpool(x, (2, 2), strides=(2, 2), name="pool")
    g = b.build(outputs=[y])
    with pytest.raises(CompileError, match="residual"):
        _plan(g, VariantConfig(rows=4, cols=4, epilogue=("bias", "requant")))


def test_input_zero_point_is_folded_into_the_bias():
    config = VariantConfig(rows=4, cols=4, epilogue=ALL)
    g = _layer(x_dtype="uint8", x_zp=0)  # lanes x - 128, zero point -128
    spec = _plan(g, config)[0].kernels[0]
    w = g.initializers["w"].astype(np.int64)
    expected = g.initializers["bvec"] + 128 * w.sum(axis=0)
    np.testing.assert_array_equal(spec.consts["bias"], expected)


def test_unsupported_node_is_refused_by_name():
    b = GraphBuilder("act_act")
    x = b.input("x", (4, 8), "int8", quant=Quant(0.1, 0))
    y = b.input("y", (8, 4), "int8", quant=Quant(0.1, 0))
    out = b.qmatmul(x, y, name="mm")
    g = b.build(outputs=[out])
    with pytest.raises(CompileError, match="'mm'.*not a constant"):
        compile_model(g, VariantConfig(rows=4, cols=4, epilogue=ALL), optimized=True)


def test_a_model_too_big_for_the_memory_is_refused_saying_what():
    from fusion.ir.synthetic import mlp

    small = VariantConfig(rows=4, cols=4, epilogue=ALL, mem_addr_bits=12)
    with pytest.raises(CompileError, match=r"bytes of external memory.*--mem-addr-bits"):
        compile_model(mlp(layers=2, width=256, batch=64), small, optimized=True)


def test_a_refused_candidate_holds_the_record_its_legality_check_made():
    # bias, relu, requant in that order: the GEMM cannot fuse requant then relu, and says so
    config = VariantConfig(rows=4, cols=4, epilogue=("bias", "relu", "requant"))
    decisions = _plan(_layer(), config)
    refused = [c for c in decisions[0].covers if c.status == "refused"]
    assert refused and decisions[0].chosen.cycles is not None
    records = [o.refused for c in refused for o in c.options if o.refused is not None]
    assert all(isinstance(r, Refusal) for r in records)
    first = records[0]
    assert (first.kind, first.reason, first.detail("stage")) == ("gemm", "stage_order", "relu")
    assert refused[0].refused.endswith(first.text)


def test_a_bug_while_pricing_raises_instead_of_refusing(monkeypatch):
    from fusion.kernels.gemm.kind import GemmKind

    def broken(self, config, params):
        raise ValueError("a bug in the features")

    monkeypatch.setattr(GemmKind, "features", broken)
    with pytest.raises(ValueError, match="a bug in the features"):
        _plan(_layer(), VariantConfig(rows=4, cols=4, epilogue=ALL))


def test_a_builder_bug_raises_instead_of_refusing(monkeypatch):
    from fusion.kernels.gemm.kind import GemmKind

    def broken(self, config, params, regions):
        raise ValueError("a bug in the builder")

    monkeypatch.setattr(GemmKind, "build", broken)
    with pytest.raises(ValueError, match="a bug in the builder") as info:
        compile_model(_layer(), VariantConfig(rows=4, cols=4, epilogue=ALL), optimized=True)
    assert not isinstance(info.value, CompileError)
