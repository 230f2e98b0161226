"""The bad-input campaign's cases of issue 29's probe: profile databases with odd content,
outputs that are someone else's (an export onto its own database, a ``train -o`` folder that
is not a model), files that are not regular files (a FIFO blocks a reader forever), and an
``.npz`` where a ``.npy`` goes."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.bad_input_cases import VARIANT, Case, Workspace, write


def profile_db(graph: Path, variant: Path, d: Path, sql: str = "") -> str:
    """A profile database in ``d`` holding a run (100 cycles) of every kernel ``hwgen
    compile`` of the JSON graph ``graph`` prices on the ``variant`` folder (so that
    ``--profiles`` reads them), then changed by the SQL statement ``sql``."""
    from fusion.compiler.plan import compile_model
    from fusion.cost import AnalyticalModel
    from fusion.cost.data import Row
    from fusion.cost.profiles import ProfileDB
    from fusion.cost.tiered import TieredModel
    from fusion.frontend.json_format import load_json
    from hwgen.gateware.folder import open_variant
    from hwgen.perf import COUNTERS

    found = open_variant(variant)
    priced: dict[str, object] = {}

    def seen(features: object) -> None:
        priced.setdefault(repr(features), features)

    compile_model(load_json(graph), found.config, platform=found.platform,
                  model=TieredModel(AnalyticalModel(found.platform), seen))
    counters = {**dict.fromkeys(COUNTERS, 0), "cycles": 100}
    path = d / "p.db"
    with ProfileDB(path) as db:
        db.add([Row(f, counters, True, {"seed": i}, found.platform, "bench")
                for i, f in enumerate(priced.values())], source="calibrate")
    if sql:
        con = sqlite3.connect(path)
        con.execute(sql)
        con.commit()
        con.close()
    return str(path)


def _profile(*opts: str, sql: str = "", target: Callable[[Path], str] | None = None
             ) -> Callable[[Workspace, Path], list[str]]:
    """``hwgen profile`` of a database changed by ``sql``."""
    def argv(ws: Workspace, d: Path) -> list[str]:
        db = profile_db(ws.json, ws.variant, d, sql)
        extra = ["--export", target(Path(db))] if target else []
        return ["profile", db, *opts, *extra]
    return argv


def _compile_with(sql: str) -> Callable[[Workspace, Path], list[str]]:
    """``hwgen compile --explain --profiles`` of a database changed by ``sql``."""
    def argv(ws: Workspace, d: Path) -> list[str]:
        return ["compile", str(ws.json), "--variant", str(ws.variant), "--explain",
                "--profiles", profile_db(ws.json, ws.variant, d, sql), "-o", str(d / "plan")]
    return argv


def _train_on(sql: str) -> Callable[[Workspace, Path], list[str]]:
    """``hwgen train`` on a database changed by ``sql`` (read before any fit)."""
    return lambda ws, d: ["train", profile_db(ws.json, ws.variant, d, sql), "-o",
                          str(d / "model")]


#: Runs as the probe changed them: what each is refused for.
ODD_RUNS = [
    ("cycles 0", "UPDATE runs SET cycles = 0", "run 1 has counter cycles 0"),
    ("cycles -5", "UPDATE runs SET cycles = -5", "run 1 has counter cycles -5"),
    ("cycles 1e308", "UPDATE runs SET cycles = 1e308", "run 1 has counter cycles 1e\\+308"),
    ("extra_json [1,2]", "UPDATE runs SET extra_json = '[1,2]'", "run 1 has a malformed extra"),
    ("counters cycles 0", "UPDATE runs SET counters_json = '{\"cycles\": 0}'",
     "run 1 has counter cycles 0"),
    ("counters cycles Infinity", "UPDATE runs SET counters_json = '{\"cycles\": Infinity}'",
     "run 1 has a malformed counters"),
]


def _train_into(fill: Callable[[Workspace, Path], Path]) -> Callable[[Workspace, Path], list[str]]:
    """``hwgen train -o`` a folder ``fill`` makes (refused before any fit)."""
    def argv(ws: Workspace, d: Path) -> list[str]:
        return ["train", profile_db(ws.json, ws.variant, d), "-o", str(fill(ws, d))]
    return argv


def _users_rows(ws: Workspace, d: Path) -> Path:
    (d / "mine").mkdir()
    (d / "mine" / "rows.jsonl").write_text("my own rows\n")
    return d / "mine"


def _fifo(path: Path) -> str:
    """A FIFO at ``path``: nobody ever writes it, so a reader that opens it waits forever
    (the case runs in a child process, whose timeout makes such a hang ``wrong``)."""
    os.mkfifo(path)
    return str(path)


def _plan_with_fifo(ws: Workspace, d: Path) -> list[str]:
    plan = ws.plan_copy(d, lambda p: (p / "plan.json").unlink())
    return ["run", "--plan", plan, "--variant", str(ws.variant)]


def _plan_with_fifo_kernel(ws: Workspace, d: Path) -> list[str]:
    plan = ws.plan_copy(d, lambda p: _fifo_entries(sorted((p / "kernels").glob("*.bin"))[:1]))
    return ["run", "--plan", plan, "--variant", str(ws.variant)]


def _variant_with_fifo(ws: Workspace, d: Path) -> str:
    return ws.variant_copy(d, lambda f: (f / "variant.json").unlink() or _fifo(
        f / "variant.json"))


#: Readers given a FIFO: the command line, and the FIFO's name in the folder ``d``.
FIFO_READERS: list[tuple[str, Callable[[Workspace, Path], list[str]], str]] = [
    ("a plan's plan.json", lambda ws, d: _plan_with_fifo(ws, d), "plan/plan.json"),
    ("a plan's kernel file", _plan_with_fifo_kernel, ""),
    ("the MODEL of a plan", lambda ws, d: ["run", str(d / "m.onnx"), "--plan", ws.plan,
                                           "--variant", str(ws.variant)], "m.onnx"),
    ("report's input", lambda ws, d: ["report", str(d / "run.json"), "-o", str(d / "r.html")],
     "run.json"),
    ("--input", lambda ws, d: ["run", str(ws.onnx), "--variant", str(ws.variant), "--input",
                               str(d / "x.npy")], "x.npy"),
    ("generate --config", lambda ws, d: ["generate", "--config", str(d / "c.json"), "-o",
                                         str(d / "v")], "c.json"),
    ("a variant's variant.json", lambda ws, d: [
        "gemm", "--variant", _variant_with_fifo(ws, d), "--m", "4", "--k", "8", "--n", "4"],
     ""),
    ("train's rows", lambda ws, d: ["train", str(d / "rows.jsonl"), "-o", str(d / "m")],
     "rows.jsonl"),
    ("a model", lambda ws, d: ["inspect", str(d / "m.onnx")], "m.onnx"),
    ("a workload", lambda ws, d: ["run", "--variants", str(d), "--workload",
                                  str(d / "w.json")], "w.json"),
    ("compile --profiles", lambda ws, d: [
        "compile", str(ws.json), "--variant", str(ws.variant), "--profiles", str(d / "p.db"),
        "-o", str(d / "plan")], "p.db"),
    ("calibrate --candidates-of", lambda ws, d: [
        "calibrate", "--variant", str(ws.variant), "--candidates-of", str(d / "m.onnx"),
        "--db", str(d / "p.db")], "m.onnx"),
    ("a variant library's index", lambda ws, d: [
        "run", "--variants", str(d), "--workload", write(d / "w.json", json.dumps(
            {"phases": [{"model": str(ws.onnx)}]}))], "library.json"),
]


def _fifo_entries(files: list[Path]) -> None:
    for f in files:
        f.unlink()
        _fifo(f)


def _with_fifo(argv: Callable[[Workspace, Path], list[str]], name: str
               ) -> Callable[[Workspace, Path], list[str]]:
    def make(ws: Workspace, d: Path) -> list[str]:
        line = argv(ws, d)
        if name:
            _fifo(d / name)
        return line
    return make


def _npz(ws: Workspace, d: Path) -> str:
    np.savez(d / "x.npz", x=np.zeros((8, 64), np.float32))
    return str(d / "x.npz")


#: A trigger that aborts every insert: the database refuses the record of a good run.
NO_MORE_RUNS = ("CREATE TRIGGER full BEFORE INSERT ON runs "
                "BEGIN SELECT RAISE(ABORT, 'no more runs'); END")


def _refusing_db(ws: Workspace, d: Path) -> str:
    return profile_db(ws.json, ws.variant, d, NO_MORE_RUNS)


def store_cases() -> list[Case]:
    """The cases: names start with ``store`` (profile databases, output folders), ``sim
    store`` (those that simulate), ``fifo`` (in a child process) or ``--input``."""
    out = [
        Case("store: profile --export onto its database", _profile(target=str),
             "the profile database itself"),
        Case("store: profile --export onto its database, spelled otherwise",
             _profile(target=lambda db: str(db.parent / "." / db.name)),
             "the profile database itself"),
    ]
    out += [Case(f"store: compile --profiles, a run's {name}", _compile_with(sql), match)
            for name, sql, match in ODD_RUNS[:4]]
    out += [Case(f"store: train on a database, a run's {name}", _train_on(sql), match)
            for name, sql, match in ODD_RUNS[3:]]
    out += [
        Case("store: train -o a folder holding the user's rows.jsonl", _train_into(_users_rows),
             "not a learned model folder"),
        Case("store: train -o a variant folder", _train_into(lambda ws, d: ws.variant),
             "not a learned model folder"),
        Case("store: train -o a file", _train_into(lambda ws, d: Path(ws.x)), "is a file"),
        Case("store: generate -o a variant folder holding the user's file", lambda ws, d: [
            "generate", *VARIANT, "-o",
            ws.variant_copy(d, lambda f: write(f / "notes.txt", "mine\n"))],
             "which hwgen did not write"),
        Case("--input an .npz archive", lambda ws, d: [
            "run", str(ws.onnx), "--variant", str(ws.variant), "--input", _npz(ws, d)],
            "is an .npz archive \\(of x\\), not one array"),
    ]
    out += [
        Case("sim store: run --db whose trigger refuses the record", lambda ws, d: [
            "run", str(ws.json), "--variant", str(ws.variant), "--db", _refusing_db(ws, d),
            "--output", str(d / "y.npy")], "profile database .*no more runs.*run itself "
                                           "passed and its --output files are written"),
        Case("sim store: calibrate --db whose trigger refuses the record", lambda ws, d: [
            "calibrate", "--variant", str(ws.variant), "--samples", "1", "--no-models",
            "--quiet", "--db", _refusing_db(ws, d)], "profile database .*no more runs"),
    ]
    out += [Case(f"fifo: {what}", _with_fifo(argv, name), "is a FIFO", process=True)
            for what, argv, name in FIFO_READERS]
    out.append(Case("fifo: kernel cache entries (rebuilt)", lambda ws, d: [
        "compile", str(ws.json), "--variant", str(ws.variant), "-o", str(d / "p"), "--cache",
        ws.cache_copy(d, _fifo_entries)], heal=True, process=True))
    return out
