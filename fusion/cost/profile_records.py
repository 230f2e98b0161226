"""How a measured run becomes a row of the profile database, and back.

The schema (:data:`SCHEMA`), the keys a run is found by (:func:`kernel_key`, :func:`run_key`),
the columns derived from a :class:`~fusion.cost.data.Row` (energy, the analytical estimate,
tool versions: :func:`record`) and the checked decoding of what is read back
(:func:`decode_row`). :mod:`fusion.cost.profiles` holds the database itself.
"""

from __future__ import annotations

import hashlib
import json
import platform as python_platform
from datetime import UTC, datetime
from functools import cache
from typing import Any

from fusion.cost.data import Row, check_counters, row_features
from fusion.cost.model import Features
from hwgen.energy import REQUIRED_COUNTERS
from hwgen.energy import estimate as estimate_energy
from hwgen.files import loads_json
from hwgen.platform import PlatformConfig

#: What the ``meta`` table says a profile database is, and the schema this module writes.
SCHEMA_FORMAT = "hwgen-profiles"
SCHEMA_VERSION = 2

#: Where a run came from.
SOURCES = ("calibrate", "runtime")

#: The largest JSON field read back (characters): a row's features and counters are a few
#: hundred; anything near this is not a row of ours.
MAX_JSON_CHARS = 1 << 20

#: The key of the database's own fields in an exported JSONL line (beside Row.to_dict's).
PROFILE_KEY = "profile"

#: Profiles of the data a model's kernels read and wrote on a run (issue 33,
#: :mod:`fusion.runtime.data_profile`), with the model and variant they were measured on;
#: added in schema version 2.
DATA_PROFILES_SCHEMA = (
    """CREATE TABLE data_profiles (
        id INTEGER PRIMARY KEY,
        model TEXT NOT NULL,
        model_key TEXT NOT NULL,
        variant_key TEXT NOT NULL,
        run_key TEXT NOT NULL,
        tensor TEXT NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('weight', 'activation')),
        profile_json TEXT NOT NULL,
        created TEXT NOT NULL,
        UNIQUE (run_key, tensor))""",
    "CREATE INDEX data_profiles_model ON data_profiles (model_key, variant_key)",
)

#: What brings a database of each older schema version to the next one. Every step only adds
#: (tables, indexes), so an older database is brought up to date where it lies, its rows
#: untouched.
MIGRATIONS = {1: DATA_PROFILES_SCHEMA}

#: The tables and indexes of a new database (after which ``meta`` gets the format and
#: version).
SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_key TEXT NOT NULL UNIQUE,
        kernel_key TEXT NOT NULL,
        kind TEXT NOT NULL,
        variant_key TEXT NOT NULL,
        platform_key TEXT NOT NULL,
        workload TEXT NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('calibrate', 'runtime')),
        seed INTEGER,
        ok INTEGER NOT NULL CHECK (ok IN (0, 1)),
        cycles INTEGER,
        energy_nj REAL,
        analytical_cycles INTEGER,
        features_json TEXT NOT NULL,
        variant_json TEXT NOT NULL,
        platform_json TEXT NOT NULL,
        counters_json TEXT NOT NULL,
        versions_json TEXT NOT NULL,
        extra_json TEXT NOT NULL,
        created TEXT NOT NULL)""",
    "CREATE INDEX runs_kernel ON runs (kernel_key, variant_key, platform_key)",
    "CREATE INDEX runs_variant ON runs (variant_key)",
    "CREATE INDEX runs_platform ON runs (platform_key)",
    "CREATE INDEX runs_kind ON runs (kind)",
    """CREATE TABLE model_errors (
        id INTEGER PRIMARY KEY,
        model TEXT NOT NULL,
        variant_key TEXT NOT NULL,
        platform_key TEXT NOT NULL,
        n INTEGER NOT NULL,
        mape REAL NOT NULL,
        created TEXT NOT NULL)""",
    *DATA_PROFILES_SCHEMA,
)

#: The columns :func:`record` fills, in its order.
COLUMNS = ("run_key", "kernel_key", "kind", "variant_key", "platform_key", "workload",
           "source", "seed", "ok", "cycles", "energy_nj", "analytical_cycles",
           "features_json", "variant_json", "platform_json", "counters_json",
           "versions_json", "extra_json", "created")

#: The columns :func:`decode_row` reads, in its order.
ROW_COLUMNS = ("id", "features_json", "platform_json", "counters_json", "ok", "extra_json",
               "workload")


def canonical(data: Any) -> str:
    """Canonical JSON (sorted keys, no spaces): equal data, equal text, equal hash."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _sha256(data: Any) -> str:
    return hashlib.sha256(canonical(data).encode()).hexdigest()


def now() -> str:
    """The current UTC time, ISO 8601 to the second: every ``created`` column."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def kernel_key(features: Features) -> str:
    """The identity of a kernel: the sha256 of its features' canonical JSON, which holds the
    variant's config in full (two runs with one key ran an identical kernel)."""
    return _sha256(features.to_dict())


def check_source(source: Any) -> None:
    """Refuse a source that is not one of :data:`SOURCES`."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")


def check_seed(seed: Any) -> None:
    """Refuse a seed that is neither an integer nor None."""
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"seed must be an integer or None, not {seed!r}")


def effective_seed(row: Row, seed: int | None) -> int | None:
    """``seed`` if given, else the row's ``extra["seed"]`` (what calibration records)."""
    check_seed(seed)
    if seed is not None:
        return seed
    recorded = (row.extra or {}).get("seed")
    return recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None


def run_key(row: Row, source: str, seed: int | None = None) -> str:
    """The key a run is stored under: the sha256 of the canonical JSON of the row's features,
    its platform, the seed (:func:`effective_seed`) and the source.

    Raises
    ------
    ValueError
        A source not in :data:`SOURCES`, or a seed that is not an integer.
    """
    check_source(source)
    return _sha256({"features": row.features.to_dict(), "platform": row.platform.to_dict(),
                    "seed": effective_seed(row, seed), "source": source})


@cache
def _library_versions() -> dict[str, str]:
    from importlib import metadata  # here: only a measured profile records them

    versions = {"python": python_platform.python_version()}
    for name, dist in (("numpy", "numpy"), ("sklearn", "scikit-learn")):
        try:
            versions[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def tool_versions() -> dict[str, str]:
    """The versions a run is recorded with: the gateware sources' digest, Python, numpy and
    scikit-learn (Verilator's comes from the row's ``extra["verilator"]``, when the
    simulator gives it)."""
    # imported here: the digest is all this module needs of the gateware package
    from hwgen.gateware.sources import gateware_digest

    return {"gateware": gateware_digest(), **_library_versions()}


def _energy_nj(row: Row) -> float | None:
    # a failed or partial run may lack counters the estimate needs: no estimate then
    if not all(name in row.counters for name in REQUIRED_COUNTERS):
        return None
    return estimate_energy(row.counters, row.features.config, row.platform).total_nj


def _analytical(row: Row) -> int | None:
    try:
        return int(row.features.analytical_cycles(row.platform))
    except ValueError:
        # a DRAM platform whose port figures are not characterized has no estimate; the run
        # is still a measurement worth keeping
        return None


def record(row: Row, source: str, seed: int | None, versions: dict[str, str],
           created: str) -> tuple:
    """The values of :data:`COLUMNS` for one run.

    Raises
    ------
    ValueError
        Something that is not a Row, a row whose ``extra`` has a :data:`PROFILE_KEY` key, a
        bad source or seed, or counters the energy estimate refuses.
    """
    if not isinstance(row, Row):
        raise ValueError(f"a profile database stores fusion.cost.Row objects, not "
                         f"{type(row).__name__}")
    extra = row.extra or {}
    if PROFILE_KEY in extra:
        raise ValueError(f"a row's extra may not have a {PROFILE_KEY!r} key (an exported line "
                         f"keeps the database's fields there); rename it")
    seed = effective_seed(row, seed)
    check_counters(row.counters)  # what is refused when read back is never stored
    features = row.features.to_dict()
    if isinstance(extra.get("verilator"), str):
        versions = {**versions, "verilator": extra["verilator"]}
    return (run_key(row, source, seed), _sha256(features), row.features.kind,
            row.features.config.key(), row.platform.key(), row.workload, source, seed,
            int(bool(row.ok)), row.counters.get("cycles"), _energy_nj(row), _analytical(row),
            canonical(features), canonical(row.features.config.to_dict()),
            canonical(row.platform.to_dict()), canonical(dict(row.counters)),
            canonical(versions), canonical(row.extra or {}), created)


_REBUILD = ("the database is damaged: rebuild it from an export (hwgen profile DB --export "
            "FILE.jsonl)")


def damaged_run(path: Any, run_id: Any, problem: str) -> ValueError:
    """The error of a run whose stored ``problem`` makes it unusable: naming the database,
    the run and how to drop it (an export would stop at the same run)."""
    return ValueError(f"{path}: run {run_id} has {problem}; the database is damaged: delete "
                      f"that run (sqlite3 {path} 'DELETE FROM runs WHERE id = {run_id}') or "
                      f"record it again")


def load_json(text: Any, what: str, where: str, kind: type = dict, *,
              error: Any = None) -> Any:
    """A JSON field read back from the database, checked for size and type.

    Parameters
    ----------
    error : callable, optional
        ``problem -> ValueError`` for a malformed field (:func:`damaged_run` of a run);
        by default the error names ``where`` and says to rebuild from an export.

    Raises
    ------
    ValueError
        Not text, over :data:`MAX_JSON_CHARS`, not JSON, or not a ``kind``; naming
        ``where`` (the file and run).
    """
    value: Any = ...
    if isinstance(text, str) and len(text) <= MAX_JSON_CHARS:
        try:
            value = loads_json(text)
        except ValueError:  # JSONDecodeError, and NaN or Infinity
            pass
    if not isinstance(value, kind):
        problem = f"a malformed {what} field"
        raise error(problem) if error else ValueError(f"{where} has {problem}; {_REBUILD}")
    return value


def decode_row(values: tuple, path: Any) -> Row:
    """The :class:`Row` of the :data:`ROW_COLUMNS` values of one run of the database at
    ``path``, every field checked (``extra_json`` an object, or ``null`` as databases wrote
    a row without extra before; counters by :func:`fusion.cost.data.check_counters`).

    Raises
    ------
    ValueError
        A malformed field, or features this hwgen cannot read; naming the database and run.
    """
    run_id, features, platform, counters, ok, extra, workload = values
    where = f"{path}: run {run_id}"

    def error(problem: str) -> ValueError:
        return damaged_run(path, run_id, problem)

    features = load_json(features, "features", where, error=error)
    platform = load_json(platform, "platform", where, error=error)
    counters = load_json(counters, "counters", where, error=error)
    extra = load_json(extra, "extra", where, dict | type(None), error=error)
    try:
        counters = check_counters(counters)
    except ValueError as exc:
        raise error(str(exc)) from None
    try:
        return Row(row_features(features, extra), counters, bool(ok), extra or None,
                   PlatformConfig.from_dict(platform), str(workload))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where} cannot be read back ({exc}); re-record it with this "
                         f"hwgen") from None
