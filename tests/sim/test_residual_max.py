"""The residual stage's max mode (CSR res_mode) on the accelerator, against the reference;
and that the add mode is still right after a program used the max mode."""

import dataclasses

import numpy as np
import pytest

from fusion.kernels.gemm.kind import compiled_gemm
from hwgen.asm import assemble
from hwgen.reference import EpilogueParams, epilogue
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow

MAX = EpilogueParams(residual_op="max")
ADD = EpilogueParams()


def epipass_program(config, *, src_dst: str, src_words: int, res_words: int, out: int,
                    rows: int, dt: str, modes: list[int | None]) -> list[int]:
    """Load the input (at word 0) into E rows 0.. and the int8 residual (right after it) into
    E rows ``rows``..; then, for each mode, set ``res_mode`` (None: leave it) and run one
    residual pass, the n-th storing at ``out + n * (its size)``."""
    out_words = rows * config.cols * (1 if dt == "i8" else 4) // config.port_bytes
    mask = config.stage_bit("residual")
    lines = [f"li rd=r1, imm={src_words}", f"li rd=r3, imm={rows}",
             f"load dst={src_dst}, ext=r0, spad=r0, stride=r0, count=1, len={src_words}",
             f"load dst=e8, ext=r1, spad=r3, stride=r0, count=1, len={res_words}",
             "wait units=1"]
    for n, mode in enumerate(modes):
        lines += ["wait units=4"]  # a CSR changes only while the epilogue is idle
        if mode is not None:
            lines += [f"csrwi csr=res_mode, imm={mode}"]
        lines += [f"li rd=r4, imm={out + n * out_words}",
                  f"epipass src=r0, out=r4, bias=r0, res=r3, rows={rows}, mask={mask:#b}, "
                  f"dt={dt}"]
    return assemble("\n".join([*lines, "wait units=7", "halt"]))


def test_residual_max_pass_is_bit_exact(v4x4):
    rng = np.random.default_rng(21)
    rows, cols = 16, v4x4.cols
    x8 = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    r = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    # int32 input beyond the int8 range: the max saturates to int8 like the add
    x32 = rng.integers(-400, 400, (rows, cols)).astype(np.int32)
    x32[0] = [2**31 - 1, -(2**31), 127, -128]
    w = v4x4.port_bytes
    words8, words32 = x8.nbytes // w, x32.nbytes // w
    jobs = [
        Job(epipass_program(v4x4, src_dst="e8", src_words=words8, res_words=words8, out=64,
                            rows=rows, dt="i8", modes=[1]),
            MemoryImage(writes=((0, x8.tobytes()), (words8, r.tobytes())),
                        reads={"y": (64, x8.nbytes)}), name="max_i8"),
        Job(epipass_program(v4x4, src_dst="e32", src_words=words32, res_words=words8,
                            out=128, rows=rows, dt="i32", modes=[1]),
            MemoryImage(writes=((0, x32.tobytes()), (words32, r.tobytes())),
                        reads={"y": (128, x32.nbytes)}), name="max_i32"),
    ]
    got8, got32 = (res.outputs["y"] for res in run_programs(v4x4, jobs))
    want8 = epilogue(x8, ("residual",), MAX, residual=r)
    np.testing.assert_array_equal(got8.view(np.int8).reshape(rows, cols), want8)
    np.testing.assert_array_equal(got32.view("<i4").reshape(rows, cols),
                                  epilogue(x32, ("residual",), MAX, residual=r))
    # the data tells max from add
    assert (want8 != epilogue(x8, ("residual",), ADD, residual=r)).mean() > 0.8


def test_add_mode_after_a_max_program(v4x4):
    rng = np.random.default_rng(22)
    rows, cols, w = 8, v4x4.cols, v4x4.port_bytes
    x = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    r = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    words = x.nbytes // w
    image = MemoryImage(writes=((0, x.tobytes()), (words, r.tobytes())),
                        reads={"y": (64, 2 * x.nbytes)})
    kw = {"src_dst": "e8", "src_words": words, "res_words": words, "out": 64, "rows": rows,
          "dt": "i8"}
    jobs = [
        # one program: max, then add after writing res_mode back to 0
        Job(epipass_program(v4x4, modes=[1, 0], **kw), image, name="max_then_add"),
        # a max program, then one that never writes res_mode: the reset between jobs
        # clears it
        Job(epipass_program(v4x4, modes=[1, 1], **kw), image, name="max"),
        Job(epipass_program(v4x4, modes=[None, None], **kw), image, name="add_after_reset"),
    ]
    results = [res.outputs["y"].view(np.int8).reshape(2, rows, cols)
               for res in run_programs(v4x4, jobs)]
    want_max = epilogue(x, ("residual",), MAX, residual=r)
    want_add = epilogue(x, ("residual",), ADD, residual=r)
    assert (want_max != want_add).mean() > 0.8
    np.testing.assert_array_equal(results[0], [want_max, want_add])
    np.testing.assert_array_equal(results[1], [want_max, want_max])
    np.testing.assert_array_equal(results[2], [want_add, want_add])


def test_residual_max_gemm_kernels(v4x4):
    """The compiler's path: fused and unfused kernels with the residual stage in max mode,
    and an add-mode kernel run right behind a max-mode one in the same program."""
    rng = np.random.default_rng(23)
    m, k, n = 9, 20, 11
    ops = {"a": rng.integers(-128, 128, (m, k), dtype=np.int8),
           "b": rng.integers(-128, 128, (k, n), dtype=np.int8),
           "residual": rng.integers(-128, 128, (m, n), dtype=np.int8)}
    quant = EpilogueParams.from_scale(1 / 600, zp=2)
    stages = ("requant", "residual")
    kernels = [compiled_gemm(v4x4, m, k, n, stages=stages, fused=fused, params=params)
               for params in (dataclasses.replace(quant, residual_op="max"), quant)
               for fused in (True, False)]
    # the add kernel after a program that left res_mode (and req_mode) at 1
    add = kernels[2]
    left = add.with_program(assemble(
        "csrwi csr=res_mode, imm=1\ncsrwi csr=req_mode, imm=1\n" + add.source))
    kernels.append(left)
    results = run_programs(v4x4, [Job(kn.program, MemoryImage(writes=tuple(kn.memory(**ops)),
                                                              reads=kn.reads))
                                  for kn in kernels])
    for kn, res in zip(kernels, results, strict=True):
        np.testing.assert_array_equal(kn.decode(res.outputs), kn.expected(**ops))
    assert (kernels[0].expected(**ops) != kernels[2].expected(**ops)).mean() > 0.3
