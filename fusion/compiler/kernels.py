"""One kernel of a compiled model: which nodes it runs, its kind and params, its operands.

A :class:`KernelSpec` is what the engine chose: a kernel kind (:mod:`fusion.kernels.kinds`)
and its params, the graph nodes it computes and the graph tensors it reads and writes.
Everything particular to the kind (regions, program, operand layout, cost features) is a call
on the kind; what is here is the graph side:

- :func:`spec_for` lowers a segment of a chain to a spec, one function per anchor op
  (:data:`ANCHORS`) and the standalone pass for a run of epilogue ops. A ``qmatmul`` is a
  GEMM: A is the input viewed as ``[M, K]`` (leading axes flattened), B the constant int8
  weight, whose zero points :mod:`fusion.passes.weight_zero_point` has already folded in.
  A non-zero input zero point ``za`` is folded into the bias:
  ``sum((a - za) * w) = sum(a * w) - za * colsum(w)``, so such a GEMM always runs the bias
  stage (the bias vector is the correction plus any fused ``bias_add``). A ``qadd`` is the
  residual stage's scaled add, fused after the GEMM that makes one of its inputs or in a
  pass; its other input is the kernel's second graph input. A ``qmatmul`` of a grouped
  convolution (attribute ``group``, block-diagonal weights) is a grouped GEMM
  (:func:`grouping`) when each group's output channels divide the array's columns: every
  column block then reduces over its own rows of K only; otherwise it is the dense GEMM of its
  block-diagonal weights, and the spec's note says why. A ``maxpool`` is a pool on the
  window unit, or the element-wise max of its window's positions
  (:mod:`fusion.kernels.eltmax.kind`); a ``qconcat`` the join of its inputs' pixel rows
  (:mod:`fusion.kernels.concat`);
- :class:`~fusion.compiler.spec.KernelSpec` (its own module) is the record a lowering makes:
  its ``operands`` are the kernel's operand arrays from the values of the graph's tensors,
  and its ``result`` the output tensor's value from the kernel's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fusion.compiler.data_hints import ZeroHints
from fusion.compiler.lower import (
    Chain,
    lanes_offset,
    tensor_zp,
    to_lanes,
)
from fusion.compiler.options import DEFAULT, CompileOptions
from fusion.compiler.spec import KernelSpec
from fusion.compiler.stage_values import assemble_stages
from fusion.ir import shapes
from fusion.ir.graph import Graph, Node
from fusion.kernels.concat.kind import CONCAT, ConcatParams
from fusion.kernels.conv.kind import CONV
from fusion.kernels.conv.params import ConvParams
from fusion.kernels.eltmax.kind import MAX, MaxParams, Window
from fusion.kernels.epipass.kind import PASS, PassParams
from fusion.kernels.gemm.kind import GEMM
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.sparse import weight_blocks
from fusion.kernels.layout import kgroup_problem
from fusion.kernels.program import rows_of
from fusion.kernels.protocol import Refusal
from fusion.kernels.window.kind import WINDOW
from fusion.kernels.window.params import WindowParams
from fusion.passes.im2col_rows import rows_start
from fusion.passes.layout_identity import matrix_view_start
from hwgen.config import VariantConfig

# -- from chain segments to specs -------------------------------------------------------------

#: The parts of a segment: its (node, stage) items, node names and output tensor.
Part = list[tuple[Node, str | None]]


def _gemm(graph: Graph, config: VariantConfig, anchor: Node, part: Part, *,
          grouped: bool = True, sparse: bool = True, data: ZeroHints | None = None,
          **names: Any) -> KernelSpec:
    a = graph.tensors[anchor.inputs[0]]
    w = graph.initializers[anchor.inputs[1]]
    K, N = w.shape  # noqa: N806
    M = math.prod(a.shape[:-1]) if len(a.shape) > 1 else 1  # noqa: N806
    za = tensor_zp(a, anchor)
    # w has no zero point (fusion.passes.weight_zero_point folded it): this is colsum(w - zw).
    corr = None if za == 0 else -za * w.astype(np.int64).sum(axis=0)
    stages, params, consts, residual = assemble_stages(graph, part[1:], N, corr,
                                                       source=anchor.outputs[0])
    consts["b"] = w
    producer = graph.producer(anchor.inputs[0])
    split = producer is not None and producer.op == "repeat"
    notes = [f"weights split into {producer.attr('times')} int8 parts along K (weight zero "
             f"points), A repeated by {producer.name}"] if split else []
    kgroup, kblocks, why = grouping(config, w, anchor.attr("group", 1) or 1, split=split)
    if kgroup and not grouped:
        kgroup, kblocks, why = 0, 1, "grouped GEMMs are turned off (CompileOptions.grouped_gemm)"
    notes += [why] if why else []
    # A is read as [M, K]: through reshapes that keep that view, from the tensor before them
    # (a kernel's output where it lies, with no host step between; plan._order drops the
    # reshapes when nothing else reads them)
    source = matrix_view_start(graph, anchor.inputs[0]) or anchor.inputs[0]
    # all-zero weight blocks (a pruned model): the block-sparse program is priced too
    blocks = weight_blocks(config, w) if sparse and not kgroup else None
    # A data profile of A (a run's input the host quantized): the zero-skipping program is
    # priced too, for its tile flags
    flags = data.a_flags(graph, config, source, M, K) if data is not None else None
    return KernelSpec(kind=GEMM, params=GemmParams(M=M, K=K, N=N, stages=stages,
                                                   epilogue=params, kgroup=kgroup,
                                                   kblocks=kblocks, blocks=blocks,
                                                   skip_zp=za, flags=flags),
                      inputs=(source,) + ((residual,) if residual else ()),
                      consts=consts, note="; ".join(notes), **names)


def _windows_of(windows: Node, shape: tuple[int, ...]
                ) -> tuple[dict[str, Any], tuple[int, int, int, int]]:
    """An ``im2col``'s window attributes, and its input's ``(N, C, H, W)``: from NCHW, or
    from the ``N x H*W x C`` rows it reads (``spatial``, :mod:`fusion.passes.im2col_rows`)."""
    attr = {k: windows.attr(k) for k in ("kernel_shape", "strides", "pads", "dilations",
                                         "spatial")}
    if attr["spatial"]:
        n, _, c = shape
        return attr, (n, c, *attr["spatial"])
    return attr, tuple(shape)


def _conv(graph: Graph, config: VariantConfig, windows: Node, anchor: Node, part: Part,
          **names: Any) -> KernelSpec | Refusal:
    """A window convolution (:mod:`fusion.kernels.conv`): the ``im2col`` ``windows`` and the
    GEMM ``anchor`` reading them (with ``part[1:]``, its epilogue ops) as one kernel that
    gathers the windows from the ``im2col``'s input itself; or why not (the engine then
    gathers them on the host and runs the GEMM)."""
    x = graph.tensors[windows.inputs[0]]
    w = graph.initializers[anchor.inputs[1]]
    attr, (n, cin, h, wd) = _windows_of(windows, x.shape)
    if tuple(attr["dilations"] or (1, 1)) != (1, 1):
        return Refusal(CONV.name, "dilation", f"node {windows.name!r}: dilated windows are "
                       f"gathered on the host")
    if (anchor.attr("group", 1) or 1) > 1:
        return Refusal(CONV.name, "grouped", f"node {anchor.name!r}: a grouped convolution runs "
                       f"as a grouped GEMM of host-gathered windows")
    kh, kw = attr["kernel_shape"]
    K, N = w.shape  # noqa: N806
    za = tensor_zp(x, windows)
    corr = None if za == 0 else -za * w.astype(np.int64).sum(axis=0)
    stages, params, consts, residual = assemble_stages(graph, part[1:], N, corr,
                                                       source=anchor.outputs[0])
    # the GEMM's rows are in im2col's (c, ky, kx) order; the window loads fill (ky, kx, c)
    consts["b"] = w.reshape(cin, kh * kw, N).transpose(1, 0, 2).reshape(K, N)
    try:
        conv = ConvParams(N=n, H=h, W=wd, Cin=cin, Cout=N, kh=kh, kw=kw,
                          stride=tuple(attr["strides"] or (1, 1)),
                          pads=tuple(attr["pads"] or (0, 0, 0, 0)), fill=za, stages=stages,
                          epilogue=params)
    except ValueError as exc:
        return Refusal(CONV.name, "params", f"node {windows.name!r}: {exc}")
    return KernelSpec(kind=CONV, params=conv,
                      inputs=(windows.inputs[0],) + ((residual,) if residual else ()),
                      consts=consts, **names)


def depthwise_taps(w: np.ndarray, channels: int, taps: int) -> np.ndarray | None:
    """The ``taps x C`` weights of a depthwise convolution's ``[C*taps, C]`` GEMM weights
    (im2col's (c, ky, kx) rows: channel c's taps at rows ``c*taps ..``, in column c), or None
    when a weight lies outside those blocks (not a depthwise convolution of multiplier 1)."""
    if w.shape != (channels * taps, channels):
        return None
    blocks = w.reshape(channels, taps, channels)
    c = np.arange(channels)
    taps_of = blocks[c, :, c].T  # [taps, C]
    rest = blocks.copy()
    rest[c, :, c] = 0
    return None if rest.any() else np.ascontiguousarray(taps_of)


def _depthwise(graph: Graph, config: VariantConfig, windows: Node, anchor: Node, part: Part,
               **names: Any) -> KernelSpec | Refusal:
    """A depthwise convolution on the window unit (:mod:`fusion.kernels.window`): the
    ``im2col`` ``windows`` and the grouped GEMM ``anchor`` reading them (with ``part[1:]``,
    its epilogue ops) as one kernel reading the ``im2col``'s input where it lies; or why not
    (the engine then runs the grouped GEMM of host-gathered windows). The input's zero point
    is the padding's fill and, as for a GEMM, folded into the bias:
    ``sum((x - za) * w) = sum(x * w) - za * sum(w)`` per channel."""
    x = graph.tensors[windows.inputs[0]]
    w = graph.initializers[anchor.inputs[1]]
    attr, (n, cin, h, wd) = _windows_of(windows, x.shape)
    if tuple(attr["dilations"] or (1, 1)) != (1, 1):
        return Refusal(WINDOW.name, "dilation", f"node {windows.name!r}: the window unit has "
                       f"no dilation")
    kh, kw = attr["kernel_shape"]
    group, cout = anchor.attr("group", 1) or 1, w.shape[1]
    taps = depthwise_taps(w, cin, kh * kw) if group == cin == cout else None
    if taps is None:
        return Refusal(WINDOW.name, "channels", f"node {anchor.name!r}: group {group} of "
                       f"{cin} -> {cout} channels is not a depthwise convolution of one output "
                       f"channel per input channel", group=group)
    sy, sx = attr["strides"] or (1, 1)
    if sy != sx:
        return Refusal(WINDOW.name, "stride", f"node {windows.name!r}: strides {sy}x{sx} "
                       f"differ; the window unit steps both axes alike")
    za = tensor_zp(x, windows)
    corr = None if za == 0 else -za * taps.astype(np.int64).sum(axis=0)
    stages, params, consts, residual = assemble_stages(graph, part[1:], cout, corr,
                                                       source=anchor.outputs[0])
    if residual:
        return Refusal(WINDOW.name, "residual", f"node {anchor.name!r}: WINDOW reads no "
                       f"residual; the residual add would need a pass")
    pads = tuple(attr["pads"] or (0, 0, 0, 0))
    # all-ones taps over the whole plane: a global pool's sum (fusion.passes.global_pool_window)
    whole = (kh, kw) == (h, wd) and not any(pads) and bool((taps == 1).all())
    if not whole:
        consts["w"] = taps
    try:
        p = WindowParams(N=n, H=h, W=wd, C=cin, kh=kh, kw=kw, stride=sy, pads=pads, fill=za,
                         stages=stages, epilogue=params, mode="sum" if whole else "mac")
    except ValueError as exc:
        return Refusal(WINDOW.name, "params", f"node {windows.name!r}: {exc}")
    return KernelSpec(kind=WINDOW, params=p, inputs=(windows.inputs[0],), consts=consts,
                      **names)


def grouping(config: VariantConfig, w: np.ndarray, group: int, *,
             split: bool = False) -> tuple[int, int, str]:
    """The ``kgroup`` and ``kblocks`` of a grouped convolution's GEMM, and why it is (or is
    not) grouped.

    The ``[K, N]`` weights of a convolution of ``group`` groups are block-diagonal
    (:func:`fusion.passes.conv_legalize.gemm_weights`): output channel o reads only the
    ``K / group`` rows of its group. When the ``N / group`` channels of a group divide the
    array's ``cols``, column block ``j`` (a whole number of groups) reads only the
    ``kgroup = cols * K / N`` rows ``[j*kgroup, (j+1)*kgroup)``; when they are a multiple of
    ``cols`` (ShuffleNet's 3 groups of 80 channels on 8 columns), the ``kblocks`` column blocks
    of a group all read its ``kgroup = K / group`` rows. Either way a grouped GEMM does
    several times less work than the dense one (:class:`fusion.kernels.gemm.params.
    GemmParams`).

    Parameters
    ----------
    config : VariantConfig
        The variant (its ``cols``).
    w : ndarray
        The ``[K, N]`` int8 GEMM weights.
    group : int
        The ``qmatmul``'s ``group`` attribute (1: not a grouped convolution).
    split : bool
        The weights were split into int8 parts stacked along K
        (:mod:`fusion.passes.weight_zero_point`): the blocks are no longer diagonal.

    Returns
    -------
    (int, int, str)
        ``kgroup`` (0: dense), ``kblocks`` and a note for the plan (empty when ``group`` is 1).
    """
    if group <= 1:
        return 0, 1, ""
    K, N = w.shape  # noqa: N806
    C = config.cols  # noqa: N806
    dense = f"group {group} as a dense GEMM of block-diagonal weights: "
    if split:
        return 0, 1, dense + ("the weights are split into int8 parts along K (weight zero "
                              "points), so their blocks are not diagonal")
    if K % group or N % group:
        return 0, 1, dense + f"K={K} or N={N} is not a multiple of the group count"
    per_group = N // group
    if per_group % C == 0:  # each group several whole column blocks
        kgroup, kblocks = K // group, per_group // C
    elif C % per_group == 0:  # each column block several whole groups
        kgroup, kblocks = C * K // N, 1
    else:
        return 0, 1, dense + (f"a group's {per_group} output channels neither divide the "
                              f"array's {C} columns nor are a multiple of them")
    if kgroup >= K:
        return 0, 1, dense + f"all {N} output channels fit one column block of {C}"
    if kgroup_problem(config, K, N, kgroup, kblocks) is not None:  # unreachable, as above
        raise AssertionError(kgroup_problem(config, K, N, kgroup, kblocks))
    rows = np.arange(K)[:, None] // kgroup
    cols = np.arange(N)[None, :] // C // kblocks
    if np.any(w[rows != cols]):
        return 0, 1, dense + f"the weights are not zero outside the diagonal {kgroup}-row blocks"
    blocks = f"its {kblocks} column blocks of {C}" if kblocks > 1 else f"each column block of {C}"
    return kgroup, kblocks, (f"group {group}: grouped GEMM, {blocks} reduce over their "
                             f"group's {kgroup} rows of K={K}, not all of them")


_POOL_DEFAULTS = {"strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0), "ceil_mode": 0}


def _window_pool(config: VariantConfig, x_shape: tuple[int, ...], pool: dict[str, Any],
                 window_unit: bool) -> tuple[WindowParams | None, str]:
    """A max pool's params on the window unit (mode max, padding the int8 minimum, which no
    lane exceeds), or None and why not: the unit turned off or missing, a window it cannot
    run (its kind's refusal), or a layout it does not take (dilation, an input that is not
    NCHW, unequal strides).

    ``ceil_mode`` adds the windows that run past the input's end: the same pool with that
    much more end padding, which a max never takes (each such window starts inside the input
    or its begin padding, ONNX's rule, so it holds an input element)."""
    if not window_unit:
        return None, "the window unit is turned off (CompileOptions.window_unit)"
    if not config.window_unit:
        return None, ""  # the variant has none: nothing to say on every pool
    sy, sx = pool["strides"]
    if len(x_shape) != 4 or tuple(pool["dilations"]) != (1, 1) or sy != sx:
        return None, ("the window unit takes NCHW inputs, no dilation, and one stride for "
                      "both axes")
    n, c, h, w = x_shape
    (kh, kw), pads = pool["kernel_shape"], tuple(pool["pads"])
    if pool["ceil_mode"]:
        # on the input a negative end pad leaves (fusion.ir.shapes.crop_ends)
        (ch, cw), whole = shapes.crop_ends((h, w), pads)
        (oh, ow), _, _ = shapes.window((ch, cw), (kh, kw), (sy, sx), (1, 1), whole, ceil_mode=1)
        more_h = (oh - (ch + whole[0] + whole[2] - kh) // sy - 1) * sy
        more_w = (ow - (cw + whole[1] + whole[3] - kw) // sx - 1) * sx
        if (more_h and pads[2] < 0) or (more_w and pads[3] < 0):
            return None, ("its last windows run past the columns (rows) it crops, which "
                          "hold data there, not padding")
        pads = (pads[0], pads[1], pads[2] + more_h, pads[3] + more_w)
    try:
        params = WindowParams(N=n, H=h, W=w, C=c, kh=kh, kw=kw, stride=sy, pads=pads,
                              fill=-128, mode="max")
    except ValueError as exc:
        return None, f"not on the window unit: {exc}"
    refusal = WINDOW.legality(config, params)
    if refusal is not None:
        return None, f"not on the window unit: {refusal.text}"
    return params, ""


def _maxpool(graph: Graph, config: VariantConfig, anchor: Node, part: Part, *,
             window_unit: bool = True, **names: Any) -> KernelSpec | Refusal:
    """A max pool on the window unit (mode max) when the variant has it and the window fits
    it; otherwise the element-wise max of its window's positions, gathered on the host
    (:mod:`fusion.kernels.eltmax.kind`), with a note saying why."""
    x = graph.tensors[anchor.inputs[0]]
    pool = {k: anchor.attr(k) for k in ("kernel_shape", *_POOL_DEFAULTS)}
    pool = {k: (v if v is not None else _POOL_DEFAULTS[k]) for k, v in pool.items()}
    if x.dtype not in ("int8", "uint8"):
        return Refusal(MAX.name, "dtype", f"node {anchor.name!r} (maxpool): input is "
                       f"{x.dtype}; the accelerator pools int8/uint8 tensors", dtype=x.dtype)
    on_unit, why = _window_pool(config, x.shape, pool, window_unit)
    if on_unit is not None:
        # the pixel rows of the GEMM whose NCHW view x merely renames, where they lie
        rows = rows_start(graph, anchor.inputs[0])
        return KernelSpec(kind=WINDOW, params=on_unit,
                          inputs=(rows[0] if rows else anchor.inputs[0],), **names)
    planes = math.prod(pool["kernel_shape"])
    if planes < 2:
        return Refusal(MAX.name, "one_plane", f"node {anchor.name!r} (maxpool): a 1x1 window "
                       f"is a copy", planes=planes)
    window = Window(**{k: tuple(v) if isinstance(v, list | tuple) else v
                       for k, v in pool.items()})
    out = graph.tensors[names["output"]]
    c = config.cols
    return KernelSpec(kind=MAX, params=MaxParams(M=-(-math.prod(out.shape) // c), N=c,
                                                 n_inputs=planes, window=window),
                      inputs=(anchor.inputs[0],), note=why, **names)


def _emax(graph: Graph, config: VariantConfig, anchor: Node, part: Part,
          **names: Any) -> KernelSpec | Refusal:
    """``max(x, c)`` with a constant ``c`` (:mod:`fusion.passes.integer_eltwise`): the
    element-wise max of two planes (:mod:`fusion.kernels.eltmax.kind`), ``c`` written as a
    constant, both laid over the array's columns."""
    x = graph.tensors[anchor.inputs[0]]
    c = graph.initializers[anchor.inputs[1]]
    cols = config.cols
    params = MaxParams(M=-(-max(1, math.prod(x.shape)) // cols), N=cols, n_inputs=2)
    plane = rows_of(to_lanes(c, x.dtype), params.M, params.N)
    return KernelSpec(kind=MAX, params=params, inputs=(anchor.inputs[0],),
                      consts={"in1": plane}, **names)


def _concat(graph: Graph, config: VariantConfig, anchor: Node, part: Part,
            **names: Any) -> KernelSpec | Refusal:
    """A ``qconcat`` along channels as the join of its inputs' pixel rows
    (:mod:`fusion.kernels.concat`): of a ``qconcat``'s ``[N, H*W, C_i]`` rows along their
    last axis, or of NCHW tensors along axis 1, each read where a kernel stored it (the rows
    of the GEMM that made an NCHW input, found through its layout change)."""
    out = graph.tensors[anchor.outputs[0]]
    rank, axis = len(out.shape), anchor.attr("axis")
    if not ((rank == 3 and axis == 2) or (rank == 4 and axis == 1)):
        return Refusal(CONCAT.name, "axis", f"node {anchor.name!r} (qconcat) joins axis {axis} "
                       f"of a rank-{rank} tensor; the accelerator joins channels (the last "
                       f"axis of pixel rows, or axis 1 of NCHW)", axis=axis, rank=rank)
    inputs, widths = [], []
    for name in anchor.inputs:
        t = graph.tensors[name]
        rows = rows_start(graph, name) if rank == 4 else None
        inputs.append(rows[0] if rows else name)
        widths.append(t.shape[axis])
    params = ConcatParams(
        M=math.prod(out.shape) // out.shape[axis], widths=tuple(widths),
        mult=tuple(anchor.attr("mult")), shift=tuple(anchor.attr("shift")),
        x_zp=tuple(tensor_zp(graph.tensors[n], anchor) for n in anchor.inputs),
        zp=int(anchor.attr("zp")) - lanes_offset(out.dtype))
    return KernelSpec(kind=CONCAT, params=params, inputs=tuple(inputs), **names)


#: How each anchor op becomes a kernel (the ops :func:`fusion.compiler.lower.classify` calls
#: anchors); a segment without its anchor is a standalone pass.
ANCHORS: dict[str, Callable[..., KernelSpec | Refusal]] = {
    "qmatmul": _gemm,
    "maxpool": _maxpool,
    "emax": _emax,
    "qconcat": _concat,
}


def spec_for(graph: Graph, config: VariantConfig, chain: Chain, start: int,
             stop: int, options: CompileOptions = DEFAULT,
             data: ZeroHints | None = None) -> KernelSpec | Refusal:
    """The kernel of chain items ``[start, stop)`` (item 0 is the anchor, if any), or why the
    segment cannot be one kernel. ``data``: what is known of the inputs the plan will run on
    (:mod:`fusion.compiler.data_hints`; with ``options.zero_skip``).

    Raises
    ------
    CompileError
        For values the accelerator cannot hold (a bias leaving int32 ...).
    """
    items = [(n, None) for n in chain.prefix] + (
        [(chain.anchor, None)] if chain.anchor is not None else []) + [
        (o.node, o.stage) for o in chain.ops]
    part = items[start:stop]
    nodes = tuple(n.name for n, _ in part)
    names = {"name": nodes[0], "nodes": nodes, "output": part[-1][0].outputs[0]}
    if chain.prefix and start == 0:
        if stop == 1:
            return Refusal(CONV.name, "windows_alone", f"node {nodes[0]!r} (im2col) is a "
                           f"layout step: its windows are gathered by its GEMM's kernel or by "
                           f"the host")
        if (chain.anchor.attr("group", 1) or 1) > 1:
            if not options.window_unit:
                return Refusal(WINDOW.name, "option", "the window unit is turned off "
                               "(CompileOptions.window_unit)")
            if not config.window_unit:
                return Refusal(WINDOW.name, "no_window_unit", "the variant has no window "
                               "unit (hwgen generate --window-unit): a grouped convolution "
                               "runs as a grouped GEMM of host-gathered windows")
            return _depthwise(graph, config, chain.prefix[0], chain.anchor, part[1:], **names)
        if not options.window_conv:
            return Refusal(CONV.name, "option", "window convolutions are turned off "
                           "(CompileOptions.window_conv)")
        return _conv(graph, config, chain.prefix[0], chain.anchor, part[1:], **names)
    if chain.anchor is not None and start == len(chain.prefix):
        extra = {"qmatmul": {"grouped": options.grouped_gemm,
                             "sparse": options.sparse_weights,
                             "data": data if options.zero_skip else None},
                 "maxpool": {"window_unit": options.window_unit}}.get(chain.anchor.op, {})
        return ANCHORS[chain.anchor.op](graph, config, chain.anchor, part, **extra, **names)
    # a run of epilogue ops as one pass over [M, N]
    x = graph.tensors[part[0][0].inputs[0]]
    out_t = graph.tensors[names["output"]]
    N = x.shape[-1] if x.shape else 1  # noqa: N806
    M = math.prod(x.shape) // N  # noqa: N806
    stages, params, consts, residual = assemble_stages(graph, part, N, None)
    return KernelSpec(kind=PASS, params=PassParams(
        M=M, N=N, stages=stages, epilogue=params, src_dtype=_lane_dtype(x.dtype),
        out_dtype=_lane_dtype(out_t.dtype)),
        inputs=(x.name,) + ((residual,) if residual else ()), consts=consts, **names)


def _lane_dtype(dtype: str) -> str:
    return "int32" if dtype == "int32" else "int8"
