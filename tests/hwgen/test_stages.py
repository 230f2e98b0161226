"""The stage specs agree with each other and with everything derived from them."""

import dataclasses

import numpy as np
import pytest

from hwgen import reference as ref
from hwgen.config import EPILOGUE_STAGES
from hwgen.isa import Csr
from hwgen.lanes import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN
from hwgen.stages import (
    BIAS_GROUP_ROWS,
    OPERANDS,
    SPECS,
    STAGES,
    epilogue_latency,
    spec,
)


def test_the_specs_are_the_config_stages_in_order():
    assert tuple(s.name for s in STAGES) == EPILOGUE_STAGES


def test_the_isa_numbers_the_specs_registers():
    regs = {r.name: r.csr for s in STAGES for r in s.regs}
    assert {c.name.lower(): int(c) for c in Csr} == regs
    assert len(set(regs.values())) == len(regs)


def test_int8_output_agrees_with_the_output_range():
    for s in STAGES:
        lo, hi = s.output_range(INT32_MIN, INT32_MAX, s.params() if s.params else None)
        assert s.int8_out == (INT8_MIN <= lo and hi <= INT8_MAX), s.name


def test_every_parameter_is_an_epilogue_params_field_with_its_default():
    params = ref.EpilogueParams()
    for s in STAGES:
        for f in dataclasses.fields(s.params) if s.params else ():
            assert getattr(params, f.name) == f.default, (s.name, f.name)
        assert params.stage(s.name) == (s.params() if s.params else None)


def test_epilogue_params_round_trips_through_asdict_and_replace():
    params = ref.EpilogueParams(mult=7, shift=3, zp=-2, clamp_lo=-9, clamp_hi=9,
                                per_channel=True, residual_op="max")
    assert ref.EpilogueParams(**dataclasses.asdict(params)) == params
    other = dataclasses.replace(params, zp=5, residual_op="add")
    assert (other.zp, other.residual_op, other.mult, other.clamp_lo) == (5, "add", 7, -9)
    assert hash(other) != hash(params)


def test_epilogue_params_names_an_unknown_parameter():
    with pytest.raises(TypeError, match="no parameter 'scale'; the parameters are mult, "):
        ref.EpilogueParams(scale=1.0)
    with pytest.raises(AttributeError, match="no attribute 'scale'"):
        ref.EpilogueParams().scale  # noqa: B018


def test_the_bias_group_holds_every_read_at_the_bias_row():
    offsets = sorted(r.offset for s in STAGES for r in s.reads if r.base == "bias")
    assert offsets == list(range(BIAS_GROUP_ROWS))
    assert set(OPERANDS) == {"bias", "mult", "shift", "residual"}


def test_the_epilogue_depth_is_the_sum_of_the_stages_latencies():
    assert epilogue_latency(EPILOGUE_STAGES) == sum(s.latency for s in STAGES)
    assert epilogue_latency(("relu", "clamp")) == 2
    # a stage that reads the scratchpad spends its first cycle on the read
    assert all(s.latency >= 2 for s in STAGES if s.reads)


def test_csr_writes_follow_the_parameters():
    per_tensor = ref.EpilogueParams(mult=5, shift=2, zp=-1)
    assert SPECS["requant"].csr_writes(per_tensor.stage("requant")) == [
        ("req_mult", 5), ("req_shift", 2), ("req_zp", -1), ("req_mode", 0)]
    per_channel = ref.EpilogueParams(zp=-1, per_channel=True)
    assert SPECS["requant"].csr_writes(per_channel.stage("requant")) == [
        ("req_zp", -1), ("req_mode", 1)]
    assert [r.name for r in SPECS["requant"].reads_used(per_channel.stage("requant"))] == [
        "pc_mult", "pc_shift"]
    assert SPECS["requant"].reads_used(per_tensor.stage("requant")) == ()
    assert SPECS["residual"].csr_writes(ref.EpilogueParams(residual_op="max").residual) == [
        ("res_mode", 1)]


def test_the_reference_applies_each_spec():
    x = np.array([[-300, -5, 0, 7, 400]])
    params = ref.EpilogueParams(mult=3, shift=1, zp=2, clamp_lo=-4, clamp_hi=5)
    for s in STAGES:
        operands = {"bias": np.arange(5), "residual": np.full((1, 5), -3)}
        got = ref.apply_stage(x, s.name, params, **operands)
        want = s.reference(x, params.stage(s.name), {**dict.fromkeys(OPERANDS), **operands})
        np.testing.assert_array_equal(got, want)


def test_an_unknown_stage_or_operand_is_named():
    with pytest.raises(ValueError, match="unknown epilogue stage 'gelu'; the known stages are"):
        spec("gelu")
    with pytest.raises(TypeError, match="unknown epilogue operand\\(s\\) scale"):
        ref.epilogue(np.zeros((1, 1), int), ("relu",), ref.EpilogueParams(), scale=1)
