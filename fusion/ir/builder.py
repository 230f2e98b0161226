"""A small Python API to build hwgen graphs by hand (tests, examples, experiments).

Example
-------
>>> import numpy as np
>>> from fusion.ir.builder import GraphBuilder
>>> from fusion.ir.graph import Quant
>>> b = GraphBuilder("mlp")
>>> x = b.input("x", (1, 64), "int8", quant=Quant(0.05, -3))
>>> w = b.const("w", np.ones((64, 32), np.int8), quant=Quant(0.01, 0))
>>> acc = b.qmatmul(x, w)                     # int32, Quant(0.05 * 0.01, 0)
>>> y = b.requant(acc, Quant(0.1, 0))         # mult/shift from 0.0005 / 0.1
>>> g = b.build(outputs=[y])

Every method returns the name of the tensor it made. Output shapes and dtypes come from the op
catalog's inference (:func:`fusion.ir.ops.infer`), so a wrong operand fails at the call that
made it, naming the node. Node names are ``<op><n>`` unless given; output tensors are named
after their node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fusion.ir import ops
from fusion.ir.graph import Graph, GraphError, Node, Quant, Tensor
from fusion.ir.validation import validate as validate_graph

_NUMPY_DTYPES = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "int64": np.int64,
                 "float32": np.float32}


def _scaled(quant: Quant | None, factor: Quant | None, axis: int | None = None) -> Quant | None:
    """The Quant of a product of two quantized values (zero point 0), or None."""
    if quant is None or factor is None:
        return None
    scale = np.multiply(np.array(quant.scale), np.array(factor.scale))
    ax = factor.axis if factor.per_channel else quant.axis
    if scale.size == 1:
        return Quant(float(scale[0]), 0)
    return Quant(tuple(scale.tolist()), (0,) * scale.size, axis if axis is not None else ax)


class GraphBuilder:
    """Builds a :class:`~fusion.ir.graph.Graph` node by node.

    Parameters
    ----------
    name : str
        The graph's name.
    """

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._nodes: list[Node] = []
        self._tensors: dict[str, Tensor] = {}
        self._inputs: list[str] = []
        self._initializers: dict[str, np.ndarray] = {}
        self._counts: dict[str, int] = {}

    # -- names --------------------------------------------------------------------------

    def _fresh(self, base: str) -> str:
        """A name not used by any tensor or node yet, ``base`` or ``base<n>``."""
        taken = set(self._tensors) | {n.name for n in self._nodes}
        n = self._counts.get(base, 0)
        name = f"{base}{n}"
        while name in taken:
            n += 1
            name = f"{base}{n}"
        self._counts[base] = n + 1
        return name

    def _claim(self, name: str) -> None:
        if name in self._tensors:
            raise GraphError(f"tensor {name!r} already exists in graph {self.name!r}; "
                             f"pick another name")

    def tensor(self, name: str) -> Tensor:
        """The tensor ``name`` as built so far."""
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in graph {self.name!r}") from None

    # -- sources ------------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[int], dtype: str = "int8", *,
              quant: Quant | None = None) -> str:
        """Declare a graph input.

        Parameters
        ----------
        name : str
        shape : sequence of int
        dtype : str
            One of :data:`fusion.ir.graph.DTYPES`.
        quant : Quant, optional

        Returns
        -------
        str
            ``name``.
        """
        self._claim(name)
        self._tensors[name] = Tensor(name, tuple(shape), dtype, quant)
        self._inputs.append(name)
        return name

    def const(self, name: str | None, value: Any, *, dtype: str | None = None,
              quant: Quant | None = None) -> str:
        """Add a constant (initializer).

        Parameters
        ----------
        name : str or None
            None picks ``c<n>``.
        value : array_like
        dtype : str, optional
            Converts ``value``; by default its numpy dtype must be one of the IR's dtypes.
        quant : Quant, optional

        Returns
        -------
        str
            The constant's name.
        """
        name = self._fresh("c") if name is None else name
        self._claim(name)
        array = np.asarray(value)
        if dtype is not None:
            if dtype not in _NUMPY_DTYPES:
                raise GraphError(f"constant {name!r}: dtype {dtype!r} is not one of "
                                 f"{', '.join(_NUMPY_DTYPES)}")
            array = array.astype(_NUMPY_DTYPES[dtype])
        if array.dtype.name not in _NUMPY_DTYPES:
            raise GraphError(f"constant {name!r} has numpy dtype {array.dtype}; give dtype= "
                             f"one of {', '.join(_NUMPY_DTYPES)}")
        self._tensors[name] = Tensor(name, array.shape, array.dtype.name, quant)
        self._initializers[name] = array
        return name

    # -- any op -------------------------------------------------------------------------

    def op(self, op: str, *inputs: str, name: str | None = None, outputs: Sequence[str] = (),
           n_outputs: int = 1, quant: Quant | Sequence[Quant | None] | None = None,
           **attrs: Any) -> str | tuple[str, ...]:
        """Add a node of any catalog op; shapes and dtypes of its outputs are inferred.

        Parameters
        ----------
        op : str
            A name from :data:`fusion.ir.ops.SUPPORTED_OPS`.
        *inputs : str
            Tensor names (``""`` for an absent optional input).
        name : str, optional
            The node name (default ``<op><n>``).
        outputs : sequence of str, optional
            Output tensor names (default: the node name, ``<node>_<i>`` for several).
        n_outputs : int
            How many outputs, when ``outputs`` is not given.
        quant : Quant or sequence of Quant, optional
            Quantization of the output(s).
        **attrs
            Node attributes (see :mod:`fusion.ir.ops`).

        Returns
        -------
        str or tuple of str
            The output name, or names when there are several.
        """
        ops.get(op)  # an unknown op fails here, listing the supported ones
        node_name = self._fresh(op) if name is None else name
        if any(n.name == node_name for n in self._nodes):
            raise GraphError(f"a node named {node_name!r} already exists; pick another name")
        for i in inputs:
            if i and i not in self._tensors:
                raise GraphError(f"node {node_name!r} ({op}) reads {i!r}, which is not a tensor "
                                 f"of graph {self.name!r} yet")
        if not outputs:
            outputs = ((node_name,) if n_outputs == 1
                       else tuple(f"{node_name}_{k}" for k in range(n_outputs)))
        for out in outputs:
            self._claim(out)
        node = Node(node_name, op, tuple(inputs), tuple(outputs), attrs)
        types = ops.infer(node, [self._tensors[i] if i else None for i in inputs],
                          self._initializers)
        quants = quant if isinstance(quant, list | tuple) else (quant,) * len(outputs)
        for out, t, q in zip(outputs, types, quants, strict=True):
            self._tensors[out] = Tensor(out, t.shape, t.dtype, q)
        self._nodes.append(node)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    # -- hwgen integer ops --------------------------------------------------------------

    def qmatmul(self, a: str, b: str, **kw: Any) -> str:
        """``(a - a_zp) @ (b - b_zp)`` in int32; the result's Quant is ``a.scale * b.scale``."""
        q = _scaled(self.tensor(a).quant, self.tensor(b).quant, axis=-1)
        return self.op("qmatmul", a, b, quant=kw.pop("quant", q), **kw)

    def qconv2d(self, x: str, w: str, **kw: Any) -> str:
        """NCHW convolution in int32 (attrs ``strides``, ``pads``, ``dilations``, ``group``)."""
        q = _scaled(self.tensor(x).quant, self.tensor(w).quant, axis=1)
        return self.op("qconv2d", x, w, quant=kw.pop("quant", q), **kw)

    def bias_add(self, x: str, bias: str, *, axis: int = -1, **kw: Any) -> str:
        """``sat32(x + bias)`` along ``axis``; the result keeps x's Quant."""
        return self.op("bias_add", x, bias, axis=axis,
                       quant=kw.pop("quant", self.tensor(x).quant), **kw)

    def requant(self, x: str, quant: Quant, *, scale: float | Sequence[float] | None = None,
                out_dtype: str = "int8", axis: int | None = None, round_even: bool = False,
                **kw: Any) -> str:
        """Requantize int32 ``x`` to ``quant`` (int8 or uint8).

        Parameters
        ----------
        x : str
        quant : Quant
            The output's (per-tensor) quantization; its zero point becomes ``zp``.
        scale : float or sequence of float, optional
            The real multiplier; by default ``x.quant.scale / quant.scale``.
        out_dtype : {"int8", "uint8"}
        axis : int, optional
            Channel axis of a per-channel scale (default: x's quantization axis, else -1).
        round_even : bool
            Round exact halves to even (ONNX's ``QuantizeLinear``; the Q/DQ folds set it).
        """
        xq = self.tensor(x).quant
        if axis is None:
            axis = xq.axis if xq is not None and xq.per_channel else -1
        if scale is None:
            if xq is None:
                raise GraphError(f"requant of {x!r}: the input has no quantization to derive "
                                 f"the scale from; pass scale=")
            ratio = np.array(xq.scale) / quant.scale[0]
            scale = float(ratio[0]) if ratio.size == 1 else tuple(ratio.tolist())
        attrs = ops.requant_attrs(scale, quant.zero_point[0], out_dtype=out_dtype, axis=axis,
                                  round_even=round_even)
        return self.op("requant", x, quant=quant, **attrs, **kw)

    def relu(self, x: str, **kw: Any) -> str:
        """``max(x, 0)``; keeps x's Quant."""
        return self.op("relu", x, quant=kw.pop("quant", self.tensor(x).quant), **kw)

    def clamp(self, x: str, lo: int, hi: int, **kw: Any) -> str:
        """``min(max(x, lo), hi)``; keeps x's Quant."""
        return self.op("clamp", x, lo=lo, hi=hi, quant=kw.pop("quant", self.tensor(x).quant),
                       **kw)

    def qadd(self, a: str, b: str, quant: Quant, *, out_dtype: str = "int8", **kw: Any) -> str:
        """The sum of two quantized tensors, requantized to ``quant``."""
        qa, qb = self.tensor(a).quant, self.tensor(b).quant
        if qa is None or qb is None:
            raise GraphError(f"qadd of {a!r} and {b!r}: both inputs need a quantization")
        attrs = ops.qadd_attrs(qa.scale[0], qb.scale[0], quant.scale[0], quant.zero_point[0],
                               out_dtype=out_dtype)
        return self.op("qadd", a, b, quant=quant, **attrs, **kw)

    def _layout(self, op: str, x: str, **kw: Any) -> str:
        return self.op(op, x, quant=kw.pop("quant", self.tensor(x).quant), **kw)

    def maxpool(self, x: str, kernel_shape: Sequence[int], **kw: Any) -> str:
        """2-D max pooling (attrs ``strides``, ``pads``, ``dilations``, ``ceil_mode``)."""
        return self._layout("maxpool", x, kernel_shape=tuple(kernel_shape), **kw)

    def flatten(self, x: str, axis: int = 1, **kw: Any) -> str:
        """Flatten to 2-D at ``axis``."""
        return self._layout("flatten", x, axis=axis, **kw)

    def reshape(self, x: str, shape: Sequence[int], **kw: Any) -> str:
        """Reshape (ONNX 0 / -1 rules)."""
        return self._layout("reshape", x, shape=tuple(shape), **kw)

    def transpose(self, x: str, perm: Sequence[int] | None = None, **kw: Any) -> str:
        """Permute axes (reverse them when ``perm`` is None)."""
        return self._layout("transpose", x, perm=None if perm is None else tuple(perm), **kw)

    def im2col(self, x: str, kernel_shape: Sequence[int], **kw: Any) -> str:
        """NCHW -> ``[N, OH*OW, C*kH*kW]`` windows (attrs as :meth:`qconv2d`)."""
        return self._layout("im2col", x, kernel_shape=tuple(kernel_shape), **kw)

    def quantize(self, x: str, quant: Quant, dtype: str = "int8", **kw: Any) -> str:
        """float32 -> int8/uint8 with ``quant``."""
        return self.op("quantize", x, dtype=dtype, quant=quant, **kw)

    def dequantize(self, x: str, **kw: Any) -> str:
        """int -> float32 with x's Quant."""
        return self.op("dequantize", x, **kw)

    # -- result -------------------------------------------------------------------------

    def build(self, outputs: Sequence[str], *, validate: bool = True) -> Graph:
        """The graph with ``outputs`` as its outputs.

        Parameters
        ----------
        outputs : sequence of str
        validate : bool
            Run :func:`fusion.ir.validation.validate` on it (dtype, quantization and weight
            checks).

        Returns
        -------
        Graph

        Raises
        ------
        GraphError
            If an output is unknown, or validation fails.
        """
        if isinstance(outputs, str):
            outputs = (outputs,)
        for out in outputs:
            if out not in self._tensors:
                raise GraphError(f"output {out!r} is not a tensor of graph {self.name!r}")
        graph = Graph(self._nodes, self._tensors, self._inputs, tuple(outputs),
                      self._initializers, self.name)
        if validate:
            validate_graph(graph)
        return graph
