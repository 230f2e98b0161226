"""Units of simulator jobs across several simulator processes (:mod:`sim.parallel`), on the
copy engine (``tests/helpers/copy_engine.py``): the same results, in the units' order, as one
launch, with a unit's chained memory kept."""

import numpy as np
import pytest

from hwgen.config import VariantConfig
from sim.parallel import deal, run_spread
from sim.run import Job, MemoryImage, run_programs
from tests.helpers.copy_engine import HALT, build_copy_engine, copy

CFG = VariantConfig(port_bytes=8, port_latency=4, mem_addr_bits=14, imem_depth=64)


def test_units_are_dealt_heaviest_first_to_the_least_loaded_process():
    assert deal([10, 1, 1, 1, 9], 2) == [[0, 2], [1, 3, 4]]  # 11 cycles each
    assert deal([5, 5], 4) == [[0], [1]]  # never more processes than units
    assert deal([3], 2) == [[0]]


@pytest.mark.slow
def test_spread_units_give_what_one_launch_gives_in_the_units_order():
    engine = build_copy_engine(CFG)
    rng = np.random.default_rng(4)
    data = [rng.integers(0, 256, 32, np.uint8).tobytes() for _ in range(4)]
    # a chain: the second job reads (keep_memory) what the first one wrote at 200
    chain = [Job([copy(100, 200, 4), HALT], MemoryImage(writes=((100, data[0]),)), "c0"),
             Job([copy(200, 300, 4), HALT], MemoryImage(reads={"out": (300, 32)}), "c1",
                 keep_memory=True)]
    singles = [[Job([copy(100, 200, 4), HALT], MemoryImage(writes=((100, d),),
                                                             reads={"out": (200, 32)}),
                    f"s{i}")] for i, d in enumerate(data[1:])]
    units = [chain, *singles]
    spread = run_spread(CFG, units, [2, 1, 1, 1], 2, build=engine)
    alone = run_programs(CFG, [j for u in units for j in u], build=engine)
    assert [len(p) for p in spread] == [2, 1, 1, 1]
    flat = [r for p in spread for r in p]
    for got, want in zip(flat, alone, strict=True):
        assert got.counters["cycles"] == want.counters["cycles"]
        for name in want.outputs:
            np.testing.assert_array_equal(got.outputs[name], want.outputs[name])
    # the chain's second job copied the first one's output: each word + 2
    first = np.frombuffer(data[0], np.uint64)
    np.testing.assert_array_equal(np.frombuffer(bytes(flat[1].outputs["out"]), np.uint64),
                                  first + 2)
