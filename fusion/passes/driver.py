"""Run graph passes to a fixed point.

A pass is a callable ``run(graph) -> (graph, changed)`` that never edits its argument. The
driver runs a list of passes in order, round after round, until a whole round changes nothing.
A pass that keeps reporting a change (two passes undoing each other, or one that always
rewrites) would loop forever, so the number of rounds is bounded and reaching the bound is an
error that names the culprits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fusion.ir.graph import Graph

Pass = Callable[[Graph], tuple[Graph, bool]]

#: Rounds before :func:`run_to_fixed_point` gives up. Every pass in the tree converges in two
#: or three rounds on real models; twenty leaves room without hiding a livelock for long.
MAX_ROUNDS = 20


class PassError(RuntimeError):
    """A pass pipeline that did not converge, or a pass that broke the graph."""


def pass_name(p: Pass) -> str:
    """A readable name for a pass: ``dce`` for ``fusion.passes.dce.run``."""
    explicit = getattr(p, "pass_name", None)
    if explicit:
        return str(explicit)
    name = getattr(p, "__name__", None) or type(p).__name__
    if name == "run":
        return getattr(p, "__module__", "pass").rsplit(".", 1)[-1]
    return name


@dataclass
class PassLog:
    """What a pipeline did: one ``(round, pass name, changed)`` row per pass run."""

    rows: list[tuple[int, str, bool]] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return max((r for r, _, _ in self.rows), default=0)

    def changed_by(self) -> list[str]:
        """The names of the passes that changed the graph, in first-change order."""
        seen: list[str] = []
        for _, name, changed in self.rows:
            if changed and name not in seen:
                seen.append(name)
        return seen


def run_to_fixed_point(graph: Graph, passes: Sequence[Pass], *, max_rounds: int = MAX_ROUNDS,
                       log: PassLog | None = None) -> Graph:
    """Run ``passes`` in order, round after round, until a round changes nothing.

    Parameters
    ----------
    graph : Graph
    passes : sequence of callables
        Each ``run(graph) -> (graph, changed)``.
    max_rounds : int
        The most rounds to run; a round that still changes the graph after that is an error.
    log : PassLog, optional
        Receives one row per pass run.

    Returns
    -------
    Graph
        The graph no pass changes any more.

    Raises
    ------
    PassError
        If the graph still changes in round ``max_rounds`` (naming the passes that changed
        it in that round), or if a pass does not return a ``(Graph, bool)`` pair.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be at least 1, not {max_rounds!r}")
    for round_ in range(1, max_rounds + 1):
        changed_now = []
        for p in passes:
            result = p(graph)
            if (not isinstance(result, tuple) or len(result) != 2
                    or not isinstance(result[0], Graph)):
                raise PassError(f"pass {pass_name(p)!r} returned {type(result).__name__}; a "
                                f"pass returns a (Graph, changed) pair")
            graph, changed = result
            if log is not None:
                log.rows.append((round_, pass_name(p), bool(changed)))
            if changed:
                changed_now.append(pass_name(p))
        if not changed_now:
            return graph
    raise PassError(
        f"passes did not reach a fixed point in {max_rounds} rounds: "
        f"{', '.join(repr(n) for n in changed_now)} still changed the graph in the last round; "
        f"a pass that reports a change must make progress (check it returns changed=False "
        f"when it rewrites nothing)")


def prune_pipeline() -> tuple[Pass, ...]:
    """The pruning passes, in the order they run: identity, constant folding, quantized batch
    normalization as a convolution (for Q/DQ folding to lower), Q/DQ folding, Concats of
    quantized tensors as ``qconcat``, DCE."""
    from fusion.passes import batchnorm, concat_fold, constant_fold, dce, identity, qdq_fold

    return (identity.run, constant_fold.run, batchnorm.run, qdq_fold.run, concat_fold.run,
            dce.run)


def legalize_pipeline() -> tuple[Pass, ...]:
    """The legalization passes (convolution taps that read only padding dropped, conv into
    GEMM form, batched matmuls as one 2-D GEMM, weight
    zero points folded, standalone integer Relu/Clip/Add as epilogue ops, channel shuffles as
    the order of their GEMM's columns, residual adds and channel joins moved before the layout
    changes of their inputs, the host's LRN and BatchNormalization run on a GEMM's rows, the
    host's ops between a dequantize and a quantize on the 8-bit tensors themselves, layout
    chains that are identities bypassed), then DCE.

    ``layout_identity`` belongs here, after ``conv_legalize``: the identities it removes are
    made by legalization itself (a convolution's ``transpose``/``reshape`` back to NCHW, then
    the next pointwise convolution's ``im2col`` straight back to GEMM rows), and without it
    each costs three host steps between two GEMMs. ``im2col_rows`` after it: any other
    convolution's ``im2col`` of a GEMM's output reads the GEMM's rows themselves (what the
    window convolution takes where it lies).
    """
    from fusion.passes import (
        add_layout,
        batched_matmul,
        channel_shuffle,
        concat_layout,
        conv_legalize,
        dce,
        dead_taps,
        host_quantized,
        host_rows,
        im2col_rows,
        integer_eltwise,
        layout_identity,
        weight_zero_point,
    )

    return (dead_taps.run, conv_legalize.run, batched_matmul.run, weight_zero_point.run,
            integer_eltwise.run, channel_shuffle.run, add_layout.run, concat_layout.run,
            host_rows.run, host_quantized.run, layout_identity.run, im2col_rows.run, dce.run)


def optimize(graph: Graph, *, legalize: bool = True, max_rounds: int = MAX_ROUNDS,
             log: PassLog | None = None) -> Graph:
    """Prune ``graph`` to a fixed point, then (optionally) legalize it and prune again.

    Parameters
    ----------
    graph : Graph
    legalize : bool
        Also rewrite convolutions into im2col + GEMM form.
    max_rounds : int
        Per pipeline; see :func:`run_to_fixed_point`.
    log : PassLog, optional

    Returns
    -------
    Graph
    """
    graph = run_to_fixed_point(graph, prune_pipeline(), max_rounds=max_rounds, log=log)
    if legalize:
        graph = run_to_fixed_point(graph, legalize_pipeline(), max_rounds=max_rounds, log=log)
        graph = run_to_fixed_point(graph, prune_pipeline(), max_rounds=max_rounds, log=log)
    return graph
