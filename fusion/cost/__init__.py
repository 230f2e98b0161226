"""Cost models: predicted cycles of a kernel on a variant.

:class:`CostModel` is the interface, :class:`KernelFeatures` what it predicts from,
:class:`AnalyticalModel` the implementation derived from the hardware description, and
:mod:`fusion.cost.data` the calibration rows and metrics (MAPE, Spearman) models are judged
by. This package never imports ``sim``: calibration writes rows, cost models read them.
"""

from fusion.cost.analytical import AnalyticalModel, Estimate, estimate
from fusion.cost.data import Evaluation, Row, evaluate, mape, read_rows, spearman, write_rows
from fusion.cost.machine import Machine
from fusion.cost.model import CostModel, KernelFeatures

__all__ = [
    "AnalyticalModel", "CostModel", "Estimate", "Evaluation", "KernelFeatures", "Machine", "Row",
    "estimate", "evaluate", "mape", "read_rows", "spearman", "write_rows",
]
