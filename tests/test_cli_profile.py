"""``hwgen profile``: what it refuses to do to a profile database (issue 29's probe)."""

import os
from pathlib import Path

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


NO_MORE_RUNS = ("CREATE TRIGGER full BEFORE INSERT ON runs "
                "BEGIN SELECT RAISE(ABORT, 'no more runs'); END")


def _refusing_db(path):
    import sqlite3

    with ProfileDB(path):
        pass
    con = sqlite3.connect(path)
    con.execute(NO_MORE_RUNS)
    con.commit()
    con.close()
    return path


@pytest.mark.slow
def test_run_db_that_refuses_the_record_is_a_database_error_after_the_outputs(
        variant_dir, tmp_path, capsys):
    """A good run whose record the database refuses (a trigger here) is not a result that
    differs (status 1) nor a traceback: one line naming the database and its error, status
    2, and the run's --output files are written."""
    import numpy as np

    db = _refusing_db(tmp_path / "p.db")
    model = Path(__file__).resolve().parents[1] / "examples" / "qop_mlp.onnx"
    out = tmp_path / "y.npy"
    capsys.readouterr()
    assert main(["run", str(model), "--variant", str(variant_dir), "--db", str(db),
                 "--output", str(out), "--shadow-inputs", "0"]) == 2
    line = one_error_line(capsys)
    assert f"cannot write to the profile database {db} (IntegrityError: no more runs)" in line
    assert "the run itself passed" in line
    assert np.load(out).shape


def test_run_refuses_a_db_that_is_no_database_before_it_simulates(variant_dir, tmp_path,
                                                                  capsys, monkeypatch):
    """A --db that can never take the record is found before minutes of simulation, not
    after them."""
    import fusion.runtime.run

    def simulate(*args, **kwargs):
        raise AssertionError("simulated before the database was checked")

    monkeypatch.setattr(fusion.runtime.run, "run_compiled", simulate)
    db = tmp_path / "notes.db"
    db.write_text("my notes, not a database\n")
    model = Path(__file__).resolve().parents[1] / "examples" / "qop_mlp.onnx"
    capsys.readouterr()
    assert main(["run", str(model), "--variant", str(variant_dir), "--db", str(db)]) == 2
    assert f"{db} is not a SQLite file" in one_error_line(capsys)
    assert db.read_text() == "my notes, not a database\n"


@pytest.mark.slow
def test_calibrate_into_a_db_that_refuses_the_record_is_a_database_error(
        variant_dir, tmp_path, capsys):
    db = _refusing_db(tmp_path / "p.db")
    capsys.readouterr()
    assert main(["calibrate", "--variant", str(variant_dir), "--samples", "2", "--no-models",
                 "--db", str(db), "--quiet"]) == 2
    line = one_error_line(capsys)
    assert f"cannot write to the profile database {db} (IntegrityError: no more runs)" in line
