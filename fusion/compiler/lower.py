"""What each node of a legalized graph becomes on the accelerator, and the chains that may fuse.

Every node is one of:

- a **host step**: a model-boundary conversion (``quantize``, ``dequantize``) or pure data
  movement (``reshape``, ``flatten``, ``transpose``, ``im2col``, ``repeat`` and the ONNX
  forms). The runtime does these on the host between kernels; they compute nothing the
  accelerator could, and they are listed in the plan as host steps. An ``im2col`` that only a
  GEMM reads is the prefix of that GEMM's chain instead (:class:`Chain`): the window
  convolution gathers its windows on the accelerator, or the engine puts it on the host.
- a **kernel anchor**: ``qmatmul`` with a constant 2-D int8 weight without zero point (a GEMM;
  :mod:`fusion.passes.weight_zero_point` makes them so), ``maxpool`` (a chain of
  element-wise max passes) or ``qconcat`` (a channel join, :mod:`fusion.kernels.concat`).
- an **epilogue op**: ``bias_add``, ``requant``, ``relu``, ``clamp``, each one stage of the
  epilogue chain, and ``qadd``, the residual stage's scaled add, whose second operand is read
  from memory; they run fused after an anchor, or as standalone passes. ``add_wrap`` (an
  int8/uint8 tensor plus a constant, modulo 256) is the bias stage, and ends its kernel
  (:data:`ALSO_STAGES`).

- a **host op**: an op with no accelerator kernel (:data:`HOST_COMPUTE_OPS`: float ``Add``,
  ``Mul``, ``Softmax``, ``Sigmoid``, ``Concat``, ``Pad``, onnxruntime's ``QLinearSigmoid`` ...,
  and the ops a fold left in their ONNX form). The reference executor runs it on the host
  between kernels. It is planned, not silent: the plan lists it with its predicted cost
  (:mod:`fusion.cost.host`), ``--explain`` and ``hwgen run`` show it, and
  ``compile_model(host_fallback=False)`` (``--no-host-fallback``) refuses it instead.

Host steps have a *role* (:func:`host_role`): ``"layout"`` (the data movement and boundary
conversions of :data:`HOST_OPS`, which any model has) or ``"compute"`` (arithmetic the
accelerator would do if it could: a fallback, or an op the engine found cheaper on the host,
:data:`HOST_ALTERNATIVES`).

Anything else is refused with the node's name and the reason: GEMMs (``qmatmul`` with
activation weights, a convolution not in GEMM form, a float ``MatMul``/``Conv``/``Gemm``)
never fall back to the host, because that is the work the accelerator exists for: a GEMM
left in float means a quantization the passes could not fold, and the fix is the model's.

A *chain* is an anchor (or a first epilogue op) followed by the epilogue ops that consume its
result alone, in the canonical stage order. Which of them fuse is the engine's choice. A
``qadd`` joins the chain that makes either of its inputs when the other is already made
(a residual branch computed earlier, a graph input); ``relu`` and ``clamp`` after it join
too, as the bounds of its output (``res_lo``/``res_hi``), although their stages come before
the residual stage in the chain order.

Integer lanes: the accelerator computes on int8 and int32. A uint8 tensor is held as int8
``x - 128`` (its zero point moves by -128); :func:`to_lanes` and :func:`from_lanes` convert.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Graph, Node, Tensor
from hwgen.config import EPILOGUE_STAGES
from hwgen.stages import STAGES

#: Host steps: model-boundary conversions and data movement, by op name.
HOST_OPS = frozenset({"quantize", "dequantize", "reshape", "flatten", "transpose", "im2col",
                      "repeat", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
                      "Identity"})
#: Ops without an accelerator kernel that the host runs (the reference executor), by op name.
HOST_COMPUTE_OPS = frozenset({
    "Add", "Mul", "Max", "Min", "Relu", "Clip", "Softmax", "Sigmoid", "Concat", "Pad", "MaxPool",
    "AveragePool", "GlobalAveragePool", "QLinearAdd", "QLinearMul", "QLinearConcat",
    "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool", "QLinearGlobalAveragePool",
    "Sum", "LRN", "lrn", "BatchNormalization", "batchnorm", "QLinearSoftmax", "softmax"})
#: Host ops by design: exponentials and powers over a row or across channels, which GEMM
#: accelerators of this kind leave to the host (their cost is small beside the convolutions'
#: and they need a divider and a transcendental unit). Not a fallback: ``--no-host-fallback``
#: allows them.
HOST_BY_DESIGN = frozenset({"Softmax", "QLinearSoftmax", "softmax", "LRN", "lrn"})
#: Epilogue ops and the stage each one is (the graph op each stage spec implements).
STAGE_OF = {spec.op: spec.name for spec in STAGES if spec.op is not None}
#: Graph ops that run on a stage they are not the spec's op of: ``add_wrap``, an int8/uint8
#: tensor plus a constant modulo 256, is the bias stage on the int32 lanes (the sum of two
#: int8 values never saturates int32) stored as int8, which keeps the low byte
#: (:func:`hwgen.reference.to_dtype`): exactly ONNX's wrapping integer ``Add``.
ALSO_STAGES = {"add_wrap": "bias"}
#: Every epilogue op and its stage.
EPILOGUE_OPS = {**STAGE_OF, **ALSO_STAGES}
#: Epilogue ops whose result is exact only as stored (the wrap happens at the store): nothing
#: may follow them in their kernel.
ENDS_CHAIN = frozenset({"add_wrap"})
ANCHORS = ("qmatmul", "maxpool", "emax", "qconcat")
#: Anchors whose result goes straight to memory: no epilogue follows them in their kernel
#: (the residual stage, last in the chain, computes them; a join's passes end in its rescale).
STORES_DIRECT = frozenset({"maxpool", "emax", "qconcat"})
#: Epilogue ops that may follow a ``qadd`` in one chain: they bound its output.
BOUNDS_QADD = ("relu", "clamp")
#: Ops of kernel chains that the host may run instead, when the engine prices it cheaper
#: (:mod:`fusion.compiler.engine`): everything but a GEMM.
HOST_ALTERNATIVES = frozenset({"maxpool", "emax", "qconcat", "im2col", *EPILOGUE_OPS})


class CompileError(ValueError):
    """The model cannot be compiled for the variant; the message names what and why."""


def lanes_offset(dtype: str) -> int:
    """What is subtracted from a stored value to get its int8 lane value (128 for uint8)."""
    return 128 if dtype == "uint8" else 0


def to_lanes(x: np.ndarray, dtype: str) -> np.ndarray:
    """A tensor's values as the accelerator holds them (uint8 -> int8 ``x - 128``)."""
    if dtype == "uint8":
        return (np.asarray(x).astype(np.int16) - 128).astype(np.int8)
    return np.asarray(x)


def from_lanes(x: np.ndarray, dtype: str) -> np.ndarray:
    """Inverse of :func:`to_lanes`: lane values back to the tensor's dtype."""
    if dtype == "uint8":
        return (np.asarray(x).astype(np.int16) + 128).astype(np.uint8)
    return np.asarray(x).astype(dtype)


def tensor_zp(t: Tensor, node: Node) -> int:
    """A per-tensor zero point in lane terms; refuses per-channel ones."""
    q = t.quant
    if q is None:
        return 0 - lanes_offset(t.dtype)
    if q.per_channel and len(set(q.zero_point)) > 1:
        raise CompileError(f"node {node.name!r} ({node.op}): input {t.name!r} has per-channel "
                           f"zero points; the accelerator subtracts one zero point per tensor")
    return int(q.zero_point[0]) - lanes_offset(t.dtype)


def last_axis(axis: int, rank: int) -> bool:
    return axis % max(rank, 1) == max(rank, 1) - 1


@dataclass(frozen=True)
class ChainOp:
    """An epilogue op in a chain: its node and stage (None: a no-op, like relu on uint8)."""

    node: Node
    stage: str | None


@dataclass(frozen=True)
class Chain:
    """Nodes that may run as one kernel: an optional anchor, then epilogue ops in order.

    A GEMM whose A is the ``im2col`` of a convolution has it as its ``prefix``: the window
    convolution kernel gathers the windows itself (:mod:`fusion.kernels.conv`), or the host
    does and the GEMM runs alone (the engine prices both; :func:`fusion.compiler.kernels.spec_for`).
    """

    anchor: Node | None
    ops: tuple[ChainOp, ...]
    prefix: tuple[Node, ...] = ()

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.prefix + ((self.anchor,) if self.anchor is not None else ()) + tuple(
            o.node for o in self.ops)

    @property
    def name(self) -> str:
        return self.nodes[0].name

    @property
    def kind(self) -> str:
        return self.anchor.op if self.anchor is not None else "pass"


def _stage(graph: Graph, node: Node) -> str | None:
    """The epilogue stage of an epilogue op, or None for an identity (relu of uint8)."""
    x = graph.tensors[node.inputs[0]]
    rank = len(x.shape)
    if node.op in ("bias_add", "add_wrap"):
        if node.inputs[1] not in graph.initializers:
            raise CompileError(f"node {node.name!r} ({node.op}): the bias {node.inputs[1]!r} is "
                               f"not a constant; the bias stage reads a constant vector")
        if not last_axis(node.attr("axis", -1), rank):
            raise CompileError(f"node {node.name!r} ({node.op}): the bias runs along axis "
                               f"{node.attr('axis')} of {x.shape}; the accelerator adds it "
                               f"along the last axis (the GEMM's columns)")
    if node.op == "requant" and isinstance(node.attr("mult"), tuple) and \
            not last_axis(node.attr("axis", -1), rank):
        raise CompileError(f"node {node.name!r} (requant): per-channel along axis "
                           f"{node.attr('axis')} of {x.shape}; the accelerator requantizes "
                           f"per channel along the last axis only")
    if node.op == "relu" and x.dtype == "uint8":
        return None  # uint8 values are never negative
    if node.op == "qadd":
        tensor_zp(graph.tensors[node.inputs[0]], node)
        tensor_zp(graph.tensors[node.inputs[1]], node)
    return EPILOGUE_OPS[node.op]


def _qadd_on_host(graph: Graph, node: Node) -> bool:
    """A ``qadd`` the residual stage cannot run: its inputs broadcast (the stage adds two
    tensors of one shape, element by element) or are one tensor (the stage reads its
    residual from memory while the other streams in). The host runs it, as a host op."""
    a, b = (graph.tensors[n] for n in node.inputs)
    return a.shape != b.shape or node.inputs[0] == node.inputs[1]


def classify(graph: Graph, node: Node) -> str:
    """``"host"``, ``"anchor"`` or ``"stage"``; raises :class:`CompileError` for the rest."""
    if node.op in HOST_OPS or (node.op == "qadd" and _qadd_on_host(graph, node)):
        return "host"
    if node.op in EPILOGUE_OPS:
        return "stage"
    if node.op == "qmatmul":
        a, b = (graph.tensors[n] for n in node.inputs)
        if node.inputs[1] not in graph.initializers:
            raise CompileError(f"node {node.name!r} (qmatmul): its second operand {b.name!r} "
                               f"is not a constant; the accelerator's GEMMs take constant "
                               f"weights (an activation x activation product is not supported)")
        if len(b.shape) != 2:
            raise CompileError(f"node {node.name!r} (qmatmul): weight {b.name!r} is "
                               f"{b.dtype}{list(b.shape)}; the accelerator needs a 2-D weight "
                               f"(K x N)")
        if b.dtype != "int8" or (b.quant is not None and any(b.quant.zero_point)):
            # fusion.passes.weight_zero_point folds these into int8 weights; a graph that
            # skipped the passes still has them
            raise CompileError(f"node {node.name!r} (qmatmul): weight {b.name!r} is {b.dtype} "
                               f"with zero point(s) {list(b.quant.zero_point) if b.quant else 0}"
                               f"; the array multiplies int8 weights without a zero point: run "
                               f"the passes (fusion.passes.driver.optimize) first, which fold "
                               f"weight zero points")
        tensor_zp(a, node)
        return "anchor"
    if node.op in ("maxpool", "emax"):
        tensor_zp(graph.tensors[node.inputs[0]], node)
        return "anchor"
    if node.op == "qconcat":
        return "anchor"
    if node.op == "qconv2d":
        raise CompileError(f"node {node.name!r} (qconv2d) was not put into GEMM form; see "
                           f"`hwgen inspect` for why conv legalization left it")
    if node.op in HOST_COMPUTE_OPS:
        return "host"
    spec = ops.get(node.op)  # an unknown op raises with the supported list
    raise CompileError(f"node {node.name!r} ({node.op}: {spec.summary}) has no accelerator "
                       f"kernel, and the host runs only layout ops and "
                       f"{', '.join(sorted(HOST_COMPUTE_OPS))}: quantize it (a GEMM runs on "
                       f"the accelerator only)")


def host_role(node: Node) -> str:
    """``"layout"`` for data movement and boundary conversions, ``"compute"`` for arithmetic."""
    return "layout" if node.op in HOST_OPS else "compute"


def is_fallback(node: Node) -> bool:
    """Whether the host computes ``node`` in the accelerator's place (what
    ``--no-host-fallback`` refuses): compute, and not on the host by design
    (:data:`HOST_BY_DESIGN`)."""
    return host_role(node) == "compute" and node.op not in HOST_BY_DESIGN


def chains(graph: Graph) -> tuple[list[Chain], list[Node]]:
    """The chains of ``graph`` and its host steps, each in topological order."""
    outputs = set(graph.outputs)
    taken: set[str] = set()
    found: list[Chain] = []
    host: list[Node] = []
    for node in graph.topo_order():
        if node.name in taken:
            continue
        if _windows_of(graph, node) is not None:
            continue  # the prefix of its GEMM's chain, made when the GEMM is reached
        role = classify(graph, node)
        prefix: tuple[Node, ...] = ()
        if role == "anchor" and node.op == "qmatmul":
            windows = graph.producer(node.inputs[0])
            if windows is not None and _windows_of(graph, windows) is node:
                prefix = (windows,)
                taken.add(windows.name)
        if role == "host":
            host.append(node)
            taken.add(node.name)
            continue
        anchor = node if role == "anchor" else None
        items: list[ChainOp] = [] if anchor else [ChainOp(node, _stage(graph, node))]
        taken.add(node.name)
        last_rank = _rank(items[-1].stage) if anchor is None else -1
        bounding = node.op == "qadd"  # relu and clamp after a qadd bound its output
        tail = node
        # max results go straight to memory: no epilogue follows them in the same kernel.
        while (anchor is None or anchor.op not in STORES_DIRECT) and tail.op not in ENDS_CHAIN:
            out = tail.outputs[0]
            users = graph.consumers(out)
            if out in outputs or len(users) != 1:
                break
            nxt = users[0]
            if nxt.op not in EPILOGUE_OPS or not _joins(graph, nxt, out, taken):
                break
            stage = _stage(graph, nxt)
            bounds = bounding and nxt.op in BOUNDS_QADD
            if stage is not None and _rank(stage) <= last_rank and not bounds:
                break  # out of the chain's order: it starts a chain of its own
            items.append(ChainOp(nxt, stage))
            taken.add(nxt.name)
            if stage is not None and not bounds:
                last_rank = _rank(stage)
            bounding = nxt.op == "qadd" or bounds
            tail = nxt
        found.append(Chain(anchor, tuple(items), prefix))
    return found, host


def _windows_of(graph: Graph, node: Node) -> Node | None:
    """The GEMM that reads ``node``'s windows as its A, when ``node`` is an ``im2col`` that
    only it reads; None otherwise."""
    if node.op != "im2col" or node.outputs[0] in graph.outputs:
        return None
    users = graph.consumers(node.outputs[0])
    if len(users) != 1 or users[0].op != "qmatmul" or users[0].inputs[0] != node.outputs[0]:
        return None
    return users[0] if classify(graph, users[0]) == "anchor" else None


def _joins(graph: Graph, node: Node, running: str, made: set[str]) -> bool:
    """Whether ``node`` can take ``running`` (the chain's result so far) as its stage input: an
    epilogue op reads it as its first input; a ``qadd`` as either, when its other input is
    a constant, a graph input or the output of a node already placed (``made``), so that it
    is in memory before the kernel runs."""
    if node.op != "qadd":
        return node.inputs[0] == running
    if running not in node.inputs or _qadd_on_host(graph, node):
        return False
    other = residual_input(node, running)
    producer = graph.producer(other)
    return producer is None or producer.name in made


def residual_input(node: Node, running: str) -> str:
    """The input of a ``qadd`` that the residual stage reads from memory: the one that is not
    ``running``, the chain's result so far."""
    a, b = node.inputs
    return b if a == running else a


def _rank(stage: str | None) -> int:
    return EPILOGUE_STAGES.index(stage) if stage is not None else -1


def refuse_host_compute(graph: Graph, nodes: Sequence[Node], how: str) -> CompileError:
    """The refusal of compute ops on the host: a first line with the fix, then one line per op
    naming the node and the op."""
    lines = [f"{len(nodes)} op(s) have no accelerator kernel and {how} keeps them off the "
             f"host; drop {how} to run them on the host (listed in the plan), or change the "
             f"model:"]
    for n in nodes:
        lines.append(f"  node {n.name!r} ({n.op}: {ops.get(n.op).summary})")
    return CompileError("\n".join(lines))
