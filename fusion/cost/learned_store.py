"""A learned cost model on disk, without pickle.

A saved model (:func:`save`) is a folder:

- ``rows.jsonl``: the training rows, which define the model with its specs and seed;
- ``model.json``: the chosen specs by memory, the seed, the scikit-learn version, the SHA-256
  of ``rows.jsonl`` and of ``heads.skops``, each head's feature columns, the bound platform,
  the cross-validation scores, and the predictions of a few rows (the probes);
- ``heads.skops``: the fitted regressors, written with ``skops`` (no pickle), read back only
  with :data:`TRUSTED` types allowed beyond those ``skops`` trusts by itself.

:func:`load` reads the fitted regressors when ``heads.skops`` is there and was written by
this scikit-learn; otherwise it refits from the rows (deterministic with the seed: a minute
on thousands of rows, where reading takes a fraction of a second). Either way the probes must
come out as recorded, or the model is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from fusion.cost.learned import Head, LearnedModel, Spec
from hwgen.atomic import contents, replacing
from hwgen.files import check_regular, loads_json, read_bytes
from hwgen.platform import PlatformConfig

#: Format tag and version of a saved model's ``model.json``.
MODEL_FORMAT = "hwgen-learned"
MODEL_VERSION = 3  # 2: heads per memory; 3: heads.skops and their columns

#: Relative difference a reloaded model's predictions may have from the recorded ones.
PROBE_TOLERANCE = 1e-9

#: Rows whose predictions :func:`save` records, at most.
PROBES = 8

#: Types ``heads.skops`` may hold beyond those ``skops`` trusts by itself: the trees inside
#: a random forest and a histogram gradient boosting regressor (measured: what
#: ``skops.io.get_untrusted_types`` lists for every spec of the grid).
TRUSTED = ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
           "sklearn.tree._tree.Tree")

HEADS = "heads.skops"
META = "model.json"
ROWS = "rows.jsonl"
#: What a saved model's folder holds; any other entry makes a folder "not a model" to
#: :func:`save`, which replaces only a model folder.
MEMBERS = frozenset({META, ROWS, HEADS})
#: A ``model.json`` larger than this is no model's (a few KiB of specs and probes).
MAX_META_BYTES = 16 << 20


def check_output_folder(directory: Path | str) -> frozenset:
    """Refuse ``directory`` as :func:`save`'s (``hwgen train -o``) unless it is new, empty,
    or a learned model's folder: nothing but :data:`MEMBERS`, and a ``model.json`` tagged
    :data:`MODEL_FORMAT` (of any version), so that nothing of the user's is overwritten.

    Returns
    -------
    frozenset
        What it holds now (:func:`hwgen.atomic.contents`): :func:`save` refuses a folder
        changed since.

    Raises
    ------
    ValueError
        Naming the folder, what makes it no model folder, and the fix.
    """
    directory = Path(directory)
    checked = contents(directory.resolve())
    if not directory.exists() and not directory.is_symlink():
        return checked
    if not directory.is_dir():
        raise ValueError(f"{directory} is a file, not a folder; choose a new or empty folder "
                         f"for -o")
    names = sorted(p.name for p in directory.iterdir())
    if not names:
        return checked
    why = ""
    others = [n for n in names if n not in MEMBERS]
    if others:
        why = f"it holds {others[0]}, which a model folder does not"
    elif META not in names:
        why = f"it holds no {META}"
    elif not _is_model_meta(directory / META):
        why = f"its {META} is not one hwgen train wrote"
    if why:
        raise ValueError(f"{directory} is not empty and is not a learned model folder ({why}); "
                         f"choose a new or empty folder for -o: hwgen train replaces only a "
                         f"model folder it wrote")
    return checked


def _is_model_meta(path: Path) -> bool:
    try:
        if not path.is_file() or path.stat().st_size > MAX_META_BYTES:
            return False
        meta = loads_json(path.read_bytes())
    except (OSError, ValueError):  # unreadable or not JSON: not ours
        return False
    return isinstance(meta, dict) and meta.get("format") == MODEL_FORMAT


def save(model: LearnedModel, directory: Path | str, *,
         checked: frozenset | None = None) -> Path:
    """Write ``rows.jsonl``, ``heads.skops`` and ``model.json`` to ``directory``: new, empty
    or a model folder (:func:`check_output_folder`), replaced whole
    (:func:`hwgen.atomic.replacing`), so that a kill leaves the old model or the new one.

    Parameters
    ----------
    checked : frozenset, optional
        What :func:`check_output_folder` returned before the fit: a folder changed since is
        refused (by default, since this was called).

    Returns
    -------
    Path
        The ``model.json`` written.

    Raises
    ------
    ValueError
        A folder that is no model folder, or changed since ``checked``; a model whose own
        predictions are not finite.
    """
    index = _probe_index(len(model.rows))
    cycles, energy = model.predict_rows([model.rows[i] for i in index])
    bad = [v for v in (*cycles, *energy) if not math.isfinite(v)]
    if bad:  # JSON has no infinity, and such a model would price every kernel so
        raise ValueError(f"the learned model predicts a non-finite value ({bad[0]!r}) for one "
                         f"of its own training rows; it is not saved: check the training "
                         f"rows' cycles (hwgen profile DB) and train again")
    directory = Path(directory)
    now = check_output_folder(directory)
    with replacing(directory.resolve(), checked=now if checked is None else checked) as tmp:
        _write(model, tmp, index, cycles, energy)
    return directory / META


def _write(model: LearnedModel, directory: Path, index: list[int], cycles, energy) -> None:
    """The three files of ``model`` in the (temporary) folder ``directory``."""
    import sklearn
    import skops.io as sio

    data = _rows_bytes(model)
    (directory / ROWS).write_bytes(data)
    regressors = {m: {q: h.regressor for q, h in heads.items()}
                  for m, heads in model.heads.items()}
    sio.dump(regressors, directory / HEADS)
    meta = {
        "format": MODEL_FORMAT, "version": MODEL_VERSION,
        "sklearn": sklearn.__version__, "seed": model.seed,
        "rows_sha256": hashlib.sha256(data).hexdigest(), "n_rows": len(model.rows),
        "heads_sha256": hashlib.sha256((directory / HEADS).read_bytes()).hexdigest(),
        "columns": {m: heads["cycles"].columns for m, heads in model.heads.items()},
        "platform": model.platform.to_dict(),
        "cycles": {m: sp.to_dict() for m, sp in model.cycles_spec.items()},
        "energy": {m: sp.to_dict() for m, sp in model.energy_spec.items()},
        "probes": [{"row": i, "cycles": float(c), "energy_nj": float(e)}
                   for i, c, e in zip(index, cycles, energy, strict=True)],
        "cv": model.cv,
    }
    try:
        text = json.dumps(meta, indent=1, sort_keys=True, allow_nan=False)
    except ValueError as exc:  # a cross-validation score of NaN, say: never written as JSON
        raise ValueError(f"model.json would hold a non-finite number ({exc}); it is not "
                         f"saved: check the training rows' cycles and train again") from None
    (directory / META).write_text(text + "\n")


def load(directory: Path | str) -> LearnedModel:
    """Read a model :func:`save` wrote, and check it predicts what it did then.

    Raises
    ------
    ValueError
        A missing or malformed file, rows or heads changed since they were saved, types in
        ``heads.skops`` that are not allowed, or predictions that differ from the recorded
        ones (a refit under another scikit-learn version).
    """
    import sklearn

    from fusion.cost.data import read_rows

    directory = Path(directory)
    meta_path, rows_path = directory / META, directory / ROWS
    for p in (meta_path, rows_path):
        check_regular(p, "learned model file")
        if not p.is_file():
            raise ValueError(f"{p} is missing: {directory} is not a saved learned model; "
                             f"train one with hwgen train DB -o {directory}")
    try:
        meta = loads_json(read_bytes(meta_path))
    except ValueError as exc:  # JSONDecodeError, and NaN or Infinity (not JSON)
        raise ValueError(f"{meta_path} is not JSON ({exc}); retrain with hwgen train") from None
    if meta.get("format") != MODEL_FORMAT or meta.get("version") != MODEL_VERSION:
        raise ValueError(f"{meta_path} is not a version {MODEL_VERSION} learned model "
                         f"(format {meta.get('format')!r}, version {meta.get('version')!r}); "
                         f"retrain with hwgen train")
    _check_digest(rows_path, meta["rows_sha256"])
    rows = read_rows(rows_path)
    specs = {q: {m: Spec.from_dict(d) for m, d in meta[q].items()}
             for q in ("cycles", "energy")}
    platform = PlatformConfig.from_dict(meta["platform"])
    heads_path = directory / HEADS
    if heads_path.is_file() and meta["sklearn"] == sklearn.__version__:
        _check_digest(heads_path, meta["heads_sha256"])
        heads = _read_heads(heads_path, specs, meta["columns"])
        model = LearnedModel.from_fitted(rows, heads, seed=int(meta["seed"]),
                                         platform=platform, cv=meta.get("cv"))
        how = "read"
    else:  # the regressors are a cache of the fit: refit from what defines the model
        model = LearnedModel(rows, specs["cycles"], specs["energy"], seed=int(meta["seed"]),
                             platform=platform, cv=meta.get("cv"))
        how = "refitted"
    probes = meta["probes"]
    cycles, energy = model.predict_rows([model.rows[p["row"]] for p in probes])
    for p, c, e in zip(probes, cycles, energy, strict=True):
        for what, got in (("cycles", c), ("energy_nj", e)):
            want = p[what]
            if abs(got - want) > PROBE_TOLERANCE * abs(want):
                raise ValueError(
                    f"{directory}: the {how} model predicts {got!r} {what} for row "
                    f"{p['row']}, the saved one {want!r} (saved with scikit-learn "
                    f"{meta['sklearn']}, this is {sklearn.__version__}); install "
                    f"scikit-learn=={meta['sklearn']} or retrain with hwgen train")
    return model


def _check_digest(path: Path, recorded: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != recorded:
        raise ValueError(f"{path} changed since the model was saved (SHA-256 {digest[:12]}..., "
                         f"recorded {recorded[:12]}...); retrain with hwgen train")


def _read_heads(path: Path, specs: dict[str, dict[str, Spec]],
                columns: dict[str, list[str]]) -> dict[str, dict[str, Head]]:
    import skops.io as sio

    try:
        untrusted = set(sio.get_untrusted_types(file=path)) - set(TRUSTED)
        if untrusted:
            raise ValueError(f"{path} holds types a learned model never has "
                             f"({', '.join(sorted(untrusted))}); it is not hwgen's: retrain "
                             f"with hwgen train")
        regressors = sio.load(path, trusted=list(TRUSTED))
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 -- any damage to the file: one line, the fix
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}: {exc}); delete it to "
                         f"refit from rows.jsonl, or retrain with hwgen train") from None
    if set(regressors) != set(columns):
        raise ValueError(f"{path} has heads for {sorted(regressors)}, model.json for "
                         f"{sorted(columns)}; retrain with hwgen train")
    return {m: {q: Head(q, specs[q][m], list(columns[m]), regressors[m][q])
                for q in ("cycles", "energy")} for m in regressors}


def _rows_bytes(model: LearnedModel) -> bytes:
    return "".join(json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in model.rows).encode()


def _probe_index(n: int) -> list[int]:
    """Up to :data:`PROBES` row indices spread over ``n`` rows."""
    return sorted({round(i * (n - 1) / max(PROBES - 1, 1)) for i in range(min(PROBES, n))})
