"""Replacing a folder whole (hwgen/atomic.py): what the user put into the target while the
replacement was being written is never deleted."""

import os

import pytest

from hwgen.atomic import contents, replacing


def _old(target):
    target.mkdir()
    (target / "a.txt").write_text("old")
    return contents(target)


def test_a_folder_is_replaced_whole(tmp_path):
    target = tmp_path / "out"
    _old(target)
    with replacing(target, checked=contents(target)) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_cache_folder_is_replaced_whatever_it_holds(tmp_path):
    """A simulator build, say: another process may have built the same folder meanwhile."""
    target = tmp_path / "out"
    _old(target)
    with replacing(target) as tmp:
        (tmp / "b.txt").write_text("new")
        (target / "other.txt").write_text("another process's build")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]


@pytest.mark.parametrize("meddle, what", [
    (lambda t: (t / "mine.txt").write_text("keep me"), "mine.txt was added"),
    (lambda t: (t / "a.txt").write_text("edited, longer"), "a.txt was changed"),
    (lambda t: (t / "a.txt").unlink(), "a.txt was removed"),
    (lambda t: (t / "sub").mkdir() or (t / "sub" / "x").write_text("x"), "sub was added"),
])
def test_a_target_changed_while_its_replacement_was_written_is_kept(tmp_path, meddle, what):
    target = tmp_path / "out"
    checked = _old(target)
    with pytest.raises(ValueError) as exc, replacing(target, checked=checked) as tmp:
        (tmp / "b.txt").write_text("new")
        meddle(target)  # the user, while hwgen works
    message = str(exc.value)
    assert f"{target} changed while hwgen was writing its replacement ({what})" in message
    assert "nothing was replaced" in message
    assert "b.txt" not in os.listdir(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left


def test_the_state_checked_before_the_work_is_the_one_compared(tmp_path):
    """A caller that checked the target long before it replaces it (hwgen compile checks -o,
    then compiles) passes what it saw; a change since then is refused."""
    target = tmp_path / "out"
    checked = _old(target)
    (target / "mine.txt").write_text("put there during the compile")
    with pytest.raises(ValueError, match=r"mine.txt was added"), \
            replacing(target, checked=checked) as tmp:
        (tmp / "b.txt").write_text("new")
    assert (target / "mine.txt").read_text() == "put there during the compile"


def test_a_new_target_created_meanwhile_is_kept(tmp_path):
    target = tmp_path / "out"
    checked = contents(target)  # nothing there
    assert checked == contents(tmp_path / "empty") == frozenset()
    target.mkdir()
    (target / "mine.txt").write_text("x")
    with pytest.raises(ValueError, match=r"mine.txt was added"), \
            replacing(target, checked=checked) as tmp:
        (tmp / "b.txt").write_text("new")
    assert os.listdir(target) == ["mine.txt"]
