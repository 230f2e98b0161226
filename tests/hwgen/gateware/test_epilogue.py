"""The epilogue pipeline in amaranth.sim, against the numpy reference, with back-pressure."""

import dataclasses
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from hwgen import reference as ref
from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.gateware.epilogue import LANES, EpiloguePipeline, EpilogueStage, csr_signature
from hwgen.stages import SPECS, check_inputs, epilogue_latency

CHAIN = ("bias", "requant", "relu", "clamp", "residual")
PARAMS = ref.EpilogueParams(mult=1518500250, shift=40, zp=-7, clamp_lo=-60, clamp_hi=100)


def set_csrs(ctx, dut, params):
    """Every control register of the chain, as its spec computes it from ``params``."""
    for name in dut.csr.signature.members:
        for reg in SPECS[name].regs:
            ctx.set(getattr(getattr(dut.csr, name), reg.name), reg.value(params.stage(name)))


def run_pipeline(config, rows, mask, bias, res_rows, params):
    dut = EpiloguePipeline(config)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got = []

    async def bench(ctx):
        set_csrs(ctx, dut, params)
        reads = dut.e.signature.members  # the chain's scratchpad reads
        if "bias" in reads:
            ctx.set(dut.e.bias.data, [int(v) for v in bias])
        sent = 0
        cycle = 0
        while len(got) < len(rows) and cycle < 20 * len(rows) + 50:
            # the consumer is ready two cycles in three, so the stages see back-pressure
            ctx.set(dut.o.ready, cycle % 3 != 2)
            # and the producer pauses one cycle in four, so registers inside a stage empty
            # while the ones after them are held
            if sent < len(rows) and cycle % 4 != 1:
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"lanes": [int(v) for v in rows[sent]], "mask": mask,
                                        "dt": 0, "bias": 0, "res": sent, "out": 0,
                                        "first": 0})
            else:
                ctx.set(dut.i.valid, 0)
            # the residual rows as a block RAM: the row addressed with en, a cycle later
            res_row = (ctx.get(dut.e.res.en), ctx.get(dut.e.res.addr)) if "res" in reads \
                else (0, 0)
            took = ctx.get(dut.i.valid) and ctx.get(dut.i.ready)
            out = ctx.get(dut.o.valid) and ctx.get(dut.o.ready)
            if out:
                got.append([ctx.get(dut.o.payload.lanes[c]) for c in range(config.cols)])
            await ctx.tick()
            if res_row[0]:
                row = res_rows[res_row[1] % len(rows)]
                ctx.set(dut.e.res.data, [int(v) for v in row])
            sent += int(took)
            cycle += 1

    sim.add_testbench(bench)
    sim.run()
    return np.array(got, dtype=np.int64)


@pytest.mark.parametrize("stages", [(), ("bias",), ("requant",), ("relu",), ("clamp",),
                                    ("residual",), ("bias", "requant", "relu"), CHAIN])
def test_stages_on_and_off_match_the_reference(stages):
    config = VariantConfig(rows=2, cols=4, port_bytes=8, epilogue=CHAIN)
    rng = np.random.default_rng(len(stages))
    x = rng.integers(ref.INT32_MIN, ref.INT32_MAX, (12, 4), endpoint=True)
    x[0] = [ref.INT32_MAX, ref.INT32_MIN, 0, -1]  # the int32 extremes
    bias = np.array([ref.INT32_MAX, ref.INT32_MIN, 5, -5])
    res = rng.integers(-128, 127, (12, 4), endpoint=True)
    res[1] = [127, -128, 127, -128]
    mask = sum(config.stage_bit(s) for s in stages)
    got = run_pipeline(config, x, mask, bias, res, PARAMS)
    expected = ref.epilogue(x, stages, PARAMS, bias=bias, residual=res)
    np.testing.assert_array_equal(got, expected)


class CrossedBounds:
    """PARAMS with clamp bounds that EpilogueParams refuses but a program's CSRWI can
    write."""

    def __init__(self, lo: int, hi: int):
        self.bounds = SimpleNamespace(clamp_lo=lo, clamp_hi=hi)

    def stage(self, name: str):
        return self.bounds if name == "clamp" else PARAMS.stage(name)


@pytest.mark.parametrize(("lo", "hi"), [(-60, 100), (5, 5), (10, -10),
                                        (ref.INT32_MIN, ref.INT32_MAX)])
def test_clamp_is_min_of_max_for_any_bounds(lo, hi):
    """Bounds that cross (``lo > hi``: always ``hi``) and the int32 extremes, on values at
    and beside each bound."""
    config = VariantConfig(rows=2, cols=4, port_bytes=8, epilogue=CHAIN)
    edges = [lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, ref.INT32_MIN, ref.INT32_MAX]
    x = np.clip(np.array(edges * 4, np.int64), ref.INT32_MIN, ref.INT32_MAX).reshape(9, 4)
    params = CrossedBounds(lo, hi) if lo > hi else \
        dataclasses.replace(PARAMS, clamp_lo=lo, clamp_hi=hi)
    got = run_pipeline(config, x, config.stage_bit("clamp"), np.zeros(4, np.int64),
                       np.zeros((9, 4), np.int64), params)
    np.testing.assert_array_equal(got, [[min(max(int(v), lo), hi) for v in row] for row in x])


@pytest.mark.parametrize("stages", [("residual",), ("requant", "residual"), CHAIN])
def test_residual_max_mode_matches_the_reference(stages):
    config = VariantConfig(rows=2, cols=4, port_bytes=8, epilogue=CHAIN)
    rng = np.random.default_rng(100 + len(stages))
    params = ref.EpilogueParams(mult=PARAMS.mult, shift=PARAMS.shift, zp=PARAMS.zp,
                                clamp_lo=PARAMS.clamp_lo, clamp_hi=PARAMS.clamp_hi,
                                residual_op="max")
    x = rng.integers(-300, 300, (12, 4))  # int8 and beyond: the max saturates too
    x[0] = [ref.INT32_MAX, ref.INT32_MIN, 127, -128]
    res = rng.integers(-128, 127, (12, 4), endpoint=True)
    mask = sum(config.stage_bit(s) for s in stages)
    got = run_pipeline(config, x, mask, np.array([3, -3, 0, 1]), res, params)
    expected = ref.epilogue(x, stages, params, bias=np.array([3, -3, 0, 1]), residual=res)
    np.testing.assert_array_equal(got, expected)
    if stages == ("residual",):  # the data tells max from add
        add = ref.epilogue(x, stages, PARAMS, residual=res)
        assert (expected != add).mean() > 0.5


def _scaled_add(x, r, p):
    """The scaled add in exact rationals, rounding half to even (Python's ``round``)."""
    total = (int(x) - p.res_x_zp) * p.res_x_mult + (int(r) - p.res_r_zp) * p.res_r_mult
    y = round(Fraction(total, 2 ** p.res_shift)) + p.res_zp
    return min(max(y, p.res_lo), p.res_hi)


@pytest.mark.parametrize(("x_mult", "r_mult", "shift", "zps"), [
    (ref.INT32_MAX, ref.INT32_MAX, 0, (-100, 60)), (ref.INT32_MIN, ref.INT32_MIN, 33, (-100, 60)),
    (1 << 30, 1 << 29, 31, (-100, 60)), (1_999_999_999, -1_234_567_891, 32, (-100, 60)),
    (-7, 3, 2, (-100, 60)), (ref.INT32_MAX, ref.INT32_MAX, 40, (-256, 255)),
    (ref.INT32_MIN, ref.INT32_MAX, 41, (255, -256)),
    (ref.INT32_MAX, ref.INT32_MIN, 42, (-256, 255)),
    (ref.INT32_MAX, ref.INT32_MIN, 43, (-256, 255)), (ref.INT32_MAX, 1, 63, (-100, 60))])
def test_scaled_add_of_int8_inputs_is_exact_for_any_multipliers_and_shift(x_mult, r_mult, shift,
                                                                          zps):
    config = VariantConfig(rows=2, cols=4, port_bytes=8, epilogue=CHAIN)
    params = ref.EpilogueParams(residual_op="scaled", res_x_mult=x_mult, res_r_mult=r_mult,
                                res_shift=shift, res_x_zp=zps[0], res_r_zp=zps[1], res_zp=-3,
                                res_lo=-128, res_hi=127)
    rng = np.random.default_rng(shift)
    x = rng.integers(-128, 127, (12, 4), endpoint=True)
    res = rng.integers(-128, 127, (12, 4), endpoint=True)
    x[0], res[0] = [127, -128, 127, -128], [127, -128, -128, 127]  # the largest sums
    got = run_pipeline(config, x, config.stage_bit("residual"), np.zeros(4), res, params)
    want = np.array([[_scaled_add(a, b, params) for a, b in zip(xr, rr, strict=True)]
                     for xr, rr in zip(x, res, strict=True)])
    np.testing.assert_array_equal(got, want)
    assert len(set(want.ravel().tolist())) > 1 or shift >= 40  # the data moves the result


def test_a_scaled_add_of_a_wider_input_is_refused():
    params = ref.EpilogueParams(residual_op="scaled", res_x_mult=3, res_r_mult=2, res_shift=1)
    with pytest.raises(ValueError, match="requantize to int8 before it"):
        check_inputs(("bias", "residual"), params)
    check_inputs(("bias", "requant", "residual"), params)  # requant makes it int8
    with pytest.raises(ValueError, match="takes int8 x"):
        ref.epilogue(np.array([[200]]), ("residual",), params, residual=np.array([[1]]))


def test_chain_order_is_the_variants():
    # relu before requant differs from requant before relu when zp is negative
    config = VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=("relu", "requant"))
    x = np.array([[-1000], [1000], [0]])
    params = ref.EpilogueParams(mult=1 << 30, shift=31, zp=-20)
    got = run_pipeline(config, x, 3, np.zeros(1), np.zeros((3, 1)), params)
    expected = ref.apply_stage(ref.apply_stage(x, "relu", params), "requant", params)
    np.testing.assert_array_equal(got, expected)
    assert got[0, 0] == -20


def test_every_known_stage_has_its_arithmetic_in_hardware():
    assert set(LANES) == set(EPILOGUE_STAGES)


def test_each_stage_takes_its_specs_latency():
    # one beat, always ready: it leaves `latency` cycles after it entered, for every stage
    for name in EPILOGUE_STAGES:
        config = VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=(name,))
        dut = EpiloguePipeline(config)
        sim = Simulator(dut)
        sim.add_clock(1e-6)
        seen = []

        async def bench(ctx, dut=dut, seen=seen, name=name):
            ctx.set(dut.o.ready, 1)
            for cycle in range(SPECS[name].latency + 4):
                ctx.set(dut.i.valid, cycle == 0)
                if ctx.get(dut.o.valid):
                    seen.append(cycle)
                await ctx.tick()

        sim.add_testbench(bench)
        sim.run()
        assert seen == [SPECS[name].latency], name


def test_the_control_registers_are_shaped_by_the_specs():
    members = csr_signature(VariantConfig(epilogue=CHAIN)).members
    assert set(members) == {name for name in CHAIN if SPECS[name].regs}
    for name in members:
        for reg in SPECS[name].regs:
            shape = members[name].signature.members[reg.name].shape
            assert (shape.width, shape.signed) == (reg.width, reg.signed)


def run_per_channel(x, mults, shifts, params):
    """The requantize stage of a 2x4 variant, per channel: lane c's multiplier and shift in
    the bias group's rows (at bias row 3), ``x`` a row a cycle."""
    config = VariantConfig(rows=2, cols=4, port_bytes=8, epilogue=CHAIN)
    rows = {3: [0, 0, 0, 0], 4: list(mults), 5: list(shifts)}
    dut = EpiloguePipeline(config)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got = []

    async def bench(ctx):
        set_csrs(ctx, dut, params)
        ctx.set(dut.o.ready, 1)
        for r in range(len(x) + epilogue_latency(config.epilogue) + 2):
            ctx.set(dut.i.valid, r < len(x))
            if r < len(x):
                ctx.set(dut.i.payload, {"lanes": [int(v) for v in x[r]], "mask": 2, "dt": 0,
                                        "bias": 3, "res": 0, "out": 0, "first": 0})
            # the rows as block RAMs: the row addressed with en, a cycle later
            ports = [getattr(dut.e, read) for read in ("pc_mult", "pc_shift")]
            asked = [(ctx.get(port.en), ctx.get(port.addr)) for port in ports]
            if ctx.get(dut.o.valid):
                got.append([ctx.get(dut.o.payload.lanes[c]) for c in range(4)])
            await ctx.tick()
            for port, (en, addr) in zip(ports, asked, strict=True):
                if en:
                    ctx.set(port.data, rows.get(addr, [0] * 4))

    sim.add_testbench(bench)
    sim.run()
    return np.array(got)


def test_per_channel_requant_reads_lane_parameters_from_the_row_group():
    rng = np.random.default_rng(7)
    x = rng.integers(-(1 << 20), 1 << 20, (6, 4))
    mults = [1 << 30, 1518500250, -2000000000, 7]
    shifts = [44, 45, 43, 16]
    got = run_per_channel(x, mults, shifts, ref.EpilogueParams(per_channel=True, zp=-5))
    expected = np.stack([ref.requantize(x[:, c], mults[c], shifts[c], -5) for c in range(4)], 1)
    # mostly in range: the arithmetic, not only the saturation, is checked
    assert (np.abs(expected) < 127).mean() > 0.8
    np.testing.assert_array_equal(got, expected)


def rounded(n: Fraction, even: bool) -> int:
    """``n`` to an integer, halves up or to even: the independent reference."""
    low = n.numerator // n.denominator
    rest = n - low
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and (not even or low % 2)):
        return low + 1
    return low


@pytest.mark.parametrize("even", [False, True])
def test_requant_rounds_exact_halves_at_every_shift(even):
    """Every shift 0..63 (four lanes a run), on products that are exact halves, one below
    and one above, of both signs: the rounding add's carry-in and its shifted masks."""
    rng = np.random.default_rng(int(even))
    for first in range(0, 64, 4):
        shifts = list(range(first, first + 4))
        # mult 2**k (at most 2**30, a signed 32-bit multiplier) puts a half, and a step of
        # one multiplier either side of it, within x's 32 bits; the quotient keeps the
        # product within 62 bits
        ks = [min(30, max(0, s - 24)) for s in shifts]
        mults = [1 << k for k in ks]
        x = np.zeros((12, 4), np.int64)
        for c, (s, k) in enumerate(zip(shifts, ks, strict=True)):
            top = min(60, (1 << max(0, 61 - s)) - 1)
            quotients = rng.integers(-top, top + 1, 4)
            half = (1 << s) // 2 if s <= 61 else 0  # (over 2**61 x * mult cannot reach)
            for q in range(4):
                for d, delta in enumerate((0, -1, 1)):
                    product = (int(quotients[q]) << s) + half + delta * (1 << k) * (s > 0)
                    assert product % (1 << k) == 0 and abs(product >> k) < 1 << 31
                    x[3 * q + d, c] = product >> k
        params = ref.EpilogueParams(per_channel=True, zp=3, round_even=even)
        got = run_per_channel(x, mults, shifts, params)
        want = [[max(-128, min(127, rounded(Fraction(int(x[r, c]) * mults[c], 1 << shifts[c]),
                                            even) + 3)) for c in range(4)]
                for r in range(len(x))]
        np.testing.assert_array_equal(got, np.array(want), err_msg=f"shifts {shifts}")


@pytest.mark.parametrize("name", EPILOGUE_STAGES)
def test_a_spec_whose_latency_differs_from_the_gateware_is_refused(name):
    config = VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=(name,))
    wrong = dataclasses.replace(SPECS[name], latency=SPECS[name].latency + 1)
    with pytest.raises(ValueError, match=rf"stage '{name}' declares latency .* registers"):
        Fragment.get(EpilogueStage(config, wrong), None)
