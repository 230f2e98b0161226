"""The whole-model check: a run's outputs against the imported graph's exact reference.

The per-kernel shadow check compares the hardware with the graph *after* the passes, so a pass
that changed what the model computes would go unseen. This check evaluates the graph as it was
imported (before any pass) with the reference executor (:mod:`fusion.reference.executor`),
its float tensors in float64 (``float64=True``: the real numbers between ``DequantizeLinear``
and ``QuantizeLinear`` to about 1e-16, so that each ``QuantizeLinear`` rounds the value the
model means, where float32 noise would round a near-half either way and later layers would
grow the 1 LSB), and measures how far each output of the run is from it, in the output's LSBs:

- an integer output in integer units; its bound is exactness (0 LSB);
- a float output that a ``DequantizeLinear`` makes from a per-tensor quantized tensor in
  units of that scale; its bound is 1 LSB with at least 99% of the elements exact (the
  bound ``examples/real_check.py`` holds hwgen to against the exact reference; the share
  only for outputs of 100 elements or more). The passes compute in integers with 31-bit requantize
  multipliers, the reference in float64: the two round differently only where the real
  value is within about 1e-9 of a half;
- any other float output (a dequantized int32 accumulator, a softmax) has no LSB to count in:
  its largest difference is reported, and not judged.

An output of another shape than the reference's is beyond the bound, whatever its kind.

Beyond the bound, the check names the first integer tensor, in the imported graph's
topological order, among those both graphs keep (same name, same shape), whose values differ
(:func:`first_parting`): where the
compiled graph and the imported one part. Cost: one reference run of the imported graph, and
one of the compiled graph only when the bound is broken (a fraction of a second for the
bundled models, against seconds to minutes of simulation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.ir.graph import Graph
from fusion.reference import executor

#: The float-output bound: at most this many LSBs ...
MAX_LSB = 1
#: ... with at least this share of the elements exact (examples/real_check.within_one_lsb),
#: judged on outputs of at least MIN_ELEMENTS elements: below that a single element off by
#: one LSB is more than 1% (a 10-class output), and only the largest difference is judged.
MIN_EXACT = 0.99
MIN_ELEMENTS = 100
_DEQUANTIZE = ("DequantizeLinear", "dequantize")


@dataclass(frozen=True)
class OutputDeviation:
    """How far one output of the run is from the imported graph's reference."""

    name: str
    #: "integer", "dequantized" (LSBs of ``scale``) or "float" (no LSB: not judged)
    kind: str
    elements: int
    #: largest difference, in LSBs (integer, dequantized) or in value (float)
    max_diff: float
    share_exact: float
    scale: float | None = None

    @property
    def within(self) -> bool:
        """Whether the deviation is within the bound of its kind (module docstring)."""
        if self.max_diff == float("inf"):  # another shape: beyond any bound, float too
            return False
        if self.kind == "integer":
            return self.max_diff == 0
        if self.kind == "dequantized":
            return self.max_diff <= MAX_LSB and (self.share_exact >= MIN_EXACT
                                                 or self.elements < MIN_ELEMENTS)
        return True

    def describe(self) -> str:
        unit = f"{self.max_diff:g} LSB" if self.kind != "float" else f"{self.max_diff:.3g}"
        bound = {"integer": "exact",
                 "dequantized": f"<= {MAX_LSB} LSB, >= {MIN_EXACT:.0%} exact"
                                + (f" at {MIN_ELEMENTS} elements or more"
                                   if self.elements < MIN_ELEMENTS else ""),
                 "float": "not judged: no LSB"}[self.kind]
        return (f"{self.name}: max {unit}, {100 * self.share_exact:.2f}% exact "
                f"({self.kind}; bound {bound})")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "elements": self.elements,
                "max_lsb" if self.kind != "float" else "max_abs": self.max_diff,
                "share_exact": round(self.share_exact, 6), "scale": self.scale,
                "within": self.within}


@dataclass(frozen=True)
class WholeModelCheck:
    """The check's result; ``done`` False with ``reason`` when it could not be made."""

    done: bool
    reason: str = ""
    outputs: tuple[OutputDeviation, ...] = ()
    #: the first tensor where the compiled and imported graphs part (only beyond the bound)
    parted_at: str | None = None
    parted_detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """False only when the check was done and an output is beyond its bound."""
        return not self.done or all(o.within for o in self.outputs)

    def summary(self) -> str:
        """One line for ``hwgen run``'s text output."""
        if not self.done:
            return f"whole model: not checked: {self.reason}"
        figures = "; ".join(o.describe() for o in self.outputs)
        return f"whole model against the imported graph's reference: {figures}"

    def failure(self) -> str:
        """What ``hwgen run`` says when the check fails (one line)."""
        beyond = [o for o in self.outputs if not o.within]
        where = (f"the compiled graph and the imported one first part at tensor "
                 f"{self.parted_at!r} ({self.parted_detail})" if self.parted_at else
                 "no tensor both graphs keep differs before the outputs")
        return (f"whole-model check failed: {'; '.join(o.describe() for o in beyond)}; "
                f"{where}")

    def to_dict(self) -> dict[str, Any]:
        return {"done": self.done, "reason": self.reason or None, "ok": self.ok,
                "outputs": [o.to_dict() for o in self.outputs], "parted_at": self.parted_at,
                "parted_detail": self.parted_detail or None}


class WholeModelMismatch(RuntimeError):
    """A run's outputs beyond the whole-model bound (exit status 1, like a shadow mismatch):
    the run stopped there. ``check`` holds the figures and where the two graphs part."""

    def __init__(self, where: str, check: WholeModelCheck) -> None:
        super().__init__(f"{where}: {check.failure()}")
        self.check = check


def not_done(reason: str) -> WholeModelCheck:
    """A check that could not be made, saying why."""
    return WholeModelCheck(done=False, reason=reason)


def check_whole_model(imported: Graph, compiled: Graph, inputs: Mapping[str, np.ndarray],
                      outputs: Mapping[str, np.ndarray]) -> WholeModelCheck:
    """Compare a run's ``outputs`` with the imported graph's reference on ``inputs``.

    Parameters
    ----------
    imported : Graph
        The model as imported, before any pass.
    compiled : Graph
        The graph the run executed (after the passes); evaluated only when an output is
        beyond its bound, to find where the two graphs part.
    inputs : mapping of str to numpy.ndarray
        The run's inputs.
    outputs : mapping of str to numpy.ndarray
        The run's outputs by name.

    Returns
    -------
    WholeModelCheck
        Not done (with the reason) when the two graphs do not have the same inputs and
        outputs.
    """
    if tuple(imported.outputs) != tuple(compiled.outputs) or set(imported.inputs) - set(
            imported.initializers) != set(inputs):
        return not_done(f"the imported graph's inputs/outputs ({', '.join(imported.inputs)} -> "
                        f"{', '.join(imported.outputs)}) are not the run's "
                        f"({', '.join(inputs)} -> {', '.join(compiled.outputs)})")
    want = executor.run(imported, inputs, keep=True, float64=True)
    deviations = tuple(_deviation(imported, name, outputs[name], want[name])
                       for name in imported.outputs)
    check = WholeModelCheck(done=True, outputs=deviations)
    if check.ok:
        return check
    # the compiled graph as the run evaluates it: host steps in float64 (fusion.runtime.run)
    got = executor.run(compiled, inputs, keep=True, float64=True)
    parted, detail = first_parting(imported, want, got)
    return WholeModelCheck(done=True, outputs=deviations, parted_at=parted,
                           parted_detail=detail)


def first_parting(imported: Graph, want: Mapping[str, np.ndarray],
                  got: Mapping[str, np.ndarray]) -> tuple[str | None, str]:
    """The first integer tensor of ``imported`` (topological order) whose value in ``got``
    (the compiled graph's, every tensor kept) differs from ``want`` (the imported graph's),
    and a description of it; ``(None, "")`` if none of the tensors both keep differs.

    Integer tensors only: they are the quantized values whose meaning is fixed, while a float
    tensor differs by float rounding between a float64 reference and a float32 run; a
    change of meaning in float shows at the next ``QuantizeLinear``.
    """
    for node in imported.topo_order():
        for name in node.outputs:
            if name not in got or name not in want:
                continue
            a, b = np.asarray(want[name]), np.asarray(got[name])
            if a.shape != b.shape or a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
                continue  # another value under the same name (re-laid out), or a float
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            if diff.size and diff.max() > 0:
                return name, (f"made by {node.op} {node.name!r}: {int(np.count_nonzero(diff))}"
                              f" of {diff.size} elements differ, by up to {diff.max():.4g}")
    return None, ""


def _deviation(imported: Graph, name: str, got: np.ndarray, want: np.ndarray) -> OutputDeviation:
    got, want = np.asarray(got), np.asarray(want)
    kind, scale = "float", output_scale(imported, name)
    if want.dtype.kind in "iu":
        kind = "integer"
    elif scale is not None:
        kind = "dequantized"
    if got.shape != want.shape:  # before subtracting: the shapes may not even broadcast
        return OutputDeviation(name, kind, int(want.size), float("inf"), 0.0, scale)
    diff = got.astype(np.float64) - want.astype(np.float64)
    if kind == "dequantized":
        diff = np.rint(diff / scale)
    worst = float(np.abs(diff).max()) if diff.size else 0.0
    exact = float(np.mean(diff == 0)) if diff.size else 1.0
    return OutputDeviation(name, kind, int(want.size), worst, exact, scale)


def output_scale(graph: Graph, name: str) -> float | None:
    """The per-tensor scale of the quantized tensor a dequantize makes output ``name`` from
    (through ``Identity``), or None."""
    node = graph.producer(name)
    while node is not None and node.op == "Identity":
        node = graph.producer(node.inputs[0])
    if node is None or node.op not in _DEQUANTIZE:
        return None
    quant = graph.tensors[node.inputs[0]].quant
    if quant is None or quant.per_channel or len(quant.scale) != 1:
        return None
    return float(quant.scale[0])
