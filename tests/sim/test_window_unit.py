"""The window unit (WINDOW, WCFG) on Verilator: every tile equals the instruction's numpy
meaning (:func:`hwgen.reference.window_tile`) for mac, max and sum, strides 1 to 3, kernels
1x1 to 3x3, padding and partial tiles; tiles mixed with MATMULs on one program; and the
analytical model prices each program to the cycle. (That the numpy meaning is a depthwise
convolution and a pool is checked without the simulator, in
``tests/hwgen/test_window_reference.py``.)"""

import numpy as np
import pytest

from fusion.cost.analytical import estimate_program
from hwgen.asm import assemble
from hwgen.config import VariantConfig
from hwgen.isa import decode
from hwgen.presets import ALL_STAGES
from hwgen.reference import WindowGeometry, gemm, window_tile
from sim.run import Job, MemoryImage, run_programs

pytestmark = pytest.mark.slow

V4 = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES, window_unit=True)
V8 = VariantConfig(rows=8, cols=8, port_bytes=8, epilogue=ALL_STAGES, window_unit=True,
                   mem_addr_bits=24)

#: (H, W, kh, kw, stride, pt, pl, mode, fill, images); the output size follows.
CASES = [
    (5, 7, 3, 3, 1, 1, 1, "mac", 3, 1),
    (6, 6, 3, 3, 2, 1, 1, "mac", -2, 1),
    (9, 9, 3, 3, 3, 0, 0, "mac", 0, 1),
    (3, 5, 1, 1, 1, 0, 0, "mac", 0, 1),
    (4, 7, 2, 3, 1, 1, 0, "mac", 5, 2),
    (4, 6, 2, 2, 2, 0, 0, "max", -128, 1),
    (5, 5, 3, 3, 1, 1, 1, "max", -128, 1),
    (7, 7, 3, 3, 2, 1, 1, "max", -128, 1),
    (3, 3, 3, 3, 1, 0, 0, "sum", 0, 6),
    (2, 4, 3, 3, 1, 0, 0, "sum", 0, 5),
]
IN, WT, OUT = 64, 16, 8192


def _out_size(h, w, kh, kw, s, pt, pl):
    # the bottom and right padding equal the top and left (what the cases need)
    return (h + 2 * pt - kh) // s + 1, (w + 2 * pl - kw) // s + 1


def _case(config, case, rng, dt):
    h, w, kh, kw, s, pt, pl, mode, fill, images = case
    rows = lanes = config.cols
    plane = rng.integers(-128, 128, (images * h * w, lanes), dtype=np.int8)
    weights = rng.integers(-128, 128, (9, lanes), dtype=np.int8)
    geom = WindowGeometry(win=w, hin=h, kh=kh, kw=kw, stride=s, pt=pt, pl=pl,
                          fill=fill & 0xFF, mode=mode)
    oh, ow = _out_size(h, w, kh, kw, s, pt, pl)
    lane_bytes = 4 if dt == "i32" else 1
    tile_words = rows * lanes * lane_bytes // config.port_bytes
    lines = [f"li rd=r1, imm={IN}", "li rd=r2, imm=0", "li rd=r3, imm=1",
             f"load dst=a, ext=r1, spad=r2, stride=r3, count=1, len={images * h * w}",
             f"li rd=r1, imm={WT}", "li rd=r2, imm=8",
             "load dst=e8, ext=r1, spad=r2, stride=r3, count=1, len=9",
             "wait units=7",
             f"wcfg win={w}, hin={h}, fill={fill & 0xFF}, kh={kh}, kw={kw}, pt={pt}, "
             f"pl={pl}, stride={s}, mode={mode}",
             "li rd=r2, imm=8", "li rd=r4, imm=0"]
    tiles = []  # (a, oy, ox, count): a tile stays within one image
    if mode == "sum":
        tiles = [(0, t0, 0, min(rows, images - t0)) for t0 in range(0, images, rows)]
    else:
        for image in range(images):  # image n's pixel (0, 0) is A row n*h*w
            for p in range(0, oh * ow, rows):
                tiles.append((image * h * w, *divmod(p, ow), min(rows, oh * ow - p)))
    for n, (a, oy, ox, count) in enumerate(tiles):
        lines += [f"li rd=r1, imm={a}", f"li rd=r3, imm={OUT + n * tile_words}",
                  f"li rd=r5, imm={(oy << 16) | ox}",
                  f"window a=r1, w=r2, out=r3, bias=r4, pos=r5, count={count}, ow={ow}, "
                  f"mask=0, dt={dt}"]
    lines += ["wait units=7", "halt"]
    job = Job(program=assemble("\n".join(lines)),
              memory=MemoryImage(writes=((IN, plane.tobytes()), (WT, weights.tobytes())),
                                 reads={"out": (OUT, len(tiles) * rows * lanes * lane_bytes)}),
              name=f"window {case} {dt}")
    return job, (plane, weights, geom, tiles, ow)


def _want(config, plane, weights, geom, tiles, ow, dt):
    a_spad = np.zeros((config.spad_a_depth, config.cols), np.int8)
    a_spad[:len(plane)] = plane
    e_spad = np.zeros((config.spad_e_depth, config.cols), np.int64)
    e_spad[8:17] = weights
    out = np.stack([window_tile(a_spad, e_spad, geom, a=a, w=8, pos=(oy << 16) | ox,
                                count=count, ow=ow, rows=config.rows)
                    for a, oy, ox, count in tiles])
    return out if dt == "i32" else out.astype(np.int8)  # i8: the low byte of each lane


@pytest.fixture(scope="module", params=[V4, V8], ids=["4x4", "8x8"])
def runs(request):
    from sim.build import build_variant

    config = request.param
    build_variant(config)
    rng = np.random.default_rng(5)
    built = [(case, dt, *_case(config, case, rng, dt)) for case in CASES
             for dt in (("i32", "i8") if case[7] != "sum" else ("i32",))]
    results = run_programs(config, [job for _, _, job, _ in built])
    return config, [(case, dt, job, meta, result)
                    for (case, dt, job, meta), result in zip(built, results, strict=True)]


def test_window_tiles_match_the_instruction_model(runs):
    config, items = runs
    for case, dt, _, meta, result in items:
        want = _want(config, *meta, dt)
        got = np.frombuffer(bytes(result.outputs["out"]), "<i4" if dt == "i32" else "i1")
        np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=f"{case} {dt}")


def test_the_analytical_model_prices_window_programs_exactly(runs):
    config, items = runs
    for case, dt, job, _, result in items:
        predicted = estimate_program(config, [decode(w) for w in job.program])
        assert predicted == result.counters["cycles"], (case, dt)


def test_window_tiles_between_matmuls():
    """MATMUL tiles before and after WINDOW tiles on one program: each waits for the other
    unit to drain (one tile in the epilogue at a time), every output is right, and the model
    prices the mix exactly."""
    from sim.build import build_variant

    config = V4
    build_variant(config)
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, (8, 4), dtype=np.int8)  # K-major A: 8 slices of 4 rows
    b = rng.integers(-128, 128, (8, 4), dtype=np.int8)
    plane = rng.integers(-128, 128, (20, 4), dtype=np.int8)
    weights = rng.integers(-128, 128, (9, 4), dtype=np.int8)
    program = assemble("""
        li rd=r1, imm=64
        li rd=r3, imm=1
        load dst=a, ext=r1, spad=r0, stride=r3, count=1, len=8
        li rd=r1, imm=72
        li rd=r2, imm=100
        load dst=a, ext=r1, spad=r2, stride=r3, count=1, len=20
        li rd=r1, imm=96
        load dst=b, ext=r1, spad=r0, stride=r3, count=1, len=8
        li rd=r1, imm=16
        li rd=r2, imm=8
        load dst=e8, ext=r1, spad=r2, stride=r3, count=1, len=9
        wait units=7
        wcfg win=5, hin=4, fill=0, kh=3, kw=3, pt=1, pl=1, stride=1, mode=mac
        li rd=r4, imm=512
        matmul a=r0, b=r0, out=r4, bias=r0, res=r0, k=8, mask=0, dt=i32, last=1
        li rd=r1, imm=100
        li rd=r4, imm=528
        li rd=r5, imm=0
        window a=r1, w=r2, out=r4, bias=r0, pos=r5, count=4, ow=5, mask=0, dt=i32
        li rd=r4, imm=544
        li rd=r5, imm=4
        window a=r1, w=r2, out=r4, bias=r0, pos=r5, count=4, ow=5, mask=0, dt=i32
        li rd=r4, imm=560
        matmul a=r0, b=r0, out=r4, bias=r0, res=r0, k=8, mask=0, dt=i32, last=1
        wait units=7
        halt
    """)
    mem = ((16, weights.tobytes()), (64, a.tobytes() + plane.tobytes()), (96, b.tobytes()))
    job = Job(program=program, memory=MemoryImage(writes=mem, reads={"out": (512, 4 * 64)}),
              name="matmul, window, window, matmul")
    (result,) = run_programs(config, [job])
    got = np.frombuffer(bytes(result.outputs["out"]), "<i4").reshape(4, 4, 4)
    product = gemm(a.T, b)  # rows x cols: A's slices are its columns
    a_spad = np.zeros((config.spad_a_depth, 4), np.int8)
    a_spad[100:120] = plane
    e_spad = np.zeros((config.spad_e_depth, 4), np.int64)
    e_spad[8:17] = weights
    geom = WindowGeometry(win=5, hin=4, pt=1, pl=1)
    np.testing.assert_array_equal(got[0], product)
    for n, (oy, ox) in enumerate(((0, 0), (0, 4))):
        np.testing.assert_array_equal(got[1 + n], window_tile(
            a_spad, e_spad, geom, a=100, w=8, pos=(oy << 16) | ox, count=4, ow=5, rows=4))
    np.testing.assert_array_equal(got[3], product)
    assert estimate_program(config, [decode(w) for w in program]) == result.counters["cycles"]
