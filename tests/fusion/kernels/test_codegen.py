"""Code generation: templates as package data, strict rendering, assembly checks."""

import importlib.resources
import time

import jinja2
import numpy as np
import pytest

from fusion.kernels import codegen
from fusion.kernels.codegen import ProgramTooLong, assemble_program, check_load, load_bytes
from fusion.kernels.epilogue import pass_dtypes
from fusion.kernels.gemm.kind import compiled_gemm
from hwgen.asm import assemble_instrs
from hwgen.config import VariantConfig
from hwgen.isa import Dst
from hwgen.reference import EpilogueParams


def test_templates_ship_as_package_data():
    folder = importlib.resources.files("rtl_templates") / "microcode"
    for name in ("common.j2", "gemm.j2", "epilogue_pass.j2"):
        assert (folder / name).is_file()


def test_rendering_is_strict():
    with pytest.raises(jinja2.UndefinedError):
        codegen.render("gemm.j2", prefix="g", halt=True)


def test_program_too_long_names_the_sizes_and_the_fix():
    cfg = VariantConfig(imem_depth=4)
    with pytest.raises(ProgramTooLong, match="kernel needs 5 instructions but the variant's "
                                             "instruction memory holds 4: .*imem_depth >= 5"):
        assemble_program(cfg, "nop\n" * 5, what="kernel")
    assert len(assemble_program(cfg, "nop\n" * 4)) == 4


@pytest.mark.parametrize("count, length, dst, ok", [
    (1, 1, Dst.A, True),    # 8 bytes = 2 rows of 4
    (3, 1, Dst.E32, False),  # 8-byte segments, 16-byte rows, 24 bytes in all
    (2, 1, Dst.E32, True),  # two segments make one row
    (1, 3, Dst.E32, False),
    (1, 0, Dst.B, False),
])
def test_check_load_applies_the_row_cutting_rule(count, length, dst, ok):
    cfg = VariantConfig(rows=4, cols=4, port_bytes=8)
    if ok:
        check_load(cfg, count, length, dst)
    else:
        with pytest.raises(ValueError, match="cannot be cut"):
            check_load(cfg, count, length, dst)


def test_load_bytes_multiplies_by_loop_trip_counts():
    cfg = VariantConfig(port_bytes=8)
    program = assemble_instrs("""
        load dst=a, ext=r0, spad=r0, stride=r0, count=2, len=3
        li rd=r15, imm=5
    outer:
        li rd=r12, imm=3
    inner:
        load dst=b, ext=r0, spad=r0, stride=r0, count=1, len=1
        bnzd rc=r12, target=inner
        bnzd rc=r15, target=outer
        halt
    """)
    assert load_bytes(cfg, program) == 2 * 3 * 8 + 5 * 3 * 8
    bad = assemble_instrs("l:\n load dst=a, ext=r0, spad=r0, stride=r0, count=1, len=1\n"
                          " bnzd rc=r1, target=l")
    with pytest.raises(ValueError, match="not set by an li just before it"):
        load_bytes(cfg, bad)


def test_redundant_li_is_dropped_only_where_the_value_is_known():
    text = """
    li rd=r2, imm=0
    li rd=r2, imm=0          # dropped: r2 holds 0
    addi rd=r3, rs=r2, imm=5
    li rd=r3, imm=5          # dropped: r3 = r2 + 5 = 5
    li rd=r12, imm=3         # kept although r12 is unknown anyway
loop:
    li rd=r2, imm=0          # kept: a branch arrives at the label
    bnzd rc=r12, target=loop
    li rd=r12, imm=3         # kept: bnzd changed r12
    li rd=r12, imm=3         # kept: it sets the trip count of the loop below
again:
    nop
"""
    kept = [line.split("#")[0].strip() for line in
            codegen.drop_redundant_li(text).splitlines() if line.strip()]
    assert kept == ["li rd=r2, imm=0", "addi rd=r3, rs=r2, imm=5", "li rd=r12, imm=3", "loop:",
                    "li rd=r2, imm=0", "bnzd rc=r12, target=loop", "li rd=r12, imm=3",
                    "li rd=r12, imm=3", "again:", "nop"]


def test_unfused_intermediates_are_int8_only_when_exact():
    p = EpilogueParams(clamp_lo=-1000, clamp_hi=1000)
    assert pass_dtypes(("bias", "requant", "relu"), p, "i8") == ["i32", "i8", "i8"]
    # a bias after requant leaves int8: keep int32 so that the chain stays exact
    assert pass_dtypes(("requant", "bias", "relu"), p, "i8") == ["i8", "i32", "i8"]
    assert pass_dtypes(("requant", "clamp", "residual"), p, "i8") == ["i8", "i8", "i8"]
    p_out = EpilogueParams(clamp_lo=200, clamp_hi=300)  # moves int8 values out of range
    assert pass_dtypes(("requant", "clamp", "relu"), p_out, "i8") == ["i8", "i32", "i8"]
    assert pass_dtypes(("bias", "relu"), p, "i32") == ["i32", "i32"]


def test_building_a_kernel_takes_milliseconds():
    cfg = VariantConfig(rows=8, cols=8, epilogue=("bias", "requant", "relu"))
    rng = np.random.default_rng(0)
    a, b = rng.integers(-128, 128, (256, 64)), rng.integers(-128, 128, (64, 256))
    bias = rng.integers(-99, 99, 256)
    compiled_gemm(cfg, 256, 64, 256, stages=("bias",)).memory(a, b, bias=bias)  # warm up
    start = time.perf_counter()
    for fused in (True, False):
        kernel = compiled_gemm(cfg, 256, 64, 256, stages=("bias", "requant", "relu"),
                               fused=fused)
        kernel.memory(a, b, bias=bias)
    assert time.perf_counter() - start < 0.5
