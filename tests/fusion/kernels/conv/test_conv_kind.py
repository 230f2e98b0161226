"""The window convolution kind without a simulator: what it refuses (and says why), its
features through JSON, the hardware loops of its program, the loop folding on its own, and
the instruction model of a window load against a case worked by hand."""

import json

import numpy as np
import pytest

from fusion.kernels.conv.features import ConvFeatures
from fusion.kernels.conv.kind import CONV
from fusion.kernels.conv.params import ConvGeometry, ConvParams
from fusion.kernels.conv.program import (
    LOOP_REGS,
    b_prefetch,
    bias_windowed,
    build_context,
    column_chunk,
    compress,
    geometry,
    instructions,
)
from fusion.kernels.layout import Region
from fusion.kernels.program import compile_kernel
from hwgen.config import VariantConfig
from hwgen.isa import Dst, Op, Unit, decode
from hwgen.presets import ALL_STAGES
from hwgen.reference import EpilogueParams, window_load

V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES)
V4P4 = VariantConfig(rows=4, cols=4, port_bytes=4, epilogue=ALL_STAGES)
REQUANT = EpilogueParams(mult=1 << 30, shift=36, zp=1)


def conv(**kw) -> ConvParams:
    base = dict(N=1, H=16, W=16, Cin=8, Cout=8, kh=3, kw=3, pads=(1, 1, 1, 1))
    return ConvParams(**{**base, **kw})


@pytest.mark.parametrize("config, params, reason, words", [
    # an A row of 4 lanes is half an 8-byte word: no window loads
    (VariantConfig(rows=4, cols=4, epilogue=ALL_STAGES), conv(), "no_window_loads",
     ["window loads need an A row of one memory word", "4 rows and 8-byte words"]),
    # output rows of 12 pixels (not whole blocks of 8), and one block's windows, 2304 rows,
    # do not fit the A scratchpad (half of it would be double buffered)
    (V8, conv(W=12, Cin=256), "a_scratchpad", ["a block's windows (1 blocks x 2304 rows)",
                                               "the A scratchpad (2048 rows)"]),
    (V8, conv(stride=(1, 3)), "stride", ["horizontal stride 3", "lane step (1 or 2)"]),
    # a step of 2 blocks x 1152 rows: 2304 > 2048
    (V8, conv(W=16, Cin=128), "a_scratchpad", ["an output row's windows (2 blocks x 1152 rows)",
                                               "the A scratchpad (2048 rows)"]),
    (VariantConfig(rows=4, cols=8, port_bytes=4, epilogue=ALL_STAGES),
     conv(stages=("requant",), epilogue=REQUANT, kmajor_out=True), "kmajor_out",
     ["K-major store needs a square array"]),
    # 90 column blocks of per-channel parameters are 270 epilogue rows of 256: the chunks
    # load their own, which a loop over the chunks cannot, and unrolled they are too long
    (V4P4, conv(H=4, W=4, Cin=16, Cout=360, stages=("bias", "requant"),
                epilogue=EpilogueParams(per_channel=True)), "program_too_long",
     ["instructions", "each loading its own bias rows, cannot go in a loop"]),
])
def test_refusals_name_the_reason(config, params, reason, words):
    refusal = CONV.legality(config, params)
    assert refusal is not None and refusal.kind == "conv" and refusal.reason == reason
    for w in words:
        assert w in refusal.text, (w, refusal.text)
    # the same shape without the offending feature is legal (the refusal is about that)
    if config.window_loads and not params.kmajor_out:
        assert CONV.legality(config, conv()) is None


def test_chunks_load_their_own_bias_rows_where_all_do_not_fit():
    """Per channel, three epilogue rows a column block: 128 blocks (1,024 channels) are 384
    rows of 256, so each chunk loads its own to row 0 and the matmuls count from there; 85
    blocks (680 channels, 255 rows) still load once."""
    pc = EpilogueParams(per_channel=True)
    for cout, windowed in ((1024, True), (680, False)):
        params = conv(H=4, W=4, Cin=64, Cout=cout, kh=1, kw=1, pads=(0, 0, 0, 0),
                      stride=(2, 2), stages=("bias", "requant"), epilogue=pc)
        kernel = compile_kernel(CONV, V8, params)
        e_loads = [i for i in map(decode, map(int, kernel.program))
                   if i.op is Op.LOAD and i.get("dst") == Dst.E32]
        geo = geometry(V8, params)
        tn = b_prefetch(geo) or column_chunk(geo, False)
        assert bias_windowed(geo, tn) is windowed
        chunks = -(-geo.Nb // tn)
        assert len(e_loads) == (chunks if windowed else 1), cout
        words = 3 * V8.e_row_bytes // V8.port_bytes
        assert sum(i.get("len") for i in e_loads) == geo.Nb * words


def test_legal_counterparts_of_the_refusals():
    assert CONV.legality(V8, conv()) is None
    assert CONV.legality(V8, conv(stride=(2, 2))) is None
    assert CONV.legality(V8, conv(W=8, Cin=64)) is None  # 1 block x 576 fits half of A
    assert CONV.legality(V8, conv(W=12)) is None  # blocks spanning output rows
    assert CONV.legality(V8, conv(W=12, Cin=64)) is None  # one such block x 576 rows
    assert CONV.legality(V8, conv(stages=("requant",), epilogue=REQUANT, kmajor_out=True)) is None
    assert CONV.legality(V4P4, conv()) is None


def test_windows_past_half_the_a_scratchpad_are_single_buffered():
    """DenseNet's 3x3 convolutions of 128 channels: 1152 rows a block, 2304 double."""
    from fusion.kernels.conv.program import geometry

    p = conv(W=12, Cin=128)
    assert CONV.legality(V8, p) is None and geometry(V8, p).single_buffered
    assert not geometry(V8, conv(W=12, Cin=64)).single_buffered
    geo = geometry(V8, p)
    assert geo.split_rows == 896  # 2,048 rows: 896 + 896 + the last 256 of each block
    instrs = [decode(w) for w in compile_kernel(CONV, V8, p).program]
    ops = [i.op for i in instrs]
    # each tile is two matmuls: 896 rows accumulated, then 256 that end it
    first = ops.index(Op.MATMUL)
    assert (instrs[first].get("k"), instrs[first].get("last")) == (896, 0)
    second = ops.index(Op.MATMUL, first + 1)
    assert (instrs[second].get("k"), instrs[second].get("last")) == (256, 1)
    # the next step's first 896 rows load while this step computes (the other half); the
    # rest wait for this step's matmuls, into the rows every step shares
    waits = [n for n in range(second, len(ops)) if ops[n] is Op.WAIT]
    feed = next(n for n in waits if instrs[n].get("units") == Unit.FEED)
    assert Op.LOADW in ops[second:feed] and Op.LOADW in ops[feed:]


def test_kmajor_out_of_int32_is_refused():
    refusal = CONV.legality(V8, conv(kmajor_out=True))
    assert refusal is not None and "int8 tiles; this output is int32" in refusal.text


def test_features_round_trip_through_json():
    params = conv(N=2, Cin=5, Cout=12, stride=(2, 2), pads=(0, 1, 2, 1), fill=-7,
                  stages=("bias", "requant", "relu"),
                  epilogue=EpilogueParams(mult=123456, shift=20, zp=-3, per_channel=False))
    f = CONV.features(V8, params)
    back = ConvFeatures.from_dict(json.loads(json.dumps(f.to_dict())))
    assert back == f
    assert back.params.stride == (2, 2) and back.params.pads == (0, 1, 2, 1)
    assert back.problem == f.problem and back.macs == f.macs == params.M * params.K * 12


def test_a_32x32_conv_runs_its_rows_in_hardware_loops():
    params = conv(H=32, W=32, Cin=16, Cout=16)
    kernel = compile_kernel(CONV, V8, params)
    ops = [decode(int(w)).op for w in kernel.program]
    geo = ConvGeometry(V8, params)
    assert (geo.steps, geo.bpr) == (32, 4)
    assert Op.BNZD in ops
    # unrolled, every block of every row has a window load per kernel position: 32 x 4 x 9
    assert ops.count(Op.LOADW) * 4 < geo.steps * geo.bpr * params.kh * params.kw
    # and the whole program, unrolled, is many times what runs from the instruction memory
    ctx = build_context(geo, {name: Region(name, 1 << 12, 1) for name in ("x", "b", "out")},
                        column_chunk(geo, False))
    unrolled = instructions(_unroll(ctx["body"]))
    assert len(ops) * 6 < unrolled, (len(ops), unrolled)


def _li(n: int) -> dict:
    return {"kind": "li", "rd": "r1", "imm": n}


def _unroll(items: list[dict]) -> list[dict]:
    out = []
    for it in items:
        if it["kind"] == "loop":
            out += _unroll(it["body"]) * it["count"]
        else:
            out.append(it)
    return out


def test_compress_folds_period_one_repeats():
    a, b, c = [_li(1), _li(2)], [_li(3)], [_li(4)]
    items = compress([b, a, a, a, c], "t")
    assert items[0] == b[0] and items[-1] == c[0] and len(items) == 3
    loop = items[1]
    assert (loop["kind"], loop["counter"], loop["count"], loop["body"]) == (
        "loop", LOOP_REGS[0], 3, a)
    assert _unroll(items) == b + a * 3 + c


def test_compress_folds_period_two_repeats():
    a, b = [_li(1)], [_li(2)]
    items = compress([a, b, a, b, a, b], "t")
    assert len(items) == 1 and items[0]["count"] == 3 and items[0]["body"] == a + b
    assert _unroll(items) == (a + b) * 3


def test_compress_leaves_non_repeats():
    steps = [[_li(n)] for n in range(5)] + [[_li(0)]]
    items = compress(steps, "t")
    assert all(it["kind"] == "li" for it in items)
    assert [it["imm"] for it in items] == [0, 1, 2, 3, 4, 0]


def test_compress_nests_repeated_loops_with_unique_labels():
    # an image: a top row, ten equal middle rows, a bottom row; two images
    image = [[_li(7)]] + [[_li(8)]] * 10 + [[_li(9)]]
    items = compress(image * 2, "t")
    assert len(items) == 1
    outer = items[0]
    assert (outer["counter"], outer["count"]) == (LOOP_REGS[1], 2)
    inner = [it for it in outer["body"] if it["kind"] == "loop"]
    assert len(inner) == 1 and (inner[0]["counter"], inner[0]["count"]) == (LOOP_REGS[0], 10)
    assert outer["label"] != inner[0]["label"]
    assert _unroll(items) == [it for s in image * 2 for it in s]


def test_window_load_model_on_a_case_worked_by_hand():
    mem = np.arange(32, dtype=np.uint8)  # word w holds bytes 4w .. 4w+3
    # lane step 2 from byte 3 spans 3 words: row 0 bytes 4..15 -> lanes at 7, 9, 11, 13;
    # row 1 (2 words on) bytes 12..23 -> 15, 17, 19, 21; lane 2 masked off -> fill
    got = window_load(mem, 4, 4, ext=1, stride=2, next=1, count=2, shift=3, step=2,
                      mask=0b1011, fill=-5)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, [[7, 9, -5, 13], [15, 17, -5, 21]])
    # lane step 1 from byte 0: the word itself; next=3 does not matter for one word
    got = window_load(mem, 4, 4, ext=5, stride=1, next=3, count=2, shift=0, step=1,
                      mask=0b1111, fill=0)
    np.testing.assert_array_equal(got, [[20, 21, 22, 23], [24, 25, 26, 27]])
    # shift 2, step 1 spans two words that are `next` apart: bytes 2, 3 of word 0, then of
    # word 2 (next=2) bytes 8, 9; mask 0 gives all fill (as int8 lanes)
    got = window_load(mem, 4, 4, ext=0, stride=1, next=2, count=1, shift=2, step=1,
                      mask=0b1111, fill=0)
    np.testing.assert_array_equal(got, [[2, 3, 8, 9]])
    got = window_load(mem, 4, 4, ext=0, stride=1, next=1, count=1, shift=0, step=1,
                      mask=0, fill=0x80)
    np.testing.assert_array_equal(got, [[-128] * 4])


def test_blocks_spanning_output_rows_merge_their_window_loads_with_keep():
    # DS-CNN's first layer: 25x5 output pixels, one input channel, 10x4 kernel
    params = ConvParams(N=1, H=49, W=10, Cin=1, Cout=64, kh=10, kw=4, stride=(2, 2),
                        pads=(4, 1, 5, 1))
    assert CONV.legality(V8, params) is None
    geo = ConvGeometry(V8, params)
    assert not geo.whole_rows and geo.period == 5
    instrs = [decode(int(w)) for w in compile_kernel(CONV, V8, params).program]
    loads = [i for i in instrs if i.op is Op.LOADW]
    assert any(i.get("keep") for i in loads) and not all(i.get("keep") for i in loads)
    # one input channel: a kernel column's rows 4 apart (40 pixels, 5 blocks) load together,
    # so fewer loads than blocks x kernel positions even with the row-spanning ones
    assert max(i.get("count") for i in loads) == 3
    assert len(loads) < geo.Mb * params.kh * params.kw
    # the weights follow the A scratchpad's order: a permutation of the (ky, kx, c) rows
    assert sorted(geo.k_order) == list(range(params.K)) and geo.k_order != list(range(params.K))


def test_the_step_size_is_the_fastest_that_fits():
    from fusion.cost.analytical import estimate_program
    from fusion.kernels.conv.program import geometry, program

    params = conv(H=10, W=10, Cin=5, Cout=8)  # output rows of 10 pixels: 5 blocks a period
    dummy = {name: Region(name, 1 << 20, 1) for name in ("x", "b", "bias", "residual", "out")}
    cycles = {d: estimate_program(V8, program(V8, params, dummy, step=d).instrs)
              for d in ConvGeometry(V8, params).step_choices}
    # 1 to 5 blocks, and all 13 in one step (the A scratchpad holds their windows)
    assert sorted(cycles)[-2:] == [5, 13] and len(set(cycles.values())) > 1
    assert cycles[geometry(V8, params).bps] == min(cycles.values())
    with pytest.raises(ValueError, match="steps of a given size"):
        _ = ConvGeometry(V8, params).bps  # not whole rows: the step is a choice


def test_banked_steps_take_whole_rows_several_at_a_time_where_faster():
    """DenseNet's 3x3 of 128 to 32 channels at 8x8 on four banks: steps of two output rows
    (two column blocks a chunk) load fewer operand bytes than steps of one (four column
    blocks, each chunk's weights reloaded every row), and the plan is the fastest of the
    step sizes and k chunks it tries."""
    from fusion.cost.analytical import estimate_program
    from fusion.kernels.conv.program import _dummy_instrs, banked_plan, chunk_loop, schedule

    banked = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, acc_banks=4)
    p = conv(H=8, W=8, Cin=128, Cout=32, stages=("bias", "requant"),
             epilogue=EpilogueParams(per_channel=True))
    bps, tn, part, resident = banked_plan(banked, p)
    geo = geometry(banked, p)
    assert (bps, tn, resident) == (2, 2, False) and geo.whole_rows and geo.bps == 2
    assert geo.steps == 4 and not geo.resident
    assert schedule(geo)[:2] == (2, part)

    def cycles(bps: int, tn: int, part: int) -> int:
        g = ConvGeometry(banked, p, bps)
        return estimate_program(banked, _dummy_instrs(g, tn, part, chunk_loop(g, tn, part)))

    chosen = cycles(bps, tn, part)
    assert chosen < cycles(1, 4, 256) and chosen <= cycles(2, 2, 512)
    assert CONV.features(banked, p).analytical_cycles() == chosen
