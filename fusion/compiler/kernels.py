"""One kernel of a compiled model: which nodes it runs, its operands, regions and program.

Three forms, all built from the existing kernel builders:

``gemm``
    ``qmatmul`` (+ fused epilogue ops): A is the input viewed as ``[M, K]`` (leading axes
    flattened), B the constant weight. A non-zero input zero point ``za`` is folded into the
    bias: ``sum((a - za) * w) = sum(a * w) - za * colsum(w)``, so such a GEMM always runs the
    bias stage (the bias vector is the correction plus any fused ``bias_add``).
    ``qadd`` is a GEMM too: its inputs viewed as rows of ``cols`` elements side by side,
    ``A = [a | b]`` (K = 2 x cols) and ``B = [[a_mult * I], [b_mult * I]]`` (int8), so the
    array computes ``a_mult * a + b_mult * b`` per element; the zero points go into the bias
    and the requantize is the epilogue's. Exact, at half the epilogue's element rate.
``pass``
    Epilogue ops alone: one memory-to-memory pass over the tensor viewed as ``[M, N]``.
``max``
    ``maxpool``: the host gathers each window position into one plane (padding holds the
    minimum), and a chain of element-wise max passes (the residual stage's max mode) reduces
    them.

A :class:`KernelSpec` is what the engine chose; :meth:`KernelSpec.compile` builds (or fetches
from the kernel cache) its program at a placement, and :meth:`KernelSpec.operands` makes its
operand arrays from the values of the graph's tensors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.compiler.lower import (
    Chain,
    CompileError,
    from_lanes,
    lanes_offset,
    tensor_zp,
    to_lanes,
)
from fusion.compiler.stage_values import assemble_stages
from fusion.ir import windows as _windows
from fusion.ir.graph import Graph
from hwgen.config import VariantConfig
from hwgen.reference import INT8_MIN, EpilogueParams


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """One kernel as the engine chose it (no program yet).

    Attributes
    ----------
    name : str
        Unique in the plan: its first node's name.
    form : {"gemm", "qadd", "pass", "max"}
    nodes : tuple of str
        The graph nodes it computes, in order.
    inputs : tuple of str
        The graph tensors it reads (activations; constants are in ``consts``).
    output : str
        The graph tensor it produces.
    M, K, N : int
        The GEMM shape (``K`` 0 for passes); passes and max run over ``[M, N]``.
    stages : tuple of str
        Epilogue stages (for ``max``: the residual stage in max mode).
    params : EpilogueParams
    consts : dict of str to ndarray
        Constant operands: ``b``, ``bias``, ``mult``, ``shift``.
    src_dtype, out_dtype : str
        Lane types of the pass input and of the stored result (``int8``/``int32``).
    tiling : Tiling or None
        GEMMs: the super tiles.
    n_inputs : int
        ``max``: the planes.
    """

    name: str
    form: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    output: str
    M: int
    K: int
    N: int
    stages: tuple[str, ...]
    params: EpilogueParams
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    src_dtype: str = "int8"
    out_dtype: str = "int8"
    tiling: Any = None
    n_inputs: int = 0

    @property
    def fused_ops(self) -> int:
        return len(self.nodes)

    def describe(self) -> str:
        """One line: the form, the ops, the shape and the tiling."""
        ops = "+".join(n.rsplit("/", 1)[-1] for n in self.nodes)
        if self.form in ("gemm", "qadd"):
            t = self.tiling
            tiles = "" if t is None else (f", tiles {t.tm}x{t.tn} kt={t.kt} {t.order}"
                                          f"{'' if t.double_buffer else ' single-buffered'}")
            return (f"{self.form} {self.M}x{self.K}x{self.N} [{ops}] "
                    f"stages={','.join(self.stages) or '-'}{tiles}")
        if self.form == "max":
            return f"max of {self.n_inputs} planes {self.M}x{self.N} [{ops}]"
        return (f"pass {self.M}x{self.N} {self.src_dtype}->{self.out_dtype} [{ops}] "
                f"stages={','.join(self.stages)}")

    # -- memory ------------------------------------------------------------------------------

    def regions(self, config: VariantConfig) -> dict[str, int]:
        """Region name -> bytes, before any program is built."""
        if self.form in ("gemm", "qadd"):
            from fusion.kernels.gemm.build import gemm_regions

            return gemm_regions(config, self.M, self.K, self.N, stages=self.stages, fused=True,
                                params=self.params)
        if self.form == "pass":
            from fusion.kernels.epipass.build import pass_regions

            return pass_regions(config, self.M, self.N, stages=self.stages, params=self.params,
                                src_dtype=self.src_dtype, out_dtype=self.out_dtype)
        from fusion.kernels.eltmax.build import max_regions

        return max_regions(config, self.M, self.N, self.n_inputs)

    @staticmethod
    def region_role(name: str) -> str:
        """``const`` (weights, bias groups), ``output``, ``scratch`` or ``input``."""
        if name in ("b", "bias"):
            return "const"
        if name == "out":
            return "output"
        if name.startswith("tmp"):
            return "scratch"
        return "input"

    # -- building ----------------------------------------------------------------------------

    def compile(self, config: VariantConfig, placement: Mapping[str, int] | None, cache: Any):
        """The compiled kernel (a ``CompiledGemm``/``CompiledPass``/``CompiledMax``)."""
        if self.form in ("gemm", "qadd"):
            from fusion.kernels.program import compiled_gemm

            return compiled_gemm(config, self.M, self.K, self.N, stages=self.stages,
                                 fused=True, tiling=self.tiling, params=self.params,
                                 placement=placement, cache=cache)
        if self.form == "pass":
            from fusion.kernels.epipass.build import compiled_pass

            return compiled_pass(config, self.M, self.N, stages=self.stages,
                                 params=self.params, src_dtype=self.src_dtype,
                                 out_dtype=self.out_dtype, placement=placement, cache=cache)
        from fusion.kernels.eltmax.build import compiled_max

        return compiled_max(config, self.M, self.N, self.n_inputs, placement=placement,
                            cache=cache)

    # -- values ------------------------------------------------------------------------------

    def operands(self, graph: Graph, env: Mapping[str, np.ndarray], config: VariantConfig
                 ) -> dict[str, np.ndarray]:
        """The kernel's operand arrays (lane values) from the tensors' values ``env``."""
        ts = [graph.tensors[n] for n in self.inputs]
        xs = [to_lanes(env[t.name], t.dtype) for t in ts]
        if self.form == "gemm":
            ops = {"a": xs[0].reshape(self.M, self.K)}
        elif self.form == "qadd":
            c = config.cols
            rows = [_rows(x, self.M, c) for x in xs]
            ops = {"a": np.concatenate(rows, axis=1)}
        elif self.form == "pass":
            ops = {"src": xs[0].reshape(self.M, self.N)}
            if "residual" in self.stages:
                ops["residual"] = xs[1].reshape(self.M, self.N)
        else:  # max
            node_attrs = self.consts["_pool"]
            cols = _windows.windows(xs[0], node_attrs["kernel_shape"], node_attrs["strides"],
                                    node_attrs["dilations"], node_attrs["pads"], INT8_MIN,
                                    ceil_mode=node_attrs["ceil_mode"])
            n, ch, kh, kw = cols.shape[:4]
            planes = cols.reshape(n, ch, kh * kw, -1).transpose(2, 0, 1, 3).reshape(kh * kw, -1)
            ops = {f"in{i}": _rows(p, self.M, self.N) for i, p in enumerate(planes)}
        for name, value in self.consts.items():
            if not name.startswith("_"):
                ops[name] = value
        return ops

    def result(self, graph: Graph, out2d: np.ndarray) -> np.ndarray:
        """The output tensor's value from the kernel's ``[M, N]`` lanes."""
        t = graph.tensors[self.output]
        size = math.prod(t.shape)
        if self.form in ("qadd", "max"):
            flat = np.asarray(out2d).reshape(-1)[:size]
        else:
            flat = np.asarray(out2d).reshape(-1)
        return from_lanes(flat.reshape(t.shape), t.dtype)


def _rows(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``x`` flattened into ``rows`` x ``cols``, the tail padded with zeros."""
    flat = np.asarray(x).reshape(-1)
    out = np.zeros(rows * cols, dtype=flat.dtype)
    out[:flat.size] = flat
    return out.reshape(rows, cols)


# -- from chain segments to specs -------------------------------------------------------------


def spec_for(graph: Graph, config: VariantConfig, chain: Chain, start: int, stop: int,
             tiling: Any = None) -> KernelSpec:
    """The kernel of chain items ``[start, stop)`` (item 0 is the anchor, if any).

    Raises
    ------
    CompileError
        For values the accelerator cannot hold (a bias leaving int32 ...).
    """
    items = ([(chain.anchor, None)] if chain.anchor is not None else []) + [
        (o.node, o.stage) for o in chain.ops]
    part = items[start:stop]
    nodes = tuple(n.name for n, _ in part)
    last = part[-1][0]
    output = last.outputs[0]
    out_t = graph.tensors[output]
    anchor = chain.anchor if start == 0 else None
    if anchor is not None and anchor.op == "qmatmul":
        a, b = (graph.tensors[n] for n in anchor.inputs)
        w = graph.initializers[anchor.inputs[1]]
        K, N = w.shape  # noqa: N806
        M = math.prod(a.shape[:-1]) if len(a.shape) > 1 else 1  # noqa: N806
        za = tensor_zp(a, anchor)
        corr = None if za == 0 else -za * w.astype(np.int64).sum(axis=0)
        stages, params, consts = assemble_stages(graph, part[1:], N, corr)
        consts["b"] = w
        return KernelSpec(name=nodes[0], form="gemm", nodes=nodes, inputs=(anchor.inputs[0],),
                          output=output, M=M, K=K, N=N, stages=stages, params=params,
                          consts=consts, out_dtype=_lane_dtype(out_t.dtype), tiling=tiling)
    if anchor is not None and anchor.op == "qadd":
        ta, tb = (graph.tensors[n] for n in anchor.inputs)
        c = config.cols
        M = -(-math.prod(ta.shape) // c)  # noqa: N806
        am, bm = int(anchor.attr("a_mult")), int(anchor.attr("b_mult"))
        eye = np.eye(c, dtype=np.int64)
        w = np.concatenate([am * eye, bm * eye]).astype(np.int8)
        zb = -(am * tensor_zp(ta, anchor) + bm * tensor_zp(tb, anchor))
        stages, params, consts = assemble_stages(graph, part[1:], c, None)
        # The qadd's own requantize (per tensor) comes first: build it as a requant item.
        req = EpilogueParams(mult=int(anchor.attr("mult")), shift=int(anchor.attr("shift")),
                             zp=int(anchor.attr("zp", 0)) - lanes_offset(
                                 graph.tensors[anchor.outputs[0]].dtype))
        if "requant" in stages:
            raise CompileError(f"node {anchor.name!r}: a requant right after a qadd")
        full = (("bias",) if zb != 0 else ()) + ("requant",) + stages
        params = EpilogueParams(mult=req.mult, shift=req.shift, zp=req.zp,
                                clamp_lo=params.clamp_lo, clamp_hi=params.clamp_hi)
        consts = {"b": w}
        if zb != 0:
            consts["bias"] = np.full(c, zb, np.int32)
        return KernelSpec(name=nodes[0], form="qadd", nodes=nodes, inputs=tuple(anchor.inputs),
                          output=output, M=M, K=2 * c, N=c, stages=full, params=params,
                          consts=consts, out_dtype="int8", tiling=tiling)
    if anchor is not None and anchor.op == "maxpool":
        x = graph.tensors[anchor.inputs[0]]
        pool = {k: anchor.attr(k) for k in ("kernel_shape", "strides", "dilations", "pads",
                                            "ceil_mode")}
        pool = {k: (v if v is not None else _POOL_DEFAULTS[k]) for k, v in pool.items()}
        planes = math.prod(pool["kernel_shape"])
        c = config.cols
        M = -(-math.prod(out_t.shape) // c)  # noqa: N806
        if x.dtype not in ("int8", "uint8"):
            raise CompileError(f"node {anchor.name!r} (maxpool): input is {x.dtype}; the "
                               f"accelerator pools int8/uint8 tensors")
        if planes < 2:
            raise CompileError(f"node {anchor.name!r} (maxpool): a 1x1 window is a copy")
        return KernelSpec(name=nodes[0], form="max", nodes=nodes, inputs=(anchor.inputs[0],),
                          output=output, M=M, K=0, N=c, stages=("residual",),
                          params=EpilogueParams(), consts={"_pool": pool},
                          n_inputs=planes)
    # a run of epilogue ops as one pass over [M, N]
    x = graph.tensors[part[0][0].inputs[0]]
    N = x.shape[-1] if x.shape else 1  # noqa: N806
    M = math.prod(x.shape) // N  # noqa: N806
    stages, params, consts = assemble_stages(graph, part, N, None)
    return KernelSpec(name=nodes[0], form="pass", nodes=nodes, inputs=(x.name,), output=output,
                      M=M, K=0, N=N, stages=stages, params=params, consts=consts,
                      src_dtype=_lane_dtype(x.dtype), out_dtype=_lane_dtype(out_t.dtype))


_POOL_DEFAULTS = {"strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0), "ceil_mode": 0}


def _lane_dtype(dtype: str) -> str:
    return "int32" if dtype == "int32" else "int8"
