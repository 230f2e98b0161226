"""The bad-input campaign's cases of issue 29's probe: profile databases with odd content,
outputs that are someone else's (an export onto its own database, a ``train -o`` folder that
is not a model), files that are not regular files (a FIFO blocks a reader forever), and an
``.npz`` where a ``.npy`` goes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from bench.bad_input_cases import Case, Workspace


def profile_db(ws: Workspace, d: Path, sql: str = "") -> str:
    """A profile database in ``d`` holding a run of every kernel ``hwgen compile`` of the
    base JSON graph prices on the workspace's variant (so that ``--profiles`` reads them),
    then changed by the SQL statement ``sql``."""
    from fusion.compiler.plan import compile_model
    from fusion.cost import AnalyticalModel
    from fusion.cost.data import Row
    from fusion.cost.profiles import ProfileDB
    from fusion.cost.tiered import TieredModel
    from fusion.frontend.json_format import load_json
    from hwgen.gateware.folder import open_variant
    from hwgen.perf import COUNTERS

    variant = open_variant(ws.variant)
    priced: dict[str, object] = {}

    def seen(features):
        priced.setdefault(repr(features), features)

    compile_model(load_json(ws.json), variant.config, platform=variant.platform,
                  model=TieredModel(AnalyticalModel(variant.platform), seen))
    counters = {**dict.fromkeys(COUNTERS, 0), "cycles": 100}
    rows = [Row(f, counters, True, {"seed": i}, variant.platform, "bench")
            for i, f in enumerate(priced.values())]
    path = d / "p.db"
    with ProfileDB(path) as db:
        db.add(rows, source="calibrate")
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
        db = profile_db(ws, d, sql)
        extra = ["--export", target(Path(db))] if target else []
        return ["profile", db, *opts, *extra]
    return argv


def store_cases() -> list[Case]:
    """The cases (names start with ``probe``)."""
    return [
        Case("probe: profile --export onto its database", _profile(target=str),
             "the profile database itself"),
        Case("probe: profile --export onto its database, spelled otherwise",
             _profile(target=lambda db: str(db.parent / "." / db.name)),
             "the profile database itself"),
    ]
