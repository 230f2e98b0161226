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


@pytest.fixture(scope="module")
def model_and_variant(tmp_path_factory):
    from fusion.frontend.json_format import save_json
    from fusion.ir.synthetic import mlp

    d = tmp_path_factory.mktemp("m")
    save_json(mlp(layers=1, width=8, batch=4), d / "mlp.json")
    assert main(["generate", "--rows", "2", "--cols", "2", "--port-bytes", "4",
                 "--spad-a-depth", "512", "--spad-b-depth", "512", "--spad-e-depth", "128",
                 "-o", str(d / "v")]) == 0
    return d / "mlp.json", d / "v"


@pytest.mark.parametrize("sql, problem", [
    (None, None),
    ("UPDATE runs SET cycles = 0", "cycles 0, not a whole number"),
    ("UPDATE runs SET cycles = -5", "cycles -5, not a whole number"),
    ("UPDATE runs SET cycles = 1e308", "cycles 1e+308, not a whole number"),
    ("UPDATE runs SET extra_json = '[1,2]'", "malformed extra field"),
])
def test_compile_explain_with_odd_profiles_names_the_run(model_and_variant, tmp_path, capsys,
                                                         sql, problem):
    from bench.bad_input_stores import profile_db

    graph, variant = model_and_variant
    db = profile_db(graph, variant, tmp_path, sql or "")
    capsys.readouterr()
    status = main(["compile", str(graph), "--variant", str(variant), "--profiles", db,
                   "--explain", "-o", str(tmp_path / "plan")])
    if sql is None:  # the same database unchanged prices by its measured cycles
        assert status == 0
        assert "measured" in capsys.readouterr().err
        return
    assert status == 2
    line = one_error_line(capsys)
    assert "p.db: run 1 has" in line and problem in line and "DELETE FROM runs" in line
    assert not (tmp_path / "plan").exists()
