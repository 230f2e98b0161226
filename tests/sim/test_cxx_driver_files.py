"""The C++ driver's files (sim.cxx_driver), without a simulator: the job list it is given,
and the results it writes read back, or refused when damaged."""

import numpy as np
import pytest

from sim import cxx_driver
from sim.tb import jobfile
from sim.tb.host_script import COUNTERS

HEADER = {"port_bytes": 4, "imem_depth": 16}


def _spec(name="a", reads=None):
    return jobfile.JobSpec(name=name, program=np.array([1, 2], np.uint64),
                           writes=[(8, np.arange(8, dtype=np.uint8))],
                           reads=reads if reads is not None else {"out": (32, 8)},
                           timeout_cycles=1000)


def _reads_hex(cycles):
    words = [0] * (2 * len(COUNTERS))
    words[2 * list(COUNTERS).index("cycles")] = cycles
    return "\n".join(f"{w:08x}" for w in words) + "\n"


def test_the_job_list_names_each_job_its_limit_and_regions(tmp_path):
    specs = [_spec(), _spec("b", reads={})]
    cxx_driver.write_inputs(tmp_path, HEADER, specs)
    lines = (tmp_path / cxx_driver.JOBS_TXT).read_text().splitlines()
    assert lines[0] == "hwgen-jobs 1"
    assert lines[1].startswith("job 0 1 ") and lines[1].endswith(" 1")
    assert lines[2] == "region 32 33"  # 8 bytes of 4-byte words
    assert lines[3].startswith("job 1 1 ") and lines[3].endswith(" 0")
    # the host scripts: the second writes no program word (the same program is in place)
    first, second = ((tmp_path / f"job{i}.host.hex").read_text() for i in (0, 1))
    assert first.count("\n") > second.count("\n")
    assert int(lines[1].split()[3]) >= 1000 + 4 * first.count("\n")


def test_results_read_back_as_the_testbench_writes_them(tmp_path):
    spec = _spec()
    (tmp_path / "job0.reads.hex").write_text(_reads_hex(1234))
    (tmp_path / "job0.r0.hex").write_text("// dump\n@20\n03020100\n07060504\n")
    (tmp_path / cxx_driver.RESULTS_TXT).write_text("job 0 done 0.5 0.01\nend\n")
    results, error = cxx_driver.read_results(tmp_path, HEADER, [spec])
    assert error is None and len(results) == 1
    assert results[0]["counters"]["cycles"] == 1234 and results[0]["status"] == "done"
    assert results[0]["outputs"]["out"].tolist() == list(range(8))


def test_a_hung_host_is_the_launch_error(tmp_path):
    (tmp_path / cxx_driver.RESULTS_TXT).write_text("hung 0 5000\n")
    results, error = cxx_driver.read_results(tmp_path, HEADER, [_spec()])
    assert results == [] and "within 5000 cycles" in error and "'a'" in error


@pytest.mark.parametrize("text", ["", "job 0 done 0.5 0.01\n", "job 1 done 0.5 0.01\nend\n",
                                  "end\n", "garbage\n"])
def test_damaged_or_incomplete_results_are_refused(tmp_path, text):
    (tmp_path / "job0.reads.hex").write_text(_reads_hex(10))
    (tmp_path / "job0.r0.hex").write_text("03020100\n07060504\n")
    (tmp_path / cxx_driver.RESULTS_TXT).write_text(text)
    with pytest.raises(cxx_driver.DriverError, match="incomplete or damaged"):
        cxx_driver.read_results(tmp_path, HEADER, [_spec()])


def test_no_results_file_is_refused(tmp_path):
    with pytest.raises(cxx_driver.DriverError, match="wrote no results"):
        cxx_driver.read_results(tmp_path, HEADER, [_spec()])


def test_a_dump_of_the_wrong_length_is_refused(tmp_path):
    (tmp_path / "job0.reads.hex").write_text(_reads_hex(10))
    (tmp_path / "job0.r0.hex").write_text("03020100\n")
    (tmp_path / cxx_driver.RESULTS_TXT).write_text("job 0 done 0.5 0.01\nend\n")
    with pytest.raises(RuntimeError, match="wrote 1 words of region 'out', not 2"):
        cxx_driver.read_results(tmp_path, HEADER, [_spec()])
