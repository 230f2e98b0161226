"""The registry of kernel kinds: one line per kind (:mod:`fusion.kernels.protocol`).

A kind's name is how cache keys, compiled metadata, plans and calibration rows refer to it;
:func:`kind` finds it again.
"""

from __future__ import annotations

from typing import Any

from fusion.kernels.concat.kind import CONCAT
from fusion.kernels.conv.kind import CONV
from fusion.kernels.eltmax.kind import MAX
from fusion.kernels.epipass.kind import PASS
from fusion.kernels.gemm.kind import GEMM
from fusion.kernels.protocol import KernelKind
from fusion.kernels.window.kind import WINDOW

#: Every kernel kind, by name.
KINDS: dict[str, KernelKind] = {k.name: k for k in (
    GEMM,
    PASS,
    MAX,
    CONV,
    WINDOW,
    CONCAT,
)}


def kind(name: str) -> KernelKind:
    """The kernel kind called ``name``.

    Raises
    ------
    ValueError
        An unknown name, listing the known ones.
    """
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"no kernel kind {name!r}; the kinds are "
                         f"{', '.join(sorted(KINDS))}") from None


def features_from_dict(data: dict[str, Any]) -> Any:
    """Cost-model features from their JSON (:meth:`fusion.cost.model.Features.to_dict`);
    rows without a kind are GEMM rows (the first calibration rows were all GEMMs)."""
    return kind(data.get("kind", "gemm")).features_type.from_dict(data)
