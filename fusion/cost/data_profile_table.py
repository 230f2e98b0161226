"""The profile database's table of data profiles (issue 33): what a model's kernels read and
wrote on a run, per tensor (:class:`fusion.runtime.data_profile.TensorProfile`), stored with
the model and the variant it ran on by ``hwgen run --profile-data --db FILE`` and summarized
by ``hwgen profile``. A mixin of :class:`fusion.cost.profiles.ProfileDB`, which owns the
connection and its write transactions; the table came with schema version 2, and a version-1
database gains it where it lies (:meth:`DataProfileTable._migrate`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from fusion.cost.profile_records import MIGRATIONS, canonical, load_json, now

#: The fields of a stored profile that :meth:`DataProfileTable.data_profile_summary` averages.
AVERAGED = ("zero_share", "zero_tiles")


class DataProfileTable:
    """The ``data_profiles`` table (see the module docstring)."""

    def _migrate(self) -> None:
        """Bring an older schema up to date (:data:`~fusion.cost.profile_records.MIGRATIONS`:
        additions only), in one transaction that reads the version again."""
        with self._write() as c:
            (version,) = c.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                                   ).fetchone()
            while version.isdigit() and int(version) in MIGRATIONS:
                for statement in MIGRATIONS[int(version)]:
                    c.execute(statement)
                version = str(int(version) + 1)
            c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))

    def add_data_profiles(self, profiles: Sequence[dict[str, Any]], *, model: str,
                          model_key: str, variant_key: str, run_key: str) -> int:
        """Store one run's profiles (:meth:`TensorProfile.to_dict` each), in one transaction;
        a tensor of a run already stored is skipped. Returns how many were stored.

        ``model`` names the model for people, ``model_key`` identifies its compiled graph
        (the plan's signature), ``run_key`` the run (its input's digest): profiles of another
        input are other rows.

        Raises
        ------
        ValueError
            A profile without its tensor or role, or with a role other than ``weight`` and
            ``activation``.
        """
        created, records = now(), []
        for p in profiles:
            if not isinstance(p, dict) or p.get("role") not in ("weight", "activation") \
                    or not isinstance(p.get("tensor"), str):
                raise ValueError(f"a data profile needs a tensor and a role (weight or "
                                 f"activation), not {str(p)[:80]}")
            records.append((model, model_key, variant_key, run_key, p["tensor"], p["role"],
                            canonical(p), created))
        with self._write() as c:
            before = c.total_changes
            c.executemany("INSERT OR IGNORE INTO data_profiles (model, model_key, "
                          "variant_key, run_key, tensor, role, profile_json, created) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", records)
            return c.total_changes - before

    def data_profiles(self, *, model_key: str, variant_key: str) -> list[dict[str, Any]]:
        """Every stored profile of a model on a variant, oldest run first: each its profile
        with ``run_key`` added."""
        rows = self._conn.execute(
            "SELECT run_key, profile_json FROM data_profiles WHERE model_key = ? AND "
            "variant_key = ? ORDER BY id", (model_key, variant_key)).fetchall()
        return [{**load_json(text, "profile", f"{self.path}: data profile of run {run}"),
                 "run_key": run} for run, text in rows]

    def data_profile_summary(self) -> list[dict[str, Any]]:
        """Per model and variant: the runs profiled, the tensors, and the mean zero share and
        all-zero tile share of their activations and of their weights."""
        out = []
        groups = self._conn.execute(
            "SELECT model, model_key, variant_key, COUNT(DISTINCT run_key) FROM data_profiles "
            "GROUP BY model_key, variant_key ORDER BY model, variant_key").fetchall()
        for model, model_key, variant_key, runs in groups:
            entry = {"model": model, "model_key": model_key, "variant_key": variant_key,
                     "runs": runs}
            profiles = self.data_profiles(model_key=model_key, variant_key=variant_key)
            entry["tensors"] = len({p.get("tensor") for p in profiles})
            for role in ("activation", "weight"):
                mine = [p for p in profiles if p.get("role") == role]
                for field in AVERAGED:
                    values = [p[field] for p in mine if isinstance(p.get(field), int | float)]
                    entry[f"{role}_{field}"] = (round(sum(values) / len(values), 4)
                                                if values else None)
            out.append(entry)
        return out


def input_key(inputs: dict[str, Any]) -> str:
    """A run's key for its data profiles: the digest of its inputs' bytes, shapes and dtypes
    (the same input profiled twice is one run)."""
    h = hashlib.sha256()
    for name in sorted(inputs):
        x = np.ascontiguousarray(inputs[name])
        h.update(json.dumps([name, list(x.shape), str(x.dtype)]).encode())
        h.update(x.tobytes())
    return h.hexdigest()[:16]
