"""Progress lines (:mod:`fusion.progress`): only on a terminal, never changing what they count."""

import io

from fusion import progress


def test_progress_lines_only_on_a_terminal_and_not_when_turned_off(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not progress.wanted()  # a log or a pipe
    monkeypatch.setattr("sys.stderr", Tty())
    monkeypatch.delenv("HWGEN_NO_PROGRESS", raising=False)
    assert progress.wanted()
    monkeypatch.setenv("HWGEN_NO_PROGRESS", "1")
    assert not progress.wanted()


def test_steps_yield_their_items_with_or_without_a_bar(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert list(progress.steps(range(4), "x", show=False)) == [0, 1, 2, 3]
    assert err.getvalue() == ""
    assert list(progress.steps(range(4), "counting", show=True)) == [0, 1, 2, 3]
    assert "counting" in err.getvalue()
