"""The profile database (fusion/cost/profiles.py): schema, round trips, resume, concurrent
writers, the measured-profile lookup, refusals, JSONL interchange and ``hwgen profile``.

No simulator: rows are made from real kinds' features with made-up counters.
"""

import json
import multiprocessing
import sqlite3

import pytest

from fusion.cost.data import Row, read_rows
from fusion.cost.profile_records import SCHEMA_VERSION, kernel_key
from fusion.cost.profiles import ProfileDB
from fusion.kernels.eltmax.features import MaxFeatures
from fusion.kernels.epipass.features import PassFeatures
from fusion.kernels.gemm.features import GemmFeatures
from hwgen.cli import main
from hwgen.energy import estimate
from hwgen.perf import COUNTERS
from hwgen.platform import PlatformConfig
from hwgen.presets import DRAM_TEST, SMALL
from hwgen.reference import EpilogueParams

IDEAL = PlatformConfig()
DDR3 = PlatformConfig(memory="ddr3")


def counters(cycles: int) -> dict[str, int]:
    """Every counter, plausible enough for the energy estimate."""
    c = dict.fromkeys(COUNTERS, 0)
    c.update(cycles=cycles, array_busy=cycles // 2, bytes_read=64 * cycles // 10,
             bytes_written=16 * cycles // 10, instret=12)
    return c


def gemm_row(m: int, cycles: int, *, seed: int | None = None, ok: bool = True,
             platform: PlatformConfig = IDEAL, config=SMALL, workload: str = "sweep") -> Row:
    f = GemmFeatures.for_gemm(config, m, 16, 8, stages=("bias",))
    return Row(f, counters(cycles), ok, None if seed is None else {"seed": seed,
                                                                  "sim_seconds": 0.25},
               platform, workload)


def max_row(n: int, cycles: int) -> Row:
    return Row(MaxFeatures(config=SMALL, M=8, N=n, n_inputs=2), counters(cycles), True,
               {"seed": n}, IDEAL, "maxes")


def pass_row(m: int, cycles: int) -> Row:
    f = PassFeatures(config=SMALL, M=m, N=16, stages=("requant", "clamp"),
                     epilogue=EpilogueParams(mult=1 << 22, shift=30, zp=-5, clamp_lo=-60,
                                             clamp_hi=90),
                     src_dtype="int32", out_dtype="int8")
    return Row(f, counters(cycles), True, {"seed": m}, IDEAL, "passes")


def mixed_rows() -> list[Row]:
    return [gemm_row(8, 300, seed=1), gemm_row(12, 410, seed=2, ok=False),
            gemm_row(8, 900, seed=1, platform=DDR3, config=DRAM_TEST), max_row(16, 80),
            pass_row(4, 60)]


def test_schema_and_derived_columns(tmp_path):
    path = tmp_path / "p.db"
    with ProfileDB(path) as db:
        assert db.add(mixed_rows(), source="calibrate") == 5
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    meta = dict(con.execute("SELECT key, value FROM meta"))
    assert meta == {"format": "hwgen-profiles", "schema_version": str(SCHEMA_VERSION)}
    columns = {r[1] for r in con.execute("PRAGMA table_info(runs)")}
    assert {"id", "run_key", "kernel_key", "kind", "variant_key", "platform_key", "workload",
            "source", "seed", "ok", "cycles", "energy_nj", "analytical_cycles",
            "features_json", "variant_json", "platform_json", "counters_json",
            "versions_json", "extra_json", "created"} <= columns
    indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"runs_kernel", "runs_variant", "runs_platform", "runs_kind"} <= indexes
    ddr3 = mixed_rows()[2]
    kind, variant, platform, seed, cycles, energy, analytical, versions, created = con.execute(
        "SELECT kind, variant_key, platform_key, seed, cycles, energy_nj, analytical_cycles, "
        "versions_json, created FROM runs WHERE cycles = 900").fetchone()
    assert (kind, variant, platform, seed, cycles) == ("gemm", DRAM_TEST.key(), DDR3.key(), 1,
                                                       900)
    assert energy == pytest.approx(estimate(ddr3.counters, DRAM_TEST, DDR3).total_nj)
    assert analytical == ddr3.features.analytical_cycles(DDR3)
    assert {"gateware", "python", "numpy", "sklearn"} <= set(json.loads(versions))
    assert created.endswith("+00:00")
    kinds = dict(con.execute("SELECT kind, COUNT(*) FROM runs GROUP BY kind"))
    assert kinds == {"gemm": 3, "max": 1, "pass": 1}
    con.close()


def test_rows_round_trip_and_filters(tmp_path):
    rows = mixed_rows()
    with ProfileDB(tmp_path / "p.db") as db:
        db.add(rows, source="calibrate")
        assert db.rows(ok_only=False) == rows
        assert db.rows() == [r for r in rows if r.ok]
        assert db.rows(kind="max") == [rows[3]]
        assert db.rows(kind="pass") == [rows[4]]
        assert db.rows(platform_key=DDR3.key()) == [rows[2]]
        assert db.rows(variant_key=SMALL.key(), workload="sweep") == [rows[0]]
        assert db.rows(workload="nothing") == []


def test_add_again_is_a_no_op_so_a_sweep_resumes(tmp_path):
    rows = mixed_rows()
    with ProfileDB(tmp_path / "p.db") as db:
        assert db.add(rows[:2], source="calibrate") == 2
        # interrupted: the resumed sweep skips what is stored, by key
        done = db.run_keys()
        assert done == {ProfileDB.run_key(r, "calibrate") for r in rows[:2]}
        todo = [r for r in rows if ProfileDB.run_key(r, "calibrate") not in done]
        assert todo == rows[2:]
        assert db.add(rows, source="calibrate") == 3  # the stored two are ignored
        assert len(db) == 5
        assert db.add(rows, source="calibrate") == 0
        # the same kernel under another seed or source is another run
        assert db.add(rows[:1], source="calibrate", seed=99) == 1
        assert db.add(rows[:1], source="runtime") == 1
        assert len(db) == 7


def _append(path: str, first: int, count: int, start) -> None:
    """A writer process: ``count`` distinct runs, one transaction each."""
    start.wait()
    with ProfileDB(path) as db:
        for m in range(first, first + count):
            assert db.add([gemm_row(m, 100 + m, seed=m)], source="calibrate") == 1


def test_two_processes_appending_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "p.db")
    ProfileDB(path).close()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    n = 60
    writers = [ctx.Process(target=_append, args=(path, 1 + i * n, n, start)) for i in range(2)]
    for w in writers:
        w.start()
    start.set()
    for w in writers:
        w.join(120)
    assert [w.exitcode for w in writers] == [0, 0]
    with ProfileDB(path) as db:
        assert len(db) == 2 * n
        assert sorted(r.features.M for r in db.rows()) == list(range(1, 2 * n + 1))


def test_measured_is_the_median_of_ok_runs_of_the_identical_kernel(tmp_path):
    with ProfileDB(tmp_path / "p.db") as db:
        f = gemm_row(8, 0).features
        assert db.measured(f, IDEAL) is None
        db.add([gemm_row(8, c, seed=s) for s, c in enumerate((300, 100, 200))],
               source="calibrate")
        db.add([gemm_row(8, 5000, seed=7, ok=False)], source="calibrate")  # never counted
        db.add([gemm_row(9, 1, seed=1)], source="calibrate")  # another kernel
        assert db.measured(f, IDEAL) == 200.0
        db.add([gemm_row(8, 250, seed=1)], source="runtime")  # the runtime's runs count
        assert db.measured(f, IDEAL) == 225.0
        assert db.measured(f, DDR3) is None  # never ran there
        other_tiling = GemmFeatures.for_gemm(SMALL, 8, 16, 8, stages=())
        assert kernel_key(other_tiling) != kernel_key(f)
        assert db.measured(other_tiling, IDEAL) is None


def test_measured_at_a_placement_counts_only_runs_there(tmp_path):
    import dataclasses

    here, there = {"a": 0, "b": 4096}, {"a": 64, "b": 4160}
    with ProfileDB(tmp_path / "p.db") as db:
        rows = [gemm_row(8, c, seed=s) for s, c in enumerate((100, 104, 130))]
        rows = [dataclasses.replace(r, extra={**r.extra, "placement": p})
                for r, p in zip(rows, (here, here, there), strict=True)]
        db.add(rows, source="runtime")
        f = rows[0].features
        assert db.measured(f, IDEAL) == 104.0
        assert db.measured(f, IDEAL, placement=here) == 102.0
        assert db.measured(f, IDEAL, placement=there) == 130.0
        assert db.measured(f, IDEAL, placement={"a": 0}) is None
        # features that carry a placement take the runs there, else the runs anywhere
        assert db.measured(f.at(here), IDEAL) == 102.0
        assert db.measured(f.at(there), IDEAL) == 130.0
        assert db.measured(f.at({"a": 128, "b": 4096}), IDEAL) == 104.0


def test_refuses_what_is_not_a_profile_database(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not SQLite\n" * 10)
    with pytest.raises(ValueError, match=r"notes.txt is not a SQLite file, so not a profile "
                                         r"database; give a profile database or a new file"):
        ProfileDB(text)
    assert text.read_text().startswith("hello")

    foreign = tmp_path / "other.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE things (x)")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match=r"other.db is a SQLite database but not an hwgen "
                                         r"profile database"):
        ProfileDB(foreign)
    con = sqlite3.connect(foreign)  # left as it was
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert {r[0] for r in con.execute("SELECT name FROM sqlite_master")} == {"things"}
    con.close()

    with pytest.raises(ValueError, match=r"is not a file"):
        ProfileDB(tmp_path)
    with pytest.raises(ValueError, match=r"no profile database at .*missing.db"):
        ProfileDB(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_refuses_another_schema_version(tmp_path):
    path = tmp_path / "p.db"
    ProfileDB(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match=r"schema version '99'; this hwgen reads version 2: "
                                         r"export it to JSONL"):
        ProfileDB(path)


def _as_version_1(path):
    """Turn the database at ``path`` into what version 1 wrote: no data_profiles table."""
    con = sqlite3.connect(path)
    con.execute("DROP TABLE data_profiles")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.commit()
    con.close()


def test_a_version_1_database_gains_the_data_profiles_table_and_keeps_its_runs(tmp_path):
    path = tmp_path / "p.db"
    with ProfileDB(path) as db:
        db.add([gemm_row(m, 100 * m) for m in (8, 16, 24)], source="calibrate")
    _as_version_1(path)
    with ProfileDB(path, create=False) as db:
        assert len(db) == 3
        assert db.summary()["schema_version"] == 2 and db.summary()["data_profiles"] == []
        profile = {"tensor": "x", "role": "activation", "zero_share": 0.5, "zero_tiles": 0.25}
        assert db.add_data_profiles([profile], model="m", model_key="k", variant_key="v",
                                    run_key="r") == 1
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == \
        ("2",)
    con.close()


def test_data_profiles_are_stored_once_per_run_and_summarized(tmp_path):
    with ProfileDB(tmp_path / "p.db") as db:
        acts = [{"tensor": f"t{i}", "role": "activation", "zero_share": z, "zero_tiles": t}
                for i, (z, t) in enumerate([(0.5, 0.25), (0.1, 0.0)])]
        weight = {"tensor": "w", "role": "weight", "zero_share": 0.75, "zero_tiles": 0.75}
        kw = {"model": "mlp", "model_key": "sig", "variant_key": "v8"}
        assert db.add_data_profiles([*acts, weight], run_key="a", **kw) == 3
        assert db.add_data_profiles([*acts, weight], run_key="a", **kw) == 0  # same input
        assert db.add_data_profiles(acts, run_key="b", **kw) == 2
        (entry,) = db.summary()["data_profiles"]
        assert (entry["runs"], entry["tensors"]) == (2, 3)
        assert entry["activation_zero_share"] == pytest.approx((0.5 + 0.1) / 2)
        assert entry["weight_zero_tiles"] == 0.75
        assert [p["run_key"] for p in db.data_profiles(model_key="sig", variant_key="v8")] \
            == ["a"] * 3 + ["b"] * 2
        with pytest.raises(ValueError, match="needs a tensor and a role"):
            db.add_data_profiles([{"tensor": "x", "role": "bias"}], run_key="c", **kw)


def test_refuses_bad_arguments(tmp_path):
    with ProfileDB(tmp_path / "p.db") as db:
        with pytest.raises(ValueError, match=r"source must be one of calibrate, runtime, "
                                             r"not 'bench'"):
            db.add([gemm_row(8, 1)], source="bench")
        with pytest.raises(ValueError, match=r"seed must be an integer or None, not '3'"):
            db.add([gemm_row(8, 1)], source="runtime", seed="3")
        with pytest.raises(ValueError, match=r"stores fusion.cost.Row objects, not dict"):
            db.add([{"cycles": 3}], source="runtime")
        with pytest.raises(ValueError, match=r"mape must be a finite percentage"):
            db.record_error("learned", SMALL.key(), IDEAL.key(), 10, float("nan"))
        assert len(db) == 0  # a refused batch writes nothing


def test_damaged_fields_are_refused_when_read_back(tmp_path):
    path = tmp_path / "p.db"
    with ProfileDB(path) as db:
        db.add([gemm_row(8, 1, seed=1)], source="calibrate")
    con = sqlite3.connect(path)
    con.execute("UPDATE runs SET counters_json = '[1, 2]'")
    con.commit()
    con.close()
    with ProfileDB(path) as db, pytest.raises(ValueError, match=r"run 1 has a malformed "
                                                                r"counters field"):
        db.rows()


def test_summary_counts_and_latest_model_errors(tmp_path):
    with ProfileDB(tmp_path / "p.db") as db:
        db.add(mixed_rows(), source="calibrate")
        db.add([gemm_row(8, 310, seed=5)], source="runtime")
        db.record_error("learned", SMALL.key(), IDEAL.key(), 40, 3.5)
        db.record_error("learned", SMALL.key(), IDEAL.key(), 50, 1.25)  # the later one wins
        db.record_error("analytical", SMALL.key(), IDEAL.key(), 50, 0.1)
        s = db.summary()
    assert (s["runs"], s["ok"], s["schema_version"]) == (6, 5, SCHEMA_VERSION)
    by_variant = {v["variant_key"]: (v["array"], v["runs"], v["ok"]) for v in s["by_variant"]}
    assert by_variant == {SMALL.key(): ("4x8", 5, 4), DRAM_TEST.key(): ("4x4", 1, 1)}
    by_platform = {p["platform_key"]: (p["platform"], p["runs"]) for p in s["by_platform"]}
    assert by_platform == {IDEAL.key(): ("the ideal memory", 5),
                           DDR3.key(): (DDR3.describe(), 1)}
    assert {k["kind"]: k["runs"] for k in s["by_kind"]} == {"gemm": 4, "max": 1, "pass": 1}
    assert {x["source"]: x["runs"] for x in s["by_source"]} == {"calibrate": 5, "runtime": 1}
    assert [(e["model"], e["n"], e["mape"]) for e in s["model_errors"]] == [
        ("analytical", 50, 0.1), ("learned", 50, 1.25)]


def test_jsonl_export_import_round_trip(tmp_path):
    rows = mixed_rows()
    with ProfileDB(tmp_path / "a.db") as a:
        a.add(rows[:3], source="calibrate")
        a.add(rows[3:], source="runtime", seed=42)
        assert a.export_jsonl(tmp_path / "out.jsonl") == 5
        keys, summary_a = a.run_keys(), a.summary()
        created = a._conn.execute("SELECT created FROM runs ORDER BY id").fetchall()
    # plain calibration tools read the export too (the database's fields sit in extra)
    assert [r.features for r in read_rows(tmp_path / "out.jsonl")] == [r.features for r in rows]
    with ProfileDB(tmp_path / "b.db") as b:
        assert b.import_jsonl(tmp_path / "out.jsonl") == 5
        assert b.import_jsonl(tmp_path / "out.jsonl") == 0  # idempotent like add
        assert b.rows(ok_only=False) == rows
        assert b.run_keys() == keys  # source and seed survived
        assert b._conn.execute("SELECT created FROM runs ORDER BY id").fetchall() == created
        assert {k: v for k, v in b.summary().items() if k != "path"} == {
            k: v for k, v in summary_a.items() if k != "path"}


def test_import_names_a_bad_line(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(gemm_row(8, 1).to_dict()) + "\n[1]\n")
    with ProfileDB(tmp_path / "p.db") as db:
        with pytest.raises(ValueError, match=r"in.jsonl:2: not a calibration row"):
            db.import_jsonl(path)
        assert len(db) == 0  # one transaction: nothing of a bad file is kept


def test_cli_summary_json_and_export(tmp_path, capsys):
    path = tmp_path / "p.db"
    with ProfileDB(path) as db:
        db.add(mixed_rows(), source="calibrate")
        db.record_error("learned", SMALL.key(), IDEAL.key(), 12, 2.5)
    assert main(["profile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "5 runs, 4 ok" in out
    assert "by kind:" in out and "pass" in out and "max" in out
    assert DDR3.describe() in out
    assert "learned" in out and "2.5" in out
    export = tmp_path / "x.jsonl"
    assert main(["profile", str(path), "--json", "--export", str(export)]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["runs"] == 5 and summary["model_errors"][0]["mape"] == 2.5
    assert f"exported 5 runs to {export}" in captured.err
    assert len(export.read_text().splitlines()) == 5


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.db", "no profile database at "),
    (lambda d: (d / "t.txt").write_text("not sqlite") and d / "t.txt",
     "t.txt is not a SQLite file"),
    (lambda d: d, "is not a file"),
])
def test_cli_errors_exit_2_with_one_line(tmp_path, capsys, make, message):
    assert main(["profile", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwgen: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def _edited(tmp_path, sql: str, rows=None):
    """A database of ``rows`` (one gemm run by default), then changed by ``sql``."""
    path = tmp_path / "p.db"
    with ProfileDB(path) as db:
        db.add(rows or [gemm_row(8, 300, seed=1)], source="calibrate")
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    return ProfileDB(path)


def test_a_run_without_extra_is_priced_and_new_runs_store_an_object(tmp_path):
    # older databases stored a row without extra as "null"; it reads as no extra
    with _edited(tmp_path, "UPDATE runs SET extra_json = 'null'") as db:
        assert db.measured(gemm_row(8, 0).features, IDEAL) == 300.0
        assert db.rows()[0].extra is None
        db.add([gemm_row(9, 40)], source="calibrate")
        stored = db._conn.execute("SELECT extra_json FROM runs WHERE id = 2").fetchone()[0]
        assert stored == "{}"
        assert db.rows()[1] == gemm_row(9, 40)


@pytest.mark.parametrize("sql, problem", [
    ("UPDATE runs SET extra_json = '[1,2]'", "malformed extra field"),
    ("UPDATE runs SET extra_json = '7'", "malformed extra field"),
    ("UPDATE runs SET cycles = 0", "counter cycles 0, not a whole number from 1 to"),
    ("UPDATE runs SET cycles = -5", "counter cycles -5, not a whole number from 1 to"),
    ("UPDATE runs SET cycles = 1e308", "counter cycles 1e+308, not a whole number from 1 to"),
    ("UPDATE runs SET cycles = 2.5", "counter cycles 2.5, not a whole number from 1 to"),
    ("UPDATE runs SET cycles = 'abc'", "counter cycles 'abc', not a whole number from 1 to"),
])
def test_odd_runs_are_refused_when_priced_naming_the_run_and_the_fix(tmp_path, sql, problem):
    with _edited(tmp_path, sql) as db, pytest.raises(ValueError) as exc:
        db.measured(gemm_row(8, 0).features, IDEAL)
    message = str(exc.value)
    assert f"p.db: run 1 has {problem}" in message or f"p.db: run 1 has a {problem}" in message
    assert "DELETE FROM runs WHERE id = 1" in message


@pytest.mark.parametrize("counters, problem", [
    ('{"cycles": 0}', "counter cycles 0, not a whole number from 1 to"),
    ('{"cycles": -3}', "counter cycles -3, not a whole number from 1 to"),
    ('{"cycles": 1e308}', "counter cycles 1e+308, not a whole number from 1 to"),
    (f'{{"cycles": {10**30}}}', f"counter cycles {10**30}, not a whole number from 1 to"),
    ('{"cycles": 9, "stall_memory": -1}', "counter stall_memory -1, not a whole number from 0"),
    ('{"cycles": Infinity}', "a malformed counters field"),
])
def test_odd_counters_are_refused_when_read_naming_the_run(tmp_path, counters, problem):
    with _edited(tmp_path, f"UPDATE runs SET counters_json = '{counters}'") as db, \
            pytest.raises(ValueError, match="DELETE FROM runs WHERE id = 1") as exc:
        db.rows()
    assert f"p.db: run 1 has {problem}" in str(exc.value)


NO_MORE_RUNS = ("CREATE TRIGGER full BEFORE INSERT ON {table} "
                "BEGIN SELECT RAISE(ABORT, 'no more runs'); END")


def test_a_write_the_database_refuses_is_a_database_error_naming_it(tmp_path):
    with _edited(tmp_path, NO_MORE_RUNS.format(table="runs")) as db:
        with pytest.raises(ValueError, match=r"cannot write to the profile database "
                                             r".*p.db \(IntegrityError: no more runs\)"):
            db.add([gemm_row(9, 40, seed=2)], source="runtime")
        assert len(db) == 1  # the transaction was rolled back; the database still works
        db._conn.execute(NO_MORE_RUNS.format(table="model_errors").replace("full", "full2"))
        with pytest.raises(ValueError, match=r"cannot write to the profile database"):
            db.record_error("learned", SMALL.key(), IDEAL.key(), 3, 1.0)
        assert db.rows()[0].cycles == 300
