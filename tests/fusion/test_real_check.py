"""``python -m examples.real_check``: the bundled input out, hwgen's output checked against
the bundled reference output (what ``make demo`` does after running ResNet-8)."""

import numpy as np
import onnx

from examples.real_check import REAL, main, output_scale
from tests.fusion.references import session

NAME = "lenet5_qdq"


def test_input_writes_the_bundled_input(tmp_path):
    assert main(["input", NAME, str(tmp_path / "x.npy")]) == 0
    with np.load(REAL / f"{NAME}.npz") as data:
        np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), data["x"])


def test_output_passes_the_reference_and_fails_two_lsb_off(tmp_path, capsys):
    main(["input", NAME, str(tmp_path / "x.npy")])
    path = REAL / f"{NAME}.onnx"
    (y,) = session(path).run(["y"], {"x": np.load(tmp_path / "x.npy")})
    np.save(tmp_path / "y.npy", y)
    assert main(["output", NAME, str(tmp_path / "y.npy")]) == 0
    assert "10 elements, max |diff| 0 LSB, 100.00% exact: within" in capsys.readouterr().out
    scale = output_scale(onnx.load(str(path)), "y")
    np.save(tmp_path / "y.npy", y + np.float32(2 * scale) * (np.arange(y.size) == 3))
    assert main(["output", NAME, str(tmp_path / "y.npy")]) == 1
    assert "max |diff| 2 LSB, 90.00% exact: OUTSIDE" in capsys.readouterr().out


def test_bad_arguments_are_one_line_and_status_2(tmp_path, capsys):
    assert main(["input", "lenet", str(tmp_path / "x.npy")]) == 2
    assert capsys.readouterr().err.startswith("real_check: no bundled model 'lenet'; the "
                                              "bundled models are ds_cnn_qdq, ")
    np.save(tmp_path / "y.npy", np.zeros((1, 3), np.float32))
    assert main(["output", NAME, str(tmp_path / "y.npy")]) == 2
    assert capsys.readouterr().err == "real_check: shape (1, 3), the reference's (1, 10)\n"
    assert main(["output", NAME, str(tmp_path / "missing.npy")]) == 2
    assert "cannot read" in capsys.readouterr().err
