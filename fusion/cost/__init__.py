"""Cost models: predicted cycles of a kernel on a variant.

:class:`CostModel` is the interface, :class:`Features` what it predicts from (each kernel kind
defines its own, in the kind's folder: ``fusion.kernels.gemm.features.GemmFeatures`` ...),
:class:`AnalyticalModel` the implementation derived from the hardware description, and
:mod:`fusion.cost.data` the calibration rows and metrics (MAPE, Spearman) models are judged
by. This package never imports ``sim``: calibration writes rows, cost models read them.
"""

from fusion.cost.analytical import AnalyticalModel, Estimate, estimate
from fusion.cost.data import (
                              Evaluation,
                              Row,
                              evaluate,
                              mape,
                              read_rows,
                              regrets,
                              spearman,
                              write_rows,
)
from fusion.cost.machine import Machine
from fusion.cost.model import CostModel, Features

__all__ = [
    "AnalyticalModel", "CostModel", "Estimate", "Evaluation", "Features", "Machine", "Row",
    "estimate", "evaluate", "mape", "read_rows", "regrets", "spearman", "write_rows",
]
