"""What the command-line tests share."""


def one_error_line(capsys) -> str:
    """The one ``hwgen: error:`` line a refused command printed on stderr (and nothing else)."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hwgen: error: "), err
    return lines[0]
