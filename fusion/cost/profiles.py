"""The profile database: every measured run of a kernel, in one SQLite file.

Calibration sweeps (``source="calibrate"``) and the runtime (``source="runtime"``) append
:class:`~fusion.cost.data.Row` s; the fusion engine asks :meth:`ProfileDB.measured` for the
cycles of an identical kernel before it asks any model; ``hwgen train`` and the runtime log
each model's error with :meth:`ProfileDB.record_error`; ``hwgen profile DB`` prints
:meth:`ProfileDB.summary`. ``docs/profiles.md`` describes the schema
(:mod:`fusion.cost.profile_records`).

One file, in WAL mode (readers never block the writer), with a busy timeout so that
concurrent writers (a sweep's workers, the runtime) wait for each other instead of failing.
Every run has a ``run_key`` (the sha256 of its features, platform, seed and source) that is
unique: adding a run again is a no-op, which is what makes a sweep resumable. Everything is
stored as JSON, never pickled, and checked when it is read back.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import statistics
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from fusion.cost.data import Row, check_counter
from fusion.cost.data_profile_table import DataProfileTable
from fusion.cost.model import Features, placement_of
from fusion.cost.profile_records import (
    COLUMNS,
    MIGRATIONS,
    PROFILE_KEY,
    ROW_COLUMNS,
    SCHEMA,
    SCHEMA_FORMAT,
    SCHEMA_VERSION,
    check_seed,
    check_source,
    damaged_run,
    decode_row,
    kernel_key,
    load_json,
    now,
    record,
    run_key,
    tool_versions,
)
from hwgen.atomic import write_file
from hwgen.platform import PlatformConfig

#: How long a writer waits for another one's transaction before giving up (ms).
BUSY_TIMEOUT_MS = 60_000

_SQLITE_HEADER = b"SQLite format 3\x00"
_INSERT = (f"INSERT OR IGNORE INTO runs ({', '.join(COLUMNS)}) "
           f"VALUES ({', '.join('?' * len(COLUMNS))})")
_SELECT_ROW = ", ".join(ROW_COLUMNS)


class ProfileDB(DataProfileTable):
    """A profile database: one SQLite file of measured runs (see the module's docstring).

    Parameters
    ----------
    path : str or Path
        The database file. A missing or empty file becomes a new database when ``create``.
    create : bool, optional
        Make a new database if there is none; False (as ``hwgen profile`` does) refuses a
        missing file instead.

    Raises
    ------
    ValueError
        A path that is not a profile database: not a file, not SQLite, a foreign SQLite
        database, or one of another schema version; and a missing file unless ``create``.
    """

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise ValueError(f"{self.path} is not a file; give the profile database's file")
        if not self.path.exists() and not create:
            raise ValueError(f"no profile database at {self.path}; check the path (a sweep "
                             f"or the runtime creates one when it first records a run)")
        if self.path.is_file() and self.path.stat().st_size:
            with self.path.open("rb") as f:
                if f.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                    raise ValueError(f"{self.path} is not a SQLite file, so not a profile "
                                     f"database; give a profile database or a new file name")
        self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000,
                                     isolation_level=None)  # transactions are explicit
        try:
            self._open(create)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise ValueError(f"{self.path} is not a usable SQLite database ({exc}); give a "
                             f"profile database or a new file name") from None
        except BaseException:
            self.close()
            raise

    def _foreign(self) -> ValueError:
        return ValueError(f"{self.path} is a SQLite database but not an hwgen profile "
                          f"database; give a profile database or a new file name")

    def _tables(self) -> set[str]:
        return {name for (name,) in
                self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _open(self, create: bool) -> None:
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # look before touching: a foreign database must leave here unchanged
        tables = self._tables()
        if "meta" in tables:
            self._check_meta()
            c.execute("PRAGMA journal_mode = WAL")  # already so: what this module writes
            return
        if tables or not create:
            raise self._foreign()
        c.execute("PRAGMA journal_mode = WAL")
        with self._write():
            # checked again inside the transaction: another process may have made it since
            if "meta" not in self._tables():
                for statement in SCHEMA:
                    c.execute(statement)
                c.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                              [("format", SCHEMA_FORMAT), ("schema_version",
                                                           str(SCHEMA_VERSION))])
        self._check_meta()

    def _check_meta(self) -> None:
        try:
            meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        except (sqlite3.OperationalError, TypeError, ValueError):
            raise self._foreign() from None
        if meta.get("format") != SCHEMA_FORMAT:
            raise self._foreign()
        if meta.get("schema_version") in {str(v) for v in MIGRATIONS}:
            self._migrate()
        elif meta.get("schema_version") != str(SCHEMA_VERSION):
            raise ValueError(
                f"{self.path} is a profile database of schema version "
                f"{meta.get('schema_version')!r}; this hwgen reads version {SCHEMA_VERSION}: "
                f"export it to JSONL with the hwgen that wrote it (hwgen profile DB --export "
                f"FILE.jsonl) and import that into a new database")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (IMMEDIATE) so that a concurrent writer
        waits at the start, not at a commit it could lose.

        Raises
        ------
        ValueError
            If SQLite refuses the write (a trigger or constraint of the database's own, a
            read-only or full disk, a lock held past the timeout): naming the database and
            the error; nothing of the transaction is kept.
        """
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                with suppress(sqlite3.Error):  # the error may have ended the transaction
                    self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise ValueError(f"cannot write to the profile database {self.path} "
                             f"({type(exc).__name__}: {exc}); nothing of this write was "
                             f"stored: check the database (its triggers and constraints, "
                             f"permissions, free space) or record into another one") from None

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (the file stays consistent whenever this is skipped)."""
        self._conn.close()

    def __enter__(self) -> ProfileDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ----------------------------------------------------------------------------

    #: :func:`fusion.cost.profile_records.run_key`: the key a run is stored under (the sha256
    #: of its features, platform, seed and source), for a sweep to skip what is done.
    run_key = staticmethod(run_key)

    def _insert(self, records: list[tuple]) -> int:
        with self._write() as c:
            before = c.total_changes
            c.executemany(_INSERT, records)
            return c.total_changes - before

    def add(self, rows: Iterable[Row], *, source: str, seed: int | None = None) -> int:
        """Store measured runs, in one transaction; a run already stored is skipped.

        Parameters
        ----------
        rows : iterable of Row
            The runs.
        source : {"calibrate", "runtime"}
            Where they were measured.
        seed : int, optional
            The runs' seed; None takes each row's ``extra["seed"]``, if any. The runtime
            records the same kernel more than once only under distinct seeds (a run counter).

        Returns
        -------
        int
            How many runs were new.

        Raises
        ------
        ValueError
            A bad source or seed, something that is not a Row, or a row whose ``extra`` has
            a ``"profile"`` key.
        """
        check_source(source)
        check_seed(seed)
        versions, created = tool_versions(), now()
        # everything is computed before the transaction, which then only writes
        records = [record(row, source, seed, versions, created) for row in rows]
        return self._insert(records)

    def record_error(self, model: str, variant_key: str, platform_key: str, n: int,
                     mape: float) -> None:
        """Log a model's error on one variant and platform (``hwgen train``, the runtime).

        Parameters
        ----------
        model : str
            The model's name (``"analytical"``, ``"learned"`` ...).
        variant_key, platform_key : str
            Where it was measured.
        n : int
            How many kernels the error is over (at least 1).
        mape : float
            Their mean absolute percentage error, in percent.
        """
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty name, not {model!r}")
        for name, key in (("variant_key", variant_key), ("platform_key", platform_key)):
            if not isinstance(key, str) or not key:
                raise ValueError(f"{name} must be a non-empty key, not {key!r}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be a positive number of kernels, not {n!r}")
        if not isinstance(mape, int | float) or isinstance(mape, bool) or not (
                math.isfinite(mape) and mape >= 0):
            raise ValueError(f"mape must be a finite percentage >= 0, not {mape!r}")
        with self._write() as c:
            c.execute("INSERT INTO model_errors (model, variant_key, platform_key, n, mape, "
                      "created) VALUES (?, ?, ?, ?, ?, ?)",
                      (model, variant_key, platform_key, n, float(mape), now()))

    # -- reading ----------------------------------------------------------------------------

    def _row(self, values: tuple) -> Row:
        return decode_row(values, self.path)

    def rows(self, *, variant_key: str | None = None, platform_key: str | None = None,
             kind: str | None = None, workload: str | None = None,
             ok_only: bool = True, since: int = 0) -> list[Row]:
        """The stored runs matching every filter given, in the order they were added.

        Parameters
        ----------
        variant_key, platform_key, kind, workload : str, optional
            Keep only runs on this variant, on this platform, of this kernel kind, from
            this workload.
        ok_only : bool, optional
            Leave out runs whose output did not match the reference (the default).
        since : int, optional
            Only runs stored with an id above this (:meth:`last_id` at some moment).

        Returns
        -------
        list of Row
        """
        where, args = self._where(variant_key=variant_key, platform_key=platform_key,
                                  kind=kind, workload=workload, ok_only=ok_only)
        if since:
            where, args = f"{where or ' WHERE 1'} AND id > ?", [*args, since]
        records = self._conn.execute(
            f"SELECT {_SELECT_ROW} FROM runs{where} ORDER BY id", args).fetchall()
        return [self._row(r) for r in records]

    @staticmethod
    def _where(*, ok_only: bool, **filters: str | None) -> tuple[str, list[Any]]:
        clauses = [f"{name} = ?" for name, value in filters.items() if value is not None]
        args = [value for value in filters.values() if value is not None]
        if ok_only:
            clauses.append("ok = 1")
        return (f" WHERE {' AND '.join(clauses)}" if clauses else ""), args

    def run_keys(self) -> set[str]:
        """The keys of every stored run (:meth:`run_key`): what a resumed sweep skips."""
        return {key for (key,) in self._conn.execute("SELECT run_key FROM runs")}

    def measured(self, features: Features, platform: PlatformConfig, *,
                 since: int = 0, placement: dict[str, int] | None = None) -> float | None:
        """The measured cycles of an identical kernel on ``platform``: the median over its
        successful runs (any source), or None if it never ran there. The fusion engine
        consults this before any prediction.

        Parameters
        ----------
        since : int
            Only runs stored with an id above this (:meth:`last_id` at some moment): after
            the hardware drifted, the runs from before no longer describe it.
        placement : dict, optional
            Only runs of the kernel at this placement (its regions' addresses, as the
            runtime records them in ``extra["placement"]``). On a DRAM the same kernel at
            another placement shares banks differently and takes up to a few percent more
            or less; at the same placement it repeats to the cycle on unchanged hardware.
            Without it, features that carry a placement
            (:attr:`fusion.cost.model.Features.placement`) take the runs there when there
            are any, else the runs anywhere.
        """
        records = [self._priced(*r) for r in self._conn.execute(
            "SELECT id, cycles, extra_json FROM runs WHERE kernel_key = ? AND variant_key = ? "
            "AND platform_key = ? AND ok = 1 AND cycles IS NOT NULL AND id > ?",
            (kernel_key(features), features.config.key(), platform.key(), int(since)))]
        if placement is not None:
            cycles = [c for c, at in records if at == placement]
        else:
            at_it = placement_of(features)
            cycles = [c for c, at in records if at_it is not None and at == at_it]
            cycles = cycles or [c for c, _ in records]
        return float(statistics.median(cycles)) if cycles else None

    def _priced(self, run_id: int, cycles: Any, extra: Any) -> tuple[int, Any]:
        """A run's cycles and placement as :meth:`measured` prices them, checked first: a
        cycle count of 0 would divide by zero, a negative or huge one be priced."""
        def error(problem: str) -> ValueError:
            return damaged_run(self.path, run_id, problem)

        try:
            check_counter("cycles", cycles)
        except ValueError as exc:
            raise error(str(exc)) from None
        extra = load_json(extra, "extra", "", dict | type(None), error=error)
        return cycles, (extra or {}).get("placement")

    def last_id(self) -> int:
        """The id of the newest run stored (0 for none): a mark for :meth:`measured`'s
        ``since``."""
        return self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0]

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def summary(self) -> dict[str, Any]:
        """What the database holds, as JSON types.

        Returns
        -------
        dict
            ``path``, ``schema_version``, ``runs`` and ``ok`` (counts); ``by_variant`` (with
            each variant's array shape), ``by_platform`` (with its description), ``by_kind``
            and ``by_source`` (lists of ``{..., "runs", "ok"}``); ``model_errors``: the
            latest error of each model on each variant and platform.
        """
        c = self._conn
        runs, ok = c.execute("SELECT COUNT(*), COALESCE(SUM(ok), 0) FROM runs").fetchone()

        def grouped(column: str, sample: str | None = None) -> list[tuple]:
            pick = f", MIN({sample})" if sample else ""
            return c.execute(f"SELECT {column}, COUNT(*), SUM(ok){pick} FROM runs "
                             f"GROUP BY {column} ORDER BY {column}").fetchall()

        by_variant = []
        for key, n, n_ok, variant in grouped("variant_key", "variant_json"):
            v = load_json(variant, "variant", f"{self.path}: variant {key}")
            by_variant.append({"variant_key": key, "array": f"{v.get('rows')}x{v.get('cols')}",
                               "runs": n, "ok": n_ok})
        by_platform = []
        for key, n, n_ok, platform in grouped("platform_key", "platform_json"):
            try:
                described = PlatformConfig.from_dict(load_json(
                    platform, "platform", f"{self.path}: platform {key}")).describe()
            except (TypeError, ValueError):
                described = "(unreadable platform)"
            by_platform.append({"platform_key": key, "platform": described, "runs": n,
                                "ok": n_ok})
        errors = c.execute(
            "SELECT model, variant_key, platform_key, n, mape, created FROM model_errors "
            "WHERE id IN (SELECT MAX(id) FROM model_errors GROUP BY model, variant_key, "
            "platform_key) ORDER BY model, variant_key, platform_key").fetchall()
        return {
            "path": str(self.path), "schema_version": SCHEMA_VERSION, "runs": runs, "ok": ok,
            "by_variant": by_variant, "by_platform": by_platform,
            "by_kind": [{"kind": k, "runs": n, "ok": n_ok} for k, n, n_ok in grouped("kind")],
            "by_source": [{"source": s, "runs": n, "ok": n_ok}
                          for s, n, n_ok in grouped("source")],
            "model_errors": [dict(zip(("model", "variant_key", "platform_key", "n", "mape",
                                       "created"), e, strict=True)) for e in errors],
            "data_profiles": self.data_profile_summary(),
        }

    # -- JSONL interchange -----------------------------------------------------------------

    def export_jsonl(self, path: str | Path) -> int:
        """Write every run (failed ones too) as JSONL: :meth:`Row.to_dict` with the
        database's own fields (source, seed, created, energy_nj, versions) under
        ``"profile"``, so that :func:`fusion.cost.data.read_rows` reads it too.

        The file is written whole (:func:`hwgen.atomic.write_file`): an export that fails
        leaves the old file, never half of one.

        Returns
        -------
        int
            How many runs were written.

        Raises
        ------
        ValueError
            If ``path`` is the database itself or one of its SQLite side files (writing it
            would destroy what is being exported).
        """
        path = Path(path)
        self._check_not_ours(path)
        records = self._conn.execute(
            f"SELECT {_SELECT_ROW}, source, seed, created, energy_nj, versions_json "
            "FROM runs ORDER BY id").fetchall()
        lines = []
        for values in records:
            source, seed, created, energy, versions = values[7:]
            profile = {"source": source, "seed": seed, "created": created,
                       "energy_nj": energy,
                       "versions": load_json(versions, "versions",
                                             f"{self.path}: run {values[0]}")}
            lines.append(json.dumps({**self._row(values[:7]).to_dict(), PROFILE_KEY: profile},
                                    sort_keys=True) + "\n")
        write_file(path, "".join(lines).encode())
        return len(records)

    def _check_not_ours(self, path: Path) -> None:
        """Refuse ``path`` as an export target if it is the database or a side file of it
        (by name, resolved, or the same file under another name: a hard link)."""
        for own in (self.path, *(self.path.with_name(self.path.name + s)
                                 for s in ("-wal", "-shm", "-journal"))):
            same = path.resolve() == own.resolve()
            if not same and path.exists() and own.exists():
                same = os.path.samefile(path, own)
            if same:
                raise ValueError(f"cannot export to {path}: it is the profile database itself"
                                 f"{'' if own == self.path else f' (its {own.name} file)'}; "
                                 f"export to another file (FILE.jsonl)")

    def import_jsonl(self, path: str | Path, *, source: str = "calibrate") -> int:
        """Add the runs of a JSONL file, in one transaction: an :meth:`export_jsonl` file
        (keeping each run's source, seed, creation time and versions) or plain calibration
        rows (:func:`fusion.cost.data.write_rows`), recorded as from ``source``.

        Returns
        -------
        int
            How many runs were new.

        Raises
        ------
        ValueError
            A line that is not a calibration row, naming the file and line.
        """
        check_source(source)
        versions, created = tool_versions(), now()
        records = []
        for n, line in enumerate(Path(path).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                profile = data.pop(PROFILE_KEY, None) or {}
                if not isinstance(profile, dict):
                    raise ValueError(f"its {PROFILE_KEY!r} field is not an object")
                row = Row.from_dict(data)
                run_versions = profile.get("versions")
                records.append(record(
                    row, profile.get("source", source), profile.get("seed"),
                    run_versions if isinstance(run_versions, dict) else versions,
                    str(profile.get("created", created))))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{n}: not a calibration row ({exc})") from None
        return self._insert(records)
