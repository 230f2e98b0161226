"""Errors at the command line's edge: every bad option or input is one ``hwgen: error:`` line
and exit status 2, naming the fix."""

import pytest

from hwgen.cli import main


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hwgen: error: "), err
    return lines[0]


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
