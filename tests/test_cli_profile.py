"""``hwgen profile``: what it refuses to do to a profile database (issue 29's probe)."""

import os

import pytest

from fusion.cost.profiles import ProfileDB
from hwgen.cli import main
from tests.fusion.cost.test_profiles import mixed_rows
from tests.helpers.cli import one_error_line


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "p.db"
    with ProfileDB(path) as d:
        d.add(mixed_rows(), source="calibrate")
    return path


@pytest.mark.parametrize("target", [
    lambda p: p,  # the same path
    lambda p: p.parent / "." / p.name,  # another spelling of it
    lambda p: os.link(p, p.parent / "hard.db") or p.parent / "hard.db",  # the same file
])
def test_export_onto_the_database_itself_is_refused_and_the_database_kept(
        db, capsys, target):
    before = db.read_bytes()
    assert main(["profile", str(db), "--export", str(target(db))]) == 2
    line = one_error_line(capsys)
    assert "is the profile database itself" in line and "another file" in line
    assert db.read_bytes() == before
    with ProfileDB(db, create=False) as d:
        assert len(d) == 5
