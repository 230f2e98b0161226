"""The accelerator on LiteDRAM (DDR3 and SDR) in Verilator: bit-exact GEMMs and models, the
memory counters, and the cost of a row-conflicting access pattern.

One build per platform for the session (:data:`hwgen.presets.DRAM_TEST`); the ideal memory's
build of the same variant is the comparison.
"""

import numpy as np
import pytest

from examples.build_models import MODELS, sample_input
from fusion.compiler.plan import compile_model
from fusion.frontend import import_onnx
from fusion.kernels.cache import KernelCache
from fusion.kernels.tiling import Tiling
from fusion.reference import executor
from fusion.runtime.run import run_compiled
from hwgen.asm import assemble
from hwgen.platform import PlatformConfig
from hwgen.presets import DRAM_TEST
from sim.gemm_check import GemmCase, run_gemms
from sim.run import Job, MemoryImage, run_programs
from tests.sim.test_models import EXAMPLES

pytestmark = pytest.mark.slow

PLATFORMS = {"ideal": PlatformConfig(), "ddr3": PlatformConfig(memory="ddr3"),
             "sdr": PlatformConfig(memory="sdr")}


@pytest.fixture(scope="session", params=["ddr3", "sdr"])
def dram(request):
    from sim.build import build_variant

    return build_variant(DRAM_TEST, platform=PLATFORMS[request.param])


@pytest.fixture(scope="session")
def ideal():
    from sim.build import build_variant

    return build_variant(DRAM_TEST)


CASES = [
    GemmCase(M=16, K=32, N=16, stages=("bias", "requant", "relu"), seed=1),
    GemmCase(M=37, K=53, N=29, stages=("bias", "requant"), seed=2),
    GemmCase(M=24, K=64, N=40, stages=("bias", "requant", "relu"), fused=False, seed=3),
    GemmCase(M=64, K=48, N=8, stages=(), seed=4, tiling=Tiling(tm=2, tn=1, order="nm")),
    GemmCase(M=3, K=256, N=20, stages=("bias", "requant", "relu"), seed=5,
             tiling=Tiling(stream=4)),
]


def test_gemms_are_bit_exact_and_count_the_memory(dram, ideal):
    on_dram = run_gemms(DRAM_TEST, CASES, build=dram)
    on_ideal = run_gemms(DRAM_TEST, CASES, build=ideal)
    for d, i in zip(on_dram, on_ideal, strict=True):
        assert d.ok, d.summary()
        assert i.ok, i.summary()
        np.testing.assert_array_equal(d.got, i.got)
        # the same program moves the same bytes; DRAM is slower, never faster
        for name in ("bytes_read", "bytes_written", "array_busy", "instret"):
            assert d.counters[name] == i.counters[name], name
        assert d.cycles > i.cycles
        c = d.counters
        reads = c["bytes_read"] // DRAM_TEST.port_bytes
        assert c["read_latency_max"] > DRAM_TEST.port_latency
        assert reads * DRAM_TEST.port_latency < c["read_latency_sum"] <= reads * c[
            "read_latency_max"]
        assert c["row_activates"] > 0
        # the ideal memory: every read exactly port_latency, never refused, no DRAM events
        c = i.counters
        reads = c["bytes_read"] // DRAM_TEST.port_bytes
        assert c["read_latency_sum"] == reads * DRAM_TEST.port_latency
        assert c["read_latency_max"] == DRAM_TEST.port_latency
        assert c["mem_refused"] == c["refresh_stall"] == c["row_activates"] == 0
        d_json = d.to_dict()
        assert d_json["memory"]["row_activates"] == d.counters["row_activates"]
        assert d_json["energy_nj"] > i.to_dict()["energy_nj"] > 0


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_example_models_are_bit_exact_on_dram(name, fusion, dram, tmp_path):
    compiled = compile_model(import_onnx(EXAMPLES / f"{name}.onnx"), DRAM_TEST,
                             cache=KernelCache(tmp_path), fusion=fusion)
    x = sample_input(name, 1)
    report = run_compiled(compiled, {"x": x}, build=dram, shadow_inputs=1)
    out = compiled.graph.outputs[0]
    np.testing.assert_array_equal(report.outputs[out], executor.run(compiled.graph,
                                                                    {"x": x})[out])
    summary = report.to_dict()
    assert summary["energy_nj"] > 0
    assert all(k["memory"]["read_latency_max"] > 0 for k in summary["kernels"])


def _row_stride(platform: PlatformConfig) -> int:
    """Port words from one DRAM row of a bank to the next row of the same bank."""
    from sim.memory import board_memory

    layout = board_memory(DRAM_TEST, platform).layout
    return layout["words_per_row"] * layout["banks"] // layout["ratio"]


def _load_program(count: int, length: int, stride: int) -> list[int]:
    # E32 rows are one 16-byte word each: the load engine requests a word a cycle
    return assemble(f"""
        li rd=r1, imm=0
        li rd=r2, imm=0
        li rd=r3, imm={stride}
        load dst=e32, ext=r1, spad=r2, stride=r3, count={count}, len={length}
        wait units=1
        halt
    """)


@pytest.mark.parametrize(("name", "slower"), [("ddr3", 3.0), ("sdr", 1.2)])
def test_a_row_conflicting_load_takes_longer_than_a_sequential_one(name, slower, ideal):
    """64 words to one bank, each in a new row, against the same 64 words' bytes read in
    order: on DRAM each new row is an activation (and a precharge), on the ideal memory the
    address does not matter. DDR3 reads a 16-byte word a cycle from an open row, so a row
    change costs several times a read; SDR moves a 16-byte word as eight 16-bit reads
    anyway, so the same conflicts add less (figures in docs/memory.md)."""
    from sim.build import build_variant

    platform = PLATFORMS[name]
    build = build_variant(DRAM_TEST, platform=platform)
    stride = _row_stride(platform)
    words = 64
    assert (words - 1) * stride < DRAM_TEST.mem_words
    image = MemoryImage(writes=(), reads={})
    jobs = [Job(program=_load_program(1, words, 1), memory=image, name="sequential"),
            Job(program=_load_program(words, 1, stride), memory=image, name="row conflict")]
    seq, conflict = run_programs(DRAM_TEST, jobs, build=build)
    assert seq.counters["bytes_read"] == conflict.counters["bytes_read"] == 16 * words
    assert conflict.counters["row_activates"] >= words
    assert seq.counters["row_activates"] <= 2
    assert conflict.cycles > slower * seq.cycles, (seq.cycles, conflict.cycles)
    flat_seq, flat_conflict = run_programs(DRAM_TEST, jobs, build=ideal)
    assert flat_seq.cycles == flat_conflict.cycles


def test_a_board_switches_to_hot_refresh_between_launches_unannounced():
    """The runtime runs the same program through one board; after two launches the board
    turns hot (tREFI halved) without the caller doing anything: the refresh stalls double and
    the cycles rise, and the board's history says when it happened."""
    from sim.board import Board

    normal, hot = PLATFORMS["ddr3"], PlatformConfig(memory="ddr3", refresh="hot")
    board = Board(DRAM_TEST, normal)
    board.switch_after(2, hot)
    # 32 loads of 250 sequential words: about 8,000 cycles and ten refreshes, so that where
    # the first refresh falls (the host's program load before start moves it) hardly moves
    # the ratio
    job = Job(program=_load_program(32, 250, 256), memory=MemoryImage(writes=(), reads={}),
              name="stream")
    runs = [run_programs(DRAM_TEST, [job], build=board)[0] for _ in range(4)]
    assert board.history == [(0, normal.key()), (2, hot.key())]
    cold, warm = runs[:2], runs[2:]
    assert cold[0].counters == cold[1].counters and warm[0].counters == warm[1].counters
    stall_cold, stall_hot = cold[0].counters["refresh_stall"], warm[0].counters["refresh_stall"]
    assert stall_cold > 0 and 1.5 * stall_cold <= stall_hot <= 2.5 * stall_cold
    assert warm[0].cycles > cold[0].cycles
    with pytest.raises(ValueError, match="0 or more"):
        board.switch_after(-1, hot)


REAL_MODELS = ("resnet8_qdq", "ds_cnn_qdq", "mobilenet_v1_025_qdq", "fc_autoencoder_qdq",
               "lenet5_qdq")


@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_models_are_bit_exact_on_dram(name, dram):
    """The MLPerf Tiny models and LeNet: every kernel shadow-checked against the reference
    executor on the DRAM (run_compiled stops at the first difference), the output equal to
    the executor's. On the model's own values alone: the directed sets (the epilogue's edge
    cases, data the memory carries like any other) would triple the simulated cycles, and
    run on the ideal memory (tests/sim/test_window_unit_models.py)."""
    from examples.real_check import REAL
    from fusion.frontend.load import load_model

    compiled = compile_model(load_model(REAL / f"{name}.onnx"), DRAM_TEST,
                             cache=KernelCache(disk=False))
    with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
        x = data["x"]
    report = run_compiled(compiled, {"x": x}, build=dram, shadow_inputs=0)
    np.testing.assert_array_equal(report.outputs["y"],
                                  executor.run(compiled.graph, {"x": x})["y"])
    assert sum(k.counters["row_activates"] for k in report.kernels) > 0
