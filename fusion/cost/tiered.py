"""Pricing in tiers: a measured profile of the identical kernel first, then a model.

The engine asks one :class:`~fusion.cost.model.CostModel`; :class:`TieredModel` answers from
the first tier that knows the kernel: the profile database's measured cycles of that very
kernel on that platform (:meth:`fusion.cost.profiles.ProfileDB.measured`), then the model
(the learned one for the variant and platform when one is trained, else the analytical one).
:meth:`TieredModel.source` says which tier priced a kernel, for ``--explain``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fusion.cost.model import CostModel, Features

#: The tier name of a measured profile.
MEASURED = "measured"


class TieredModel(CostModel):
    """Measured profiles first, then ``model``.

    Parameters
    ----------
    model : CostModel
        Prices what no profile holds.
    measured : callable, optional
        ``features -> cycles or None``: a measured profile of the identical kernel on the
        platform being compiled for (None: no profile).
    """

    def __init__(self, model: CostModel, measured: Callable[[Features], float | None] | None
                 = None) -> None:
        self.model = model
        self.measured = measured
        self.name = f"{MEASURED}, then {model.name}" if measured else model.name
        self.counts: dict[str, int] = {}

    def describe(self) -> str:
        if self.measured is None:
            return self.model.describe()
        return f"measured profiles of identical kernels, then {self.model.describe()}"

    def _lookup(self, features: Features) -> float | None:
        return self.measured(features) if self.measured is not None else None

    def predict(self, features: Features) -> float:
        value = self._lookup(features)
        tier = MEASURED if value is not None else self.model.source(features)
        self.counts[tier] = self.counts.get(tier, 0) + 1
        return float(value) if value is not None else self.model.predict(features)

    def predict_many(self, features: Sequence[Features]) -> np.ndarray:
        """:meth:`predict` of each; what no profile holds goes to the model as one batch."""
        measured = [self._lookup(f) for f in features]
        rest = [f for f, v in zip(features, measured, strict=True) if v is None]
        predicted = iter(self.model.predict_many(rest) if rest else ())
        out = []
        for f, v in zip(features, measured, strict=True):
            tier = MEASURED if v is not None else self.model.source(f)
            self.counts[tier] = self.counts.get(tier, 0) + 1
            out.append(float(v) if v is not None else float(next(predicted)))
        return np.array(out, dtype=float)

    def source(self, features: Features) -> str:
        return MEASURED if self._lookup(features) is not None else self.model.source(features)
