"""What a model's run measured: per kernel (:class:`KernelRun`), per host step
(:class:`HostRun`), and the whole run (:class:`RunReport`), which :func:`fusion.runtime.run.
run_compiled` returns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.ir import shapes
from fusion.ir.graph import Graph
from hwgen.energy import EnergyEstimate
from hwgen.energy import total as total_energy


@dataclass
class KernelRun:
    """One kernel's measured run.

    ``macs`` are the multiply-accumulates of its GEMMs as the array executes them (``M*K*N``
    of each ``qmatmul``, so a depthwise convolution's block-diagonal zeros count); 0 for a
    kernel with no GEMM. ``ideal_cycles`` is ``ceil(macs / (rows*cols))``: every PE busy
    every cycle. ``bound_cycles`` is the larger of that and streaming its weights once through
    the memory port: no run of the kernel is shorter.
    """

    name: str
    ops: list[str]
    cycles: int
    predicted_cycles: float
    counters: dict[str, int]
    describe: str
    macs: int = 0
    ideal_cycles: int = 0
    #: The memory counters (:func:`hwgen.perf.memory_summary`) and the energy estimate
    #: (:func:`hwgen.energy.estimate`) of the kernel's run.
    memory: dict[str, int | float] = field(default_factory=dict)
    energy: EnergyEstimate | None = None
    bound_cycles: int = 0

    @property
    def utilization(self) -> float:
        """``ideal_cycles / cycles``: the share of the array's peak this kernel reached."""
        return self.ideal_cycles / self.cycles if self.cycles else 0.0

    def to_dict(self) -> dict[str, Any]:
        energy = self.energy.to_dict() if self.energy is not None else {}
        return {"name": self.name, "ops": self.ops, "cycles": self.cycles,
                "predicted_cycles": round(self.predicted_cycles), "describe": self.describe,
                "macs": self.macs, "ideal_cycles": self.ideal_cycles,
                "bound_cycles": self.bound_cycles,
                "utilization": round(self.utilization, 4), "counters": self.counters,
                "memory": self.memory, **energy}


@dataclass
class HostRun:
    """One host step: the op the reference executor ran between kernels, the elements it
    produced, and how long it took (wall time, numpy on this machine).

    ``role`` is the plan's (:class:`fusion.compiler.plan.HostStep`): ``"layout"`` or
    ``"compute"``; ``reason`` why a compute op is on the host; ``predicted_seconds`` the
    host cost model's prediction, beside the measured ``seconds``.
    """

    name: str
    op: str
    elements: int
    seconds: float
    role: str = "layout"
    reason: str = ""
    predicted_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "elements": self.elements,
                "seconds": round(self.seconds, 6), "role": self.role, "reason": self.reason,
                "predicted_seconds": round(self.predicted_seconds, 6)}


@dataclass
class RunReport:
    """What :func:`run_compiled` measured, and the model's outputs."""

    outputs: dict[str, np.ndarray]
    kernels: list[KernelRun]
    peak_memory_bytes: int
    wall_seconds: float
    host: list[HostRun] = field(default_factory=list)
    #: Inferences the run computed (the plan's batch).
    batch: int = 1
    #: The plan's weight-bandwidth roofline in cycles
    #: (:attr:`fusion.compiler.plan.CompiledModel.roofline_cycles`) and the weight bytes
    #: behind it.
    roofline_cycles: int = 0
    weight_bytes: int = 0
    #: Activation bytes the host wrote into the accelerator's memory for the model's run (the
    #: model's inputs, what host steps made and the repacks); constants, and inputs the
    #: hardware read where an earlier kernel stored them, are not counted.
    host_written_bytes: int = 0
    #: Wall seconds of the one simulator launch (the model's kernels and the directed sets),
    #: and the cycles it simulated: what the run's wall time should be made of.
    sim_seconds: float = 0.0
    simulated_cycles: int = 0
    #: The plan's repacks (:attr:`fusion.compiler.plan.CompiledModel.repacks`): kernel inputs
    #: the runtime wrote from an earlier kernel's output in another layout, part of
    #: ``host_written_bytes``.
    repacks: list[dict[str, Any]] = field(default_factory=list)
    #: With ``profile_data``, each integer tensor a kernel read or wrote, profiled from the
    #: reference's values (:meth:`fusion.runtime.data_profile.TensorProfile.to_dict`).
    data_profiles: list[dict[str, Any]] = field(default_factory=list)
    #: Directed shadow sets run, and those not run because their program passed them on this
    #: build before (:mod:`fusion.runtime.shadow_verdicts`); simulator processes at once.
    shadow_sets_run: int = 0
    shadow_sets_cached: int = 0
    sim_processes: int = 1

    @property
    def inferences_per_mcycle(self) -> float:
        """Throughput: inferences per million kernel cycles."""
        return self.batch * 1e6 / self.total_cycles if self.total_cycles else 0.0

    @property
    def roofline_fraction(self) -> float:
        """The weight-bandwidth roofline over the measured kernel cycles (1.0: every cycle
        streamed weights)."""
        return self.roofline_cycles / self.total_cycles if self.total_cycles else 0.0

    @property
    def total_cycles(self) -> int:
        return sum(k.cycles for k in self.kernels)

    @property
    def total_macs(self) -> int:
        return sum(k.macs for k in self.kernels)

    @property
    def ideal_cycles(self) -> int:
        return sum(k.ideal_cycles for k in self.kernels)

    @property
    def utilization(self) -> float:
        """The model's ideal cycles over its measured kernel cycles."""
        return self.ideal_cycles / self.total_cycles if self.total_cycles else 0.0

    @property
    def bound_utilization(self) -> float:
        """The most utilization any plan of these kernels could reach: the ideal cycles over
        the sum of the kernels' bounds (:attr:`KernelRun.bound_cycles`). Tighter than the
        roofline where compute-bound and weight-bound layers alternate (a CNN at batch 1,
        whose last layers stream far more weight bytes than they do MACs per PE)."""
        bound = sum(k.bound_cycles for k in self.kernels)
        return self.ideal_cycles / bound if bound else 0.0

    @property
    def host_seconds(self) -> float:
        return sum(h.seconds for h in self.host)

    @property
    def host_steps(self) -> list[str]:
        return [h.name for h in self.host]

    @property
    def host_ops(self) -> list[HostRun]:
        """The compute ops the host ran (not the layout steps; see
        :attr:`fusion.compiler.plan.CompiledModel.host_ops`)."""
        return [h for h in self.host if h.role == "compute"]

    @property
    def energy(self) -> EnergyEstimate:
        """The kernels' energy estimates summed (:func:`hwgen.energy.total`)."""
        return total_energy(k.energy for k in self.kernels if k.energy is not None)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": True, "total_cycles": self.total_cycles,
                "predicted_cycles": round(sum(k.predicted_cycles for k in self.kernels)),
                "macs": self.total_macs, "ideal_cycles": self.ideal_cycles,
                "utilization": round(self.utilization, 4),
                "bound_utilization": round(self.bound_utilization, 4), "batch": self.batch,
                "inferences_per_mcycle": round(self.inferences_per_mcycle, 3),
                "weight_bytes": self.weight_bytes, "roofline_cycles": self.roofline_cycles,
                "roofline_fraction": round(self.roofline_fraction, 4),
                "peak_memory_bytes": self.peak_memory_bytes,
                "host_written_bytes": self.host_written_bytes, "repacks": self.repacks,
                **({"data_profiles": self.data_profiles} if self.data_profiles else {}),
                "kernels": [k.to_dict() for k in self.kernels],
                "memory_stall_cycles": sum(k.counters.get("stall_memory", 0)
                                           for k in self.kernels),
                **self.energy.to_dict(),
                "host_steps": self.host_steps, "host": [h.to_dict() for h in self.host],
                "host_ops": len(self.host_ops),
                "host_seconds": round(self.host_seconds, 6),
                "sim_seconds": round(self.sim_seconds, 3),
                "simulated_cycles": self.simulated_cycles,
                "shadow_sets": {"run": self.shadow_sets_run, "cached": self.shadow_sets_cached},
                "sim_processes": self.sim_processes,
                "wall_seconds": round(self.wall_seconds, 3)}


def kernel_macs(graph: Graph, nodes: list[str]) -> int:
    """Multiply-accumulates the model asks of the GEMMs among ``nodes``: ``M*K*N`` of each
    ``qmatmul``, over its ``group`` (a grouped or depthwise conv in GEMM form multiplies a
    block-diagonal weight, whose zero blocks are work the array does but the model does not
    ask for: utilization counts only the MACs the model asks for; a ``qmatmul`` with
    ``asked=0``, a channel permutation the compiler made, asks for none)."""
    total = 0
    for name in nodes:
        node = graph.node(name)
        if node.op == "qmatmul" and node.attr("asked", 1):
            a, b = (graph.tensors[n] for n in node.inputs[:2])
            total += _asked_rows(graph, a.name) * a.shape[-1] * b.shape[-1] \
                // node.attr("group", 1)
    return total


def _asked_rows(graph: Graph, a: str) -> int:
    """The GEMM rows of ``a`` the model asks for: all of them, but the output columns an
    ``im2col`` computes only to make whole blocks (``cropped``: :mod:`fusion.compiler.
    whole_rows`)."""
    rows = math.prod(graph.tensors[a].shape[:-1])
    node = graph.producer(a)
    if node is None or node.op != "im2col" or not node.attr("cropped"):
        return rows
    x = graph.tensors[node.inputs[0]].shape
    spatial = tuple(node.attr("spatial") or ()) or x[2:]
    (_, ow), _, _ = shapes.window(spatial, node.attr("kernel_shape"), node.attr("strides"),
                                  node.attr("dilations"), node.attr("pads"))
    return rows // ow * (ow - node.attr("cropped"))
