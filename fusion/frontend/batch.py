"""A batch for an imported model: its graph inputs lead with ``B`` instead of 1.

Exported models usually fix a batch of 1 on every input. :func:`batch_graph` gives each input
the leading dimension ``B`` and infers every shape again, so that one compiled plan runs ``B``
inferences: every kernel takes all of them at once (a GEMM's M grows ``B`` times, and its
weights are loaded once per layer, not once per input).

Shape inference follows the batch by itself through every op that keeps axis 0 as the batch
(Conv, pools, Gemm, Flatten at axis 1, elementwise ops). ``Reshape`` is the one op whose
constant may spell out the batch: a literal 1 in the batch position becomes ``B`` (in a new
constant; the original may be read elsewhere), while ``0`` (copy) and ``-1`` (inferred) follow
by themselves. Whatever else moves or merges the batch axis is refused: every tensor computed
from the inputs must have the shape it has at batch 1 with the leading 1 replaced by ``B``,
which is also what makes the batched run equal ``B`` runs of one input each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from fusion.ir import shapes
from fusion.ir.graph import GraphError, Node, Tensor

#: The infer step: a node, its input tensors and the constants -> its output tensors (the
#: importer's, so that both shape walks are the same code).
InferFn = Callable[[Node, Sequence[Tensor | None], Mapping[str, np.ndarray]],
                   Sequence[Tensor]]


def check_batch(batch: object) -> int:
    """``batch`` if it is a whole number of at least 1.

    Raises
    ------
    GraphError
        For anything else (0, negatives, non-integers).
    """
    if not isinstance(batch, int | np.integer) or isinstance(batch, bool) or batch < 1:
        raise GraphError(f"the batch must be a whole number of at least 1, not {batch!r}")
    return int(batch)


def batched_input(name: str, shape: Sequence[int], batch: int) -> tuple[int, ...]:
    """The shape of graph input ``name`` (``shape`` at batch 1) for ``batch`` inputs.

    Raises
    ------
    GraphError
        If the input has no leading batch axis of 1 (a scalar, or a first dimension that is
        not 1: a model with a batch fixed at another size, or with no batch axis at all).
    """
    if not shape or shape[0] != 1:
        raise GraphError(f"--batch {batch}: graph input {name!r} has shape {tuple(shape)}, "
                         f"which does not lead with a batch axis of 1; --batch needs a model "
                         f"whose inputs are one inference each (shape 1,...): use --batch 1")
    return (batch, *shape[1:])


def batched_reshape(node: Node, base_in: Sequence[int], constants: dict[str, np.ndarray],
                    batch: int) -> Node:
    """``node`` (a Reshape) for a batched input: a literal 1 in the batch position of its
    constant shape becomes ``batch`` (a new constant, added to ``constants``).

    ``base_in`` is the data input's shape at batch 1. ``0`` and ``-1`` in the batch position
    follow the batch by themselves and are kept.

    Raises
    ------
    GraphError
        If the Reshape does not keep the batch as its leading axis (at batch 1 its output
        does not lead with 1, or the constant names another size there).
    """
    target = constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if target is None:
        return node  # the catalog's inference refuses a shape that is not a constant
    flat = [int(t) for t in np.ravel(target)]
    allowzero = int(dict(node.attrs).get("allowzero", 0))
    base_out = shapes.reshape(base_in, flat, allowzero)
    if not flat or base_out[0] != 1 or flat[0] not in (1, -1) + ((0,) if not allowzero else ()):
        raise GraphError(f"--batch {batch}: Reshape node {node.name!r} reshapes "
                         f"{tuple(base_in)} into {tuple(flat)}, which does not keep the batch "
                         f"as the leading axis; hwgen cannot tell where the batch goes: use "
                         f"--batch 1, or export the model with shape 0 or -1 in the batch "
                         f"position")
    if flat[0] != 1:
        return node
    name = f"{node.inputs[1]}_batch{batch}"
    constants[name] = np.array([batch, *flat[1:]], np.int64)
    return Node(node.name, node.op, (node.inputs[0], name, *node.inputs[2:]), node.outputs,
                node.attrs)


def batch_graph(nodes: Sequence[Node], inputs: Mapping[str, Tensor],
                constants: dict[str, np.ndarray], base: Mapping[str, Tensor], batch: int,
                infer: InferFn) -> tuple[list[Node], dict[str, Tensor]]:
    """The nodes and tensors of the model at ``batch`` inputs.

    Parameters
    ----------
    nodes : sequence of Node
        In dependency order.
    inputs : mapping of str to Tensor
        The graph inputs and constants at batch 1.
    constants : dict of str to ndarray
        Constant values; Reshape shapes for the batch are added to it.
    base : mapping of str to Tensor
        Every tensor at batch 1 (the shapes the batched ones must follow).
    batch : int
    infer : callable
        Output tensors of a node from its input tensors and the constants.

    Returns
    -------
    nodes : list of Node
        With Reshape shapes rewritten where the batch needs it.
    tensors : dict of str to Tensor
        Every tensor at ``batch``.

    Raises
    ------
    GraphError
        For an input without a batch axis, or a node that moves or merges the batch axis,
        naming it and the fix.
    """
    tensors = dict(inputs)
    batched: set[str] = set()
    for name, t in inputs.items():
        if name not in constants:
            tensors[name] = Tensor(name, batched_input(name, t.shape, batch), t.dtype)
            batched.add(name)
    out_nodes = []
    for node in nodes:
        if node.op == "Reshape" and node.inputs and node.inputs[0] in batched:
            node = batched_reshape(node, base[node.inputs[0]].shape, constants, batch)
            for name in node.inputs[1:]:
                if name in constants and name not in tensors:
                    tensors[name] = Tensor(name, constants[name].shape,
                                           str(constants[name].dtype))
        out_nodes.append(node)
        outs = infer(node, [tensors[i] if i else None for i in node.inputs], constants)
        follows = any(i in batched for i in node.inputs)
        for out, t in zip(node.outputs, outs, strict=True):
            tensors[out] = t
            if not follows:
                continue
            batched.add(out)
            one = tuple(base[out].shape)
            if not one or one[0] != 1 or tuple(t.shape) != (batch, *one[1:]):
                raise GraphError(f"--batch {batch}: {node.op} node {node.name!r} gives "
                                 f"{out!r} the shape {tuple(t.shape)} at batch {batch} "
                                 f"(at batch 1: {tuple(base[out].shape)}), so it does not "
                                 f"keep the batch as the leading axis; use --batch 1")
    return out_nodes, tensors
