"""The channel-join kind without the simulator: what it refuses and why, its params'
checks, and the output slices its passes write (the placement of each input's column blocks
in every block row of the output). On Verilator: ``tests/sim/test_concat_kind.py``."""

import numpy as np
import pytest

from fusion.kernels.concat.build import part_dims
from fusion.kernels.concat.kind import CONCAT, UNIT, ConcatParams
from fusion.kernels.epilogue import pass_context
from fusion.kernels.layout import Region
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES
from hwgen.reference import EpilogueParams

V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES)


def join(widths, rescaled=None, **kw):
    rescaled = rescaled or [False] * len(widths)
    return ConcatParams(M=20, widths=tuple(widths),
                        mult=tuple(3 << 28 if r else UNIT[0] for r in rescaled),
                        shift=tuple(UNIT[1] for _ in rescaled),
                        x_zp=tuple(-7 if r else 1 for r in rescaled), zp=1, **kw)


def test_an_input_before_the_last_that_does_not_fill_whole_column_blocks_is_refused():
    refusal = CONCAT.legality(V8, join((12, 16)))
    assert refusal.reason == "unaligned" and refusal.detail("input") == 0
    assert "input 0 of the join has 12 channels, not a multiple of the array's 8 columns" in \
        refusal.text
    assert CONCAT.legality(V8, join((16, 12))) is None  # the last may end inside a block


def test_k_major_needs_a_square_array_and_rescales_need_their_stages():
    wide = VariantConfig(rows=4, cols=8, port_bytes=8, epilogue=ALL_STAGES)
    assert CONCAT.legality(wide, join((8, 8), kmajor_out=True)).reason == "not_square"
    no_bias = VariantConfig(rows=8, cols=8, epilogue=("requant", "relu"))
    assert CONCAT.legality(no_bias, join((8, 8))) is None  # copies run no stage
    refusal = CONCAT.legality(no_bias, join((8, 8), (True, False)))
    assert refusal.reason == "stage_missing" and refusal.detail("stage") == "bias"


def test_a_program_longer_than_the_instruction_memory_is_refused_not_priced():
    tiny = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, imem_depth=40)
    refusal = CONCAT.legality(tiny, join((8, 8, 8)))
    assert refusal.reason == "program"
    assert "needs 47 instructions but the variant's instruction memory holds 40" in refusal.text
    with pytest.raises(ValueError, match="cannot be built"):
        CONCAT.features(tiny, join((8, 8, 8))).analytical_cycles()
    assert CONCAT.legality(V8, join((8, 8, 8))) is None


def test_params_are_checked():
    with pytest.raises(ValueError, match="at least 2 inputs"):
        join((8,))
    with pytest.raises(ValueError, match="x_zp needs one value per input"):
        ConcatParams(M=4, widths=(8, 8), mult=(1, 1), shift=(1, 1), x_zp=(0,), zp=0)
    with pytest.raises(ValueError, match="not an int8 lane value"):
        ConcatParams(M=4, widths=(8, 8), mult=(1, 1), shift=(1, 1), x_zp=(0, 200), zp=0)


def test_a_copy_runs_no_stage_and_a_rescale_subtracts_its_zero_point():
    p = join((8, 8), (False, True))
    assert p.rescaled == (False, True) and p.epilogue_of(0) is None
    assert p.epilogue_of(1) == EpilogueParams(mult=3 << 28, shift=30, zp=1, round_even=True)
    x = np.arange(-128, 128, dtype=np.int8).reshape(32, 8)[:20]
    got = CONCAT.reference(p, {"in0": x, "in1": x})
    np.testing.assert_array_equal(got[:, :8], x)
    # (x + 7) * 0.75 + 1, halves to even, saturated
    want = np.clip(np.round((x.astype(np.int64) + 7) * 0.75) + 1, -128, 127)
    np.testing.assert_array_equal(got[:, 8:], want)


def test_each_pass_writes_its_column_blocks_of_every_block_row():
    """The stores of input 1 (two column blocks at block 1 of 4 per block row), by walking
    the rendered program's store addresses: rows of 4 tiles, starting at tile 1."""
    dims = part_dims(V8, 24, 16)  # 3 block rows of 2 column blocks
    tile = dims.tile_words(1)
    out = Region("out", 1000 + tile, 1 << 16)
    ctx = pass_context(dims, stages=(), params=EpilogueParams(), src=Region("in", 0, 1 << 12),
                       src_dt="i8", out=out, out_dt="i8", out_pitch=4)
    grid, chunk = ctx["grid"], ctx["chunk_tiles"]
    out_reg = next(r for r in grid["regs"] if r["reg"] == grid["ops"]["out"])
    starts = []
    for c in range(ctx["n_outer"] * ctx["n_inner"]):
        base = out.addr + c * ctx["out_step"]
        for o in range(grid["n_outer"]):
            for i in range(grid["n_inner"]):
                starts.append(base + o * (out_reg["adjust"] + grid["n_inner"] *
                                          out_reg["inner"]) + i * out_reg["inner"])
    assert chunk % dims.Nb == 0  # whole block rows
    tiles = sorted((a - 1000) // tile for a in starts)
    per_epipass = grid["rows"] // dims.R
    covered = sorted(t + k for t in tiles for k in range(per_epipass))
    assert covered == [1, 2, 5, 6, 9, 10]
    with pytest.raises(ValueError, match="cannot hold the pass's 2"):
        pass_context(dims, stages=(), params=EpilogueParams(), src=Region("in", 0, 1 << 12),
                     src_dt="i8", out=out, out_dt="i8", out_pitch=1)
