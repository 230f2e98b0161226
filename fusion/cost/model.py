"""The cost-model interface, and the features it predicts from.

A :class:`CostModel` maps :class:`Features` to predicted cycles. Features describe one kernel
on one variant without its operand values; each kernel kind defines its own (a frozen
dataclass in the kind's folder: :class:`fusion.kernels.gemm.features.GemmFeatures`, the
epilogue pass's, the element-wise max's), made by the kind's ``features`` method. They
serialize to JSON (:meth:`Features.to_dict`, with the kind's name): calibration
(``sim.calibrate``) records them beside the measured counters, and models learn from those
rows without ever importing the simulator.

The interface knows no implementation: the analytical estimate of a kernel is its features'
:meth:`Features.analytical_cycles`, which each kind writes with :mod:`fusion.cost.analytical`,
and :class:`fusion.cost.analytical.AnalyticalModel` asks for it.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from hwgen.config import VariantConfig
from hwgen.platform import PlatformConfig


class Features(abc.ABC):
    """What a cost model knows about one kernel on one variant (one subclass per kind).

    Attributes
    ----------
    kind : str
        The kernel kind's name (class attribute).
    config : VariantConfig
        The variant.
    """

    kind: ClassVar[str]
    config: VariantConfig
    #: Whether the kind's DRAM pricing walks its program at :attr:`placement` (a kind whose
    #: features declare a ``placement`` field); the others price a template walk, which
    #: knows no addresses.
    placeable: ClassVar[bool] = False
    #: Where the kernel's regions lie in external memory, as ``(region, word address)``
    #: pairs in name order: a model's memory plan puts them there. None: built alone, its
    #: regions packed from word 0. Not part of the kernel's identity (:meth:`to_dict`
    #: leaves it out; a profile row keeps it in ``extra``): the same kernel elsewhere is the
    #: same kernel, which on a DRAM shares banks differently and takes a few percent more
    #: or less (:mod:`fusion.cost.shared_port`).
    placement: tuple[tuple[str, int], ...] | None = None

    def at(self, placement: Mapping[str, int] | None) -> Features:
        """These features with their regions at ``placement`` (``region -> word address``;
        None or empty: built alone). Kinds that are not :attr:`placeable` return themselves:
        their price does not depend on it."""
        if not self.placeable:
            return self
        placed = (tuple(sorted((str(k), int(v)) for k, v in placement.items()))
                  if placement else None)
        return dataclasses.replace(self, placement=placed)

    @property
    @abc.abstractmethod
    def problem(self) -> tuple:
        """What the kernel computes, without how (shapes, stages): kernels of one problem
        are alternatives a model chooses between (:func:`fusion.cost.data.evaluate`'s
        regret)."""

    @abc.abstractmethod
    def analytical_cycles(self, platform: PlatformConfig | None = None) -> int:
        """The ``cycles`` counter as the hardware description predicts it: the kind's walk of
        its program's phases through :class:`fusion.cost.machine.Machine`, on ``platform``'s
        memory (the ideal memory if None; a DRAM one priced by :mod:`fusion.cost.memory`)."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The features as JSON types, with ``"kind"``."""


def placement_of(features: Features) -> dict[str, int] | None:
    """``features.placement`` as ``region -> word address`` (None: built alone)."""
    return dict(features.placement) if features.placement else None


class CostModel(abc.ABC):
    """Predicts the cycles of a kernel from its features.

    Implementations: :class:`fusion.cost.analytical.AnalyticalModel` (from the hardware
    description), and the learned model of a later issue, behind the same interface so the
    engine does not care which it asks.
    """

    #: Short name for reports.
    name: str = "model"

    @abc.abstractmethod
    def predict(self, features: Features) -> float:
        """Predicted ``cycles`` counter (start to done) of the kernel."""

    def describe(self) -> str:
        """The model in words, for ``--explain``: ``"the analytical model"``."""
        return f"the {self.name} model"

    def source(self, features: Features) -> str:
        """Which model priced ``features`` (a tiered model answers per kernel; ``--explain``
        shows it): :attr:`name` for a single model."""
        return self.name

    def predict_many(self, features: Sequence[Features]) -> np.ndarray:
        """:meth:`predict` of each, as a float array (models may batch this)."""
        return np.array([self.predict(f) for f in features], dtype=float)
