"""GEMM kernels, checked structurally (no hardware model): every hazard duty of the program,
every output row's operands and stage masks, load byte counts, tiling choices and errors.

``kernel_trace`` follows each program's control flow and labels scratchpad rows with where
they were loaded from; see its docstring.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion.kernels import layout
from fusion.kernels.gemm.kind import compiled_gemm
from fusion.kernels.tiling import Tiling, default_tiling, loop_shape, supertiles, traffic
from hwgen.asm import assemble, assemble_instrs, disassemble
from hwgen.config import EPILOGUE_STAGES, VariantConfig
from hwgen.isa import Instr, Op, encode
from hwgen.presets import SMALL
from hwgen.reference import EpilogueParams, gemm_epilogue
from tests.helpers.kernel_trace import HazardError, check_gemm, check_loops, trace

ALL = EPILOGUE_STAGES
PARAMS = EpilogueParams(mult=1 << 22, shift=30, zp=-5, clamp_lo=-60, clamp_hi=90)


def operands(m, k, n, stages, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "a": rng.integers(-128, 128, (m, k)), "b": rng.integers(-128, 128, (k, n)),
        "bias": rng.integers(-5000, 5000, n) if "bias" in stages else None,
        "residual": rng.integers(-128, 128, (m, n)) if "residual" in stages else None,
    }


def build(cfg, m, k, n, stages=(), fused=True, tiling=None, params=PARAMS):
    return compiled_gemm(cfg, m, k, n, stages=stages, fused=fused, tiling=tiling, params=params)


def assert_sound(kernel):
    t = check_gemm(kernel)
    assert t.bytes_loaded == kernel.bytes_loaded
    assert t.k_steps == kernel.dims.Mb * kernel.dims.Nb * kernel.dims.Kp
    assert kernel.ideal_cycles >= t.k_steps
    assert len(kernel.program) <= kernel.config.imem_depth
    return t


STAGE_SETS = [(), ("bias",), ("requant",), ("residual",), ("bias", "requant", "relu"),
              ("requant", "clamp", "residual"), ALL]
TILINGS = [None, Tiling(tm=1, tn=1, kt=4), Tiling(tm=2, tn=2, order="nm"),
           Tiling(tm=3, tn=4, double_buffer=False), Tiling(kt=6, double_buffer=False)]


@pytest.mark.parametrize("stages", STAGE_SETS, ids=lambda s: ",".join(s) or "none")
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("tiling", TILINGS, ids=str)
def test_kernels_are_hazard_free_and_compute_every_tile(stages, fused, tiling):
    assert_sound(build(SMALL, 13, 14, 27, stages, fused, tiling))


@pytest.mark.parametrize("cfg", [
    VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=ALL, spad_e_depth=24),
    VariantConfig(rows=8, cols=1, port_bytes=8, epilogue=ALL, spad_e_depth=40),
    VariantConfig(rows=2, cols=8, port_bytes=16, epilogue=ALL, spad_e_depth=6),
    VariantConfig(rows=8, cols=8, epilogue=ALL),
], ids=lambda c: f"{c.rows}x{c.cols}w{c.port_bytes}e{c.spad_e_depth}")
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_array_shapes_ports_and_small_epilogue_scratchpads(cfg, fused):
    assert_sound(build(cfg, 19, 23, 17, ALL, fused))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.sampled_from([1, 2, 4]), cols=st.sampled_from([1, 2, 4, 8]),
       m=st.integers(1, 24), k=st.integers(1, 40), n=st.integers(1, 24),
       stages=st.lists(st.sampled_from(ALL), unique=True).map(
           lambda s: tuple(x for x in ALL if x in s)),
       fused=st.booleans(), tm=st.integers(1, 4), tn=st.integers(1, 4),
       kt=st.sampled_from([None, 4, 8, 12]), order=st.sampled_from(["mn", "nm"]),
       double=st.booleans(), default=st.booleans())
def test_random_kernels_are_sound(rows, cols, m, k, n, stages, fused, tm, tn, kt, order,
                                  double, default):
    port = min(8, rows * cols)
    cfg = VariantConfig(rows=rows, cols=cols, port_bytes=port, epilogue=ALL, spad_a_depth=48,
                        spad_b_depth=48, spad_e_depth=32, imem_depth=8192)
    tiling = None if default else Tiling(tm=tm, tn=tn, kt=kt, order=order, double_buffer=double)
    try:
        kernel = build(cfg, m, k, n, stages, fused, tiling)
    except ValueError as exc:  # a user tiling may not fit: then the message says why
        assert tiling is not None and "does not fit" in str(exc)
        return
    assert_sound(kernel)


def test_fused_and_unfused_share_the_result_and_the_output_layout():
    fused = build(SMALL, 13, 30, 27, ALL, True)
    unfused = build(SMALL, 13, 30, 27, ALL, False)
    ops = operands(13, 30, 27, ALL)
    np.testing.assert_array_equal(fused.expected(**ops), unfused.expected(**ops))
    want = gemm_epilogue(ops["a"], ops["b"], ALL, PARAMS, bias=ops["bias"],
                         residual=ops["residual"])
    np.testing.assert_array_equal(fused.expected(**ops), want)
    assert fused.reads["out"][1] == unfused.reads["out"][1]
    assert unfused.bytes_loaded > fused.bytes_loaded
    assert unfused.ideal_cycles > fused.ideal_cycles
    data = layout.pack_tiles(fused.dims, want, np.int8)
    np.testing.assert_array_equal(fused.decode({"out": data}), want)
    np.testing.assert_array_equal(fused.decode(np.frombuffer(data, np.uint8)), want)


def test_operands_no_stage_uses_are_ignored():
    ops = operands(4, 4, 4, ALL)
    k = compiled_gemm(SMALL, 4, 4, 4, stages=("requant",), params=PARAMS)
    assert set(k.regions) == {"a", "b", "out"}
    assert [a for a, _ in k.memory(**ops)] == [k.regions["a"].addr, k.regions["b"].addr]


def test_memory_image_holds_the_packed_operands():
    k = build(SMALL, 5, 9, 6, ("bias", "residual"))
    ops = operands(5, 9, 6, ("bias", "residual"))
    writes = dict(k.memory(**ops))
    assert writes[k.regions["a"].addr] == layout.pack_a(k.dims, ops["a"])
    assert writes[k.regions["b"].addr] == layout.pack_b(k.dims, ops["b"])
    assert writes[k.regions["bias"].addr] == layout.pack_bias(k.dims, ops["bias"])
    assert writes[k.regions["residual"].addr] == layout.pack_tiles(k.dims, ops["residual"])
    assert all(len(data) % SMALL.port_bytes == 0 for data in writes.values())


def test_program_is_its_own_listing():
    k = build(SMALL, 13, 30, 27, ALL, False)
    assert assemble(disassemble(k.program)) == k.program


def _without(program, index):
    """The program with instruction ``index`` made a nop (branch targets stay valid)."""
    return program[:index] + [encode(Instr(Op.NOP))] + program[index + 1:]


def _waits(kernel, units):
    text = disassemble(kernel.program).splitlines()
    instrs = [line.strip() for line in text if not line.endswith(":")]
    return [n for n, line in enumerate(instrs) if line == f"wait units={units}, left=0"]


@pytest.mark.parametrize("units, fused, tiling, match", [
    (1, True, None, "while a load into rows"),  # a matmul before its operands arrived
    (3, True, Tiling(tm=1, tn=1), "while a load into rows|while a queued job may still read"),
    (2, True, Tiling(tm=1, tn=1, double_buffer=False), "while a queued job may still read"),
    (4, True, Tiling(tm=1, tn=1), "while a queued job may still read"),  # residual half reuse
    (4, False, None, "written by a job that may not have finished|csrwi|while a queued"),
    (5, False, None, "while a load into rows|while a queued job may still read"),
    (7, True, None, "halt without a final wait"),
])
def test_the_checker_catches_every_missing_wait(units, fused, tiling, match):
    kernel = build(SMALL, 13, 30, 27, ALL, fused, tiling)
    waits = _waits(kernel, units)
    assert waits, f"no wait units={units} in the program"
    caught = 0
    for index in waits:
        try:
            trace(SMALL, _without(kernel.program, index), kernel.regions)
        except HazardError as exc:
            assert any(m in str(exc) for m in match.split("|")), exc
            caught += 1
    assert caught, f"removing a wait units={units} went unnoticed"


def test_default_tiler_prefers_double_buffering_and_dividing_tiles():
    cfg = VariantConfig(rows=8, cols=8, epilogue=ALL)
    dims = layout.GemmDims(cfg, 256, 256, 256)
    t = default_tiling(dims)
    assert t.double_buffer and t.kt == 256
    assert t.tm * 256 <= cfg.spad_a_depth // 2 and t.tn * 256 <= cfg.spad_b_depth // 2
    assert dims.Mb % t.tm == 0 and dims.Nb % t.tn == 0
    small = layout.GemmDims(SMALL, 13, 200, 27)
    chunked = default_tiling(small)
    assert (chunked.tm, chunked.tn) == (1, 1) and chunked.kt < small.Kp
    assert chunked.kt % SMALL.k_align == 0


def test_tiling_for_problem_keeps_the_given_choices():
    cfg = VariantConfig(rows=8, cols=8)
    t = Tiling.for_problem(cfg, 64, 64, 64, tm=2, loop_order="nm", double_buffer=False)
    assert (t.tm, t.order, t.double_buffer) == (2, "nm", False)
    t = Tiling.for_problem(cfg, 64, 256, 64, kt=64)
    assert (t.tm, t.tn, t.kt) == (1, 1, 64)


def test_imem_overflow_falls_back_to_a_shorter_program_or_says_so():
    cfg = VariantConfig(rows=4, cols=4, epilogue=ALL, imem_depth=300)
    kernel = build(cfg, 64, 64, 96, ("bias",))
    assert len(kernel.program) <= 300
    # The best tiling of this problem, 2 x 2 super tiles, has ragged edges on both sides:
    # 175 words. A shape without them fits 150 and keeps double buffering.
    ragged = VariantConfig(rows=4, cols=4, epilogue=ALL, spad_a_depth=256, spad_b_depth=256,
                           imem_depth=150)
    best = build(dataclasses.replace(ragged, imem_depth=2048), 36, 64, 44, ("bias",))
    assert (best.tiling.tm, best.tiling.tn) == (2, 2) and len(best.program) > 150
    kernel = build(ragged, 36, 64, 44, ("bias",))
    assert len(kernel.program) <= 150 and kernel.tiling.double_buffer
    assert_sound(kernel)
    tiny = VariantConfig(rows=4, cols=4, epilogue=ALL, imem_depth=20)
    with pytest.raises(ValueError, match=r"needs \d+ instructions but the variant's "
                                         r"instruction memory holds 20.*imem_depth >="):
        build(tiny, 64, 64, 64, ALL)


#: SMALL with room for double-buffered residual super tiles of 2 x 3 tiles and 23 bias rows.
WIDE_E = dataclasses.replace(SMALL, spad_e_depth=128)
# A small and a large problem (M, N, K) with the same ragged edges, on WIDE_E (4 x 8);
# whole-K tilings use K = 8, K-chunked ones (kt = 4) K = 16 and 36.
GROWTH = [
    (Tiling(tm=1, tn=1), (28, 40, 8), (124, 184, 8)),
    (Tiling(tm=2, tn=3, order="nm"), (28, 88, 8), (124, 184, 8)),  # ragged on both sides
    (Tiling(tm=2, tn=2, double_buffer=False), (32, 64, 8), (120, 176, 8)),
    (Tiling(tm=1, tn=1, kt=4), (16, 32, 16), (40, 64, 36)),
    (Tiling(tm=1, tn=1, kt=4, order="nm", double_buffer=False), (16, 32, 16), (40, 64, 36)),
]


def _gemm_words(kernel):
    """Instructions of the GEMM itself (unfused, the epilogue passes follow it)."""
    return len(assemble_instrs(kernel.source.split("\n# pass0_")[0]))


@pytest.mark.parametrize("stages, fused", [((), True), (ALL, True), (("bias", "relu"), False)],
                         ids=["plain", "fused", "unfused"])
@pytest.mark.parametrize("tiling, small, large", GROWTH, ids=lambda x: str(x))
def test_program_size_does_not_grow_with_the_number_of_super_tiles(tiling, small, large,
                                                                   stages, fused):
    (m0, n0, k0), (m1, n1, k1) = small, large
    few = build(WIDE_E, m0, k0, n0, stages, fused, tiling)
    many = build(WIDE_E, m1, k1, n1, stages, fused, tiling)
    assert supertiles(many.dims, many.tiling) >= 4 * supertiles(few.dims, few.tiling)
    assert loop_shape(many.dims, many.tiling) == loop_shape(few.dims, few.tiling)
    assert _gemm_words(many) == _gemm_words(few)
    if fused:
        assert len(many.program) == len(few.program)
    else:  # the passes are loops too, chunked (whole block rows or parts) by the shape
        assert len(many.program) < 256
    assert_sound(many)


def test_ragged_edges_are_peeled_not_unrolled():
    tiling = Tiling(tm=2, tn=3)
    even = build(WIDE_E, 4 * 30, 8, 8 * 24, ALL, True, tiling)
    ragged = build(WIDE_E, 4 * 31, 8, 8 * 23, ALL, True, tiling)
    # each ragged level has its last two iterations peeled: up to 3 x 3 super-tile bodies
    assert len(even.program) < len(ragged.program) < 2.5 * len(even.program)
    assert_sound(ragged)


def test_big_gemms_fit_the_default_variant():
    """512^3 on the default 8 x 8 variant once needed 3033 unrolled instructions (of 2048)."""
    cfg = VariantConfig(rows=8, cols=8, epilogue=("bias", "requant", "relu"))
    kernel = compiled_gemm(cfg, 512, 512, 512, stages=("bias", "requant", "relu"))
    assert kernel.tiling.double_buffer and kernel.tiling.kt == 512
    assert supertiles(kernel.dims, kernel.tiling) >= 1024
    assert len(kernel.program) < 150
    assert kernel.bytes_loaded == traffic(kernel.dims, kernel.tiling) + 512 * 4


@pytest.mark.parametrize("text, match", [
    ("li rd=r1, imm=3\nl:\n nop\n bnzd rc=r1, target=l\n", None),
    ("l:\n nop\n bnzd rc=r1, target=l\n", "not set by an li just before it"),
    ("li rd=r1, imm=3\nl:\n addi rd=r1, rs=r1, imm=1\n bnzd rc=r1, target=l\n",
     "writes r1, the counter"),
    ("li rd=r1, imm=3\nl:\n li rd=r1, imm=2\nm:\n bnzd rc=r1, target=m\n"
     " bnzd rc=r1, target=l\n", "writes r1, the counter"),
    ("li rd=r1, imm=3\nl:\n li rd=r2, imm=2\nm:\n bnzd rc=r1, target=l\n"
     " bnzd rc=r2, target=m\n", "overlap"),
])
def test_the_loop_checker_catches_malformed_loops(text, match):
    words = assemble(text + "halt\n")
    if match is None:
        assert check_loops(words) == [(1, 2)]
    else:
        with pytest.raises(HazardError, match=match):
            check_loops(words)


@pytest.mark.parametrize("kwargs, match", [
    ({"stages": ("gelu",)}, "epilogue stage 'gelu' is not in the chain"),
    ({"stages": ("relu", "bias")}, "not an ordered subset"),
    ({"stages": ("bias",), "bias": None}, r"the gemm 16x16x16 stages=bias needs a bias "
                                          r"operand: int32 of shape \(16,\)"),
    ({"stages": ("residual",), "residual": None}, "needs a residual operand: int8 of shape"),
    ({"tiling": Tiling(tm=3, tn=1, kt=4)}, "K chunking .* tm=3 x tn=1 tiles need 3, the "
                                           "variant has 1 \\(hwgen generate --acc-banks\\)"),
    ({"tiling": Tiling(tm=4, tn=1)}, r"the A super tile needs 64 scratchpad rows \(4 blocks x "
                                     r"kt=16\) but half of the A scratchpad has 32"),
    ({"tiling": Tiling(kt=5)}, "kt=5 must be a multiple of k_align=2"),
])
def test_errors_name_the_problem(kwargs, match):
    stages = kwargs.pop("stages", ())
    ops = operands(16, 16, 16, stages)
    ops.update({k: v for k, v in kwargs.items() if k in ops})
    with pytest.raises(ValueError, match=match):
        kernel = compiled_gemm(SMALL, 16, 16, 16, stages=stages, params=PARAMS,
                               tiling=kwargs.get("tiling"))
        kernel.memory(**ops)


def test_stage_missing_from_the_variant_is_refused():
    cfg = VariantConfig(epilogue=("bias", "requant"))
    with pytest.raises(ValueError, match="'relu' is not in the chain .*bias, requant"):
        build(cfg, 4, 4, 4, ("relu",))


def test_residual_tiles_that_cannot_fit_the_epilogue_scratchpad():
    cfg = VariantConfig(rows=8, cols=8, epilogue=ALL, spad_e_depth=12)
    with pytest.raises(ValueError, match="epilogue scratchpad needs 16 rows .* has 12"):
        build(cfg, 8, 8, 8, ("residual",), tiling=Tiling(double_buffer=True))
    with pytest.raises(ValueError, match="does not fit: the epilogue scratchpad needs 8 rows"):
        build(VariantConfig(rows=8, cols=8, epilogue=ALL, spad_e_depth=6), 8, 8, 8,
              ("residual",))


def test_bias_rows_that_do_not_fit_load_in_windows_or_are_refused():
    cfg = VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=ALL, spad_e_depth=16)
    kernel = build(cfg, 3, 3, 17, ("bias",))  # 17 bias rows: windows of 16 and 1 blocks
    assert kernel.meta["chosen"]["bias_windows"] == 2
    assert_sound(kernel)
    # double-buffered residual tiles of a 4 x 2 super tile take all 16 rows
    with pytest.raises(ValueError, match=r"needs 18 rows \(2 bias rows for the 2 column "
                                         r"block\(s\) of a super tile and 16 for residual "
                                         r"tiles\) but has 16"):
        build(cfg, 8, 3, 17, ("bias", "residual"), tiling=Tiling(tm=4, tn=2))
    # the unfused passes load the whole bias region
    with pytest.raises(ValueError, match=r"needs 18 epilogue scratchpad rows for one tile "
                                         r"\(17 bias rows \+ 1\) but the variant has 16"):
        build(cfg, 3, 3, 17, ("bias",), fused=False)


def test_memory_too_small():
    cfg = VariantConfig(rows=4, cols=4, mem_addr_bits=8)
    with pytest.raises(ValueError, match="beyond the 256 words of external memory"):
        build(cfg, 64, 64, 64)
