"""Errors at the command line's edge: every bad option or input is one ``hwgen: error:`` line
and exit status 2, naming the fix."""

from pathlib import Path

import numpy as np
import pytest

from fusion.reference.executor import finite_inputs
from hwgen.cli import main
from tests.helpers.cli import one_error_line

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(("argv", "message", "command"), [
    ([], "the following arguments are required: command", ""),
    (["frobnicate"], "invalid choice: 'frobnicate'", ""),
    (["gemm", "--m", "4"], "the following arguments are required: --variant", "gemm"),
    (["gemm", "--variant", "v", "--m", "nan", "--k", "1", "--n", "1"],
     "argument --m: expected a whole number of at least 1, not 'nan'", "gemm"),
    (["generate", "--rows", "nan", "-o", "x"], "argument --rows: invalid int value", "generate"),
    (["compile", "m.onnx", "--variant", "v", "-o", "p", "--min-gain", "-5"],
     "argument --min-gain: expected a number from 0 to 1", "compile"),
    (["inspect", "m.onnx", "--input-shape", "x=a"], "--input-shape takes NAME=D0", "inspect"),
    (["inspect", "m.onnx", "--frobnicate"], "unrecognized arguments: --frobnicate", "inspect"),
])
def test_a_parse_error_is_one_line_naming_the_help(argv, message, command, capsys):
    # argparse printed its usage block, then "hwgen gemm: error: ...": several lines
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    line = one_error_line(capsys)
    assert message in line
    assert line.endswith(f"(see 'hwgen {command} --help')".replace("  ", " "))


@pytest.fixture(scope="module")
def small_variant_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("variant") / "v2x2"
    assert main(["generate", "--rows", "2", "--cols", "2", "--port-bytes", "4",
                 "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize(("value", "count"), [(np.nan, 3), (np.inf, 1), (-np.inf, 2)])
def test_non_finite_inputs_are_refused_before_the_run(small_variant_dir, tmp_path, monkeypatch,
                                                      capsys, value, count):
    # NaN became the int8 minimum without a word; now it is named, with the way out
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(tmp_path / "sim"))
    x = np.zeros((8, 64), np.float32)
    x.flat[:count] = value
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(EXAMPLES / "qop_mlp.onnx"), "--variant", str(small_variant_dir),
                 "--input", str(tmp_path / "x.npy"), "--cache", str(tmp_path / "c")]) == 2
    line = one_error_line(capsys)
    assert f"input 'x' holds {count} non-finite value" in line and "--saturate-nonfinite" in line
    assert not (tmp_path / "sim").exists()  # refused before anything ran


def test_saturating_maps_nan_to_zero_and_infinities_to_the_ends():
    x = np.array([np.nan, np.inf, -np.inf, 1.5], np.float32)
    got = finite_inputs({"x": x}, saturate=True)["x"]
    big = np.finfo(np.float32).max
    np.testing.assert_array_equal(got, np.array([0.0, big, -big, 1.5], np.float32))
    assert got.dtype == np.float32
    ints = np.arange(3, dtype=np.int8)
    assert finite_inputs({"i": ints}, saturate=False)["i"] is ints  # integers are always finite


def test_a_file_as_the_kernel_cache_is_refused(small_variant_dir, tmp_path, capsys):
    # the cache swallows failed writes, so the compile went on without one, silently
    (tmp_path / "f").write_text("x")
    assert main(["compile", str(EXAMPLES / "qop_mlp.onnx"), "--variant", str(small_variant_dir),
                 "-o", str(tmp_path / "p"), "--cache", str(tmp_path / "f")]) == 2
    assert "is a file, not a folder" in one_error_line(capsys)


def test_a_gemm_bigger_than_external_memory_is_refused_before_its_operands(small_variant_dir,
                                                                           capsys):
    # Was 'out of memory (Unable to allocate 3.64 TiB ...)': the operands were drawn first.
    assert main(["gemm", "--variant", str(small_variant_dir), "--m", str(10**12), "--k", "4",
                 "--n", "4"]) == 2
    line = one_error_line(capsys)
    assert "beyond the" in line and "words of external memory" in line
