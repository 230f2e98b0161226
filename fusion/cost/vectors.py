"""What a learned cost model sees of a kernel: a vector of named numbers.

:func:`featurize` turns a kernel's features on a platform into numbers by name: its kind, the
numeric fields of its features' JSON (shapes, tiling, fused, stages; not what only a built
kernel knows), the variant's numbers, the platform's memory, its log work, and
the analytical estimate with its log (so that a regressor learns what the analytical model
misses), the traffic of the analytical walk (LOADs, drains, bytes moved, DRAM words by
row-buffer class, the rows its reads and writes open (:mod:`fusion.cost.activations`), and
their shares and rates: what the first-order memory model prices only in part), and, for a
kernel placed on a DRAM, how its regions' first words lie in the banks (:func:`_placement`).
:func:`matrix` lines vectors up in columns; a name a kernel lacks is :data:`MISSING` there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from fusion.cost.data import BUILT_FIELDS, Row
from fusion.cost.model import Features
from hwgen.energy import estimate as energy_estimate
from hwgen.platform import PlatformConfig

#: Fields of the features' JSON that are not numbers of the kernel (the variant goes in
#: whole through ``config``), or that the engine does not know when it prices a candidate
#: (:data:`fusion.cost.data.BUILT_FIELDS`: a model fitted to them would see them missing
#: there; the analytical walk's traffic gives the bytes moved instead).
#: Fields not flattened as they are: the block-sparse kernel's kept blocks (a list a column
#: block, thousands of numbers on a wide layer) and the zero-skipping kernel's tile flags (one
#: a tile) are summarized instead (:func:`featurize`).
_SKIP = frozenset({"kind", "variant", "version", "config", "blocks", "flags"}) | BUILT_FIELDS


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    """Numbers of a JSON value under dotted names; a string becomes a ``name=value`` one-hot,
    a list of strings one per item and its length, a list of numbers its items."""
    if value is None:
        return  # unknown (a kernel not built has no program size): missing
    if isinstance(value, bool | int | float):
        out[prefix] = float(value)
    elif isinstance(value, str):
        out[f"{prefix}={value}"] = 1.0
    elif isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list | tuple):
        out[f"{prefix}#len"] = float(len(value))
        for i, v in enumerate(value):
            if isinstance(v, str):
                out[f"{prefix}={v}"] = 1.0
            else:
                _flatten(f"{prefix}[{i}]", v, out)


def _work(features: Features) -> float | None:
    """Multiply-accumulates of the kernel, or elements for kinds without any (passes, max)."""
    macs = getattr(features, "macs", None)
    if macs is not None:
        return float(macs)
    m, n = getattr(features, "M", None), getattr(features, "N", None)
    return float(m * n) if m is not None and n is not None else None


class Base(NamedTuple):
    """What the analytical model says of a kernel on a platform (:func:`analytical`)."""

    cycles: float
    #: Energy in nJ from the walk's counts (None: the walk's totals are unknown).
    energy: float | None
    #: The walk's totals (:func:`fusion.cost.analytical.walk_totals`; None: unknown).
    traffic: dict[str, int] | None


def analytical(features: Features, platform: PlatformConfig) -> Base:
    """The analytical cycles of a kernel on a platform, its walk's traffic, and the energy
    :func:`hwgen.energy.estimate` gives from the walk's counts (the slices through the array,
    :attr:`~fusion.kernels.gemm.features.GemmFeatures.k_slices`, for kinds that use it; the
    bytes moved; DRAM row activations are not modelled, so counted as none).

    The energy is the base the energy head's residual target is taken against (the cycles
    where it is None): energy is a sum over events, which trees learn poorly from cycles."""
    from fusion.cost.analytical import walk_totals

    cycles, traffic = walk_totals(features, platform)
    if traffic is None:
        return Base(float(cycles), None, None)
    counters = {"cycles": cycles, "array_busy": getattr(features, "k_slices", 0),
                "bytes_read": traffic["bytes_loaded"], "bytes_written": traffic["bytes_stored"]}
    energy = float(energy_estimate(counters, features.config, platform).total_nj)
    return Base(float(cycles), energy, traffic)


def _traffic(cycles: float, t: dict[str, int], port_bytes: int, out: dict[str, float]) -> None:
    """The walk's traffic, and the shares a tree cannot form from counts: the per-word
    classes of the DRAM reads, and cycles per word moved."""
    for name, value in t.items():
        out[f"traffic.{name}"] = float(value)
    words = t["words_seq"] + t["words_bank"] + t["words_row"]
    moved = (t["bytes_loaded"] + t["bytes_stored"]) / port_bytes
    if words:
        out["traffic.bank_share"] = t["words_bank"] / words
        out["traffic.row_share"] = t["words_row"] / words
    if t["loads"]:
        out["traffic.words_per_load"] = t["bytes_loaded"] / port_bytes / t["loads"]
    if t["bytes_loaded"]:
        out["traffic.store_share"] = t["bytes_stored"] / (t["bytes_loaded"] + t["bytes_stored"])
    if moved:
        out["traffic.cycles_per_word"] = cycles / moved
    for name in ("acts_load", "acts_store"):  # rows opened (fusion.cost.activations)
        if name in t:
            out[f"traffic.{name}_per_kcycle"] = 1000.0 * t[name] / max(1.0, cycles)


def _placement(features: Features, platform: PlatformConfig, out: dict[str, float]) -> None:
    """For a kernel placed on a DRAM (:attr:`~fusion.cost.model.Features.placement`), each
    pair of its regions: whether their first words fall in the same bank, and how many banks
    apart (pages are dealt to the banks in turn, ``ROW_BANK_COL``).

    Why: a kernel's twins alone and placed have the same shapes and strategy, and a
    controller's row activations depend on which regions share a bank. Without these the
    trees saw the same numbers with two targets; with them the held-out DDR3 MAPE fell by
    0.06-0.09 points in every configuration tried (``docs/calibration.md``)."""
    if features.placement is None or not platform.is_dram:
        return
    fig = platform.port_figures(features.config.port_bytes)
    bank = {name: fig.bank_row(addr)[0] for name, addr in features.placement}
    names = sorted(bank)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            out[f"placement.same_bank.{a}.{b}"] = float(bank[a] == bank[b])
            out[f"placement.bank_distance.{a}.{b}"] = float((bank[b] - bank[a]) % fig.banks)


def featurize(features: Features, platform: PlatformConfig,
              base: tuple[float, float | None] | None = None) -> dict[str, float]:
    """The numbers a learned model sees for a kernel on a platform, by name.

    Parameters
    ----------
    features : Features
        The kernel (any kind).
    platform : PlatformConfig
        The memory it runs on.
    base : Base, optional
        :func:`analytical` of the kernel, when already known.

    Returns
    -------
    dict of str to float
        Names are stable across kernels; a name a kernel lacks is missing in a matrix.
    """
    out: dict[str, float] = {f"kind={features.kind}": 1.0}
    _flatten("", {k: v for k, v in features.to_dict().items() if k not in _SKIP}, out)
    _flatten("config", features.config.to_dict(), out)
    blocks = getattr(features, "blocks", None)
    if blocks is not None:  # block-sparse: how many blocks it keeps and how many MATMUL runs
        out["sparse.kept_blocks"] = float(sum(map(len, blocks)))
        out["sparse.runs"] = float(sum(1 + sum(b - a > 1 for a, b in zip(c, c[1:], strict=False))
                                       for c in blocks))
    flags = getattr(features, "flags", None)
    if getattr(features, "skip_zp", None) is not None:  # zero-skipping: the share flagged
        tiles = [f for row in flags or () for f in row]
        out["skip.flagged"] = float(sum(tiles)) / len(tiles) if tiles else 0.0
    out[f"memory={platform.memory}"] = 1.0
    out["refresh_hot"] = float(platform.refresh == "hot")
    out["clock_mhz"] = platform.clock_hz / 1e6
    if platform.module:
        out[f"module={platform.module}"] = 1.0
    work = _work(features)
    if work:
        out["log_work"] = math.log(work)
    cycles, energy, traffic = base if base is not None else analytical(features, platform)
    out["analytical"] = cycles
    out["log_analytical"] = math.log(cycles)
    if energy:
        out["log_analytical_energy"] = math.log(energy)
    if traffic is not None:
        _traffic(cycles, traffic, features.config.port_bytes, out)
    _placement(features, platform, out)
    return out


def energy_nj(row: Row) -> float:
    """The energy target of a row: :func:`hwgen.energy.estimate` from its counters."""
    return float(energy_estimate(row.counters, row.features.config, row.platform).total_nj)


#: A name a kernel lacks, in a matrix: below every real value (all are counts, sizes, flags
#: and logs of those, 0 or more). Not NaN: a column with no value in a cross-validation
#: fold's training rows (a kind only some workloads have) made scikit-learn's histogram
#: boosting fail to bin it ("window shape cannot be larger than input array shape").
MISSING = -1.0


def matrix(vectors: Sequence[dict[str, float]], columns: Sequence[str]) -> np.ndarray:
    """``vectors`` as rows of a float matrix over ``columns`` (:data:`MISSING` where a name is
    absent)."""
    out = np.array([[v.get(c, MISSING) for c in columns] for v in vectors], dtype=float)
    out[np.isnan(out)] = MISSING
    return out


def vectors(features: Sequence[Features], platforms: Sequence[PlatformConfig],
            ) -> tuple[list[dict[str, float]], dict[str, np.ndarray]]:
    """Each kernel's :func:`featurize` on its platform, and the residual bases of the
    cycles and energy heads (:func:`analytical`: its energy where known, else its cycles)."""
    bases = [analytical(f, p) for f, p in zip(features, platforms, strict=True)]
    out = [featurize(f, p, b) for f, p, b in zip(features, platforms, bases, strict=True)]
    return out, {"cycles": np.array([b.cycles for b in bases], float),
                 "energy": np.array([b.energy or b.cycles for b in bases], float)}


def row_vectors(rows: Sequence[Row]) -> tuple[list[dict[str, float]], dict[str, np.ndarray]]:
    """:func:`vectors` of rows, each on its own platform."""
    return vectors([r.features for r in rows], [r.platform for r in rows])
