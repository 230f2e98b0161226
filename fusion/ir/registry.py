"""The op registry: what the catalog knows of an op, and the decorator that registers one.

The catalogs (:mod:`fusion.ir.catalog_onnx`, :mod:`fusion.ir.catalog_hwgen`) register their
ops here; :mod:`fusion.ir.ops` imports both and looks ops up. Imports only go down:
``registry`` <- catalogs <- ``ops`` <- ``validation``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.ir.graph import GraphError, Node, Tensor

#: Value range of each integer dtype (also the legal zero points of tensors of that dtype).
INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(1 << 31), (1 << 31) - 1),
             "int64": (-(1 << 63), (1 << 63) - 1)}
INT8S = ("int8", "uint8")
INTS = ("int8", "uint8", "int32", "int64")
#: ONNX ``TensorProto`` element-type numbers of the dtypes the IR has (for ``output_dtype``).
ONNX_ELEM_TYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64"}


class _Required:
    def __repr__(self) -> str:
        return "<required>"


#: Default of an attribute that has to be given.
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class TensorType:
    """An inferred output: static shape and dtype."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Call:
    """One node being checked: its spec, merged attributes, input tensors and constants."""

    node: Node
    spec: OpSpec
    attrs: dict[str, Any]
    inputs: tuple[Tensor | None, ...]
    constants: Mapping[str, np.ndarray]

    def slot(self, name: str) -> int:
        return self.spec.slots.index(name)

    def tensor(self, name: str) -> Tensor | None:
        """The input tensor in slot ``name`` (None when an optional input is absent)."""
        i = self.slot(name)
        return self.inputs[i] if i < len(self.inputs) else None

    def value(self, name: str) -> np.ndarray | None:
        """The constant value of slot ``name``, or None if it is not an initializer."""
        i = self.slot(name)
        if i >= len(self.node.inputs) or not self.node.inputs[i]:
            return None
        return self.constants.get(self.node.inputs[i])

    def error(self, message: str) -> GraphError:
        return GraphError(f"node {self.node.name!r} ({self.node.op}): {message}")

    def need(self, name: str, dtypes: Sequence[str], why: str = "") -> Tensor:
        """The tensor in slot ``name``, checking it is present and of one of ``dtypes``."""
        t = self.tensor(name)
        if t is None:
            raise self.error(f"input {name!r} is missing")
        if t.dtype not in dtypes:
            raise self.error(f"input {name!r} ({t.name!r}) is {t.dtype}, but {self.node.op} "
                             f"takes {' or '.join(dtypes)}{why}")
        return t

    def same(self, first: str, *others: str) -> None:
        """Check the present inputs in ``others`` have the dtype of ``first``."""
        a = self.tensor(first)
        for name in others:
            b = self.tensor(name)
            if a is not None and b is not None and a.dtype != b.dtype:
                raise self.error(f"input {name!r} ({b.name!r}) is {b.dtype} but {first!r} "
                                 f"({a.name!r}) is {a.dtype}; they must match")


@dataclass(frozen=True)
class OpSpec:
    """What the catalog knows of one op.

    Parameters
    ----------
    name : str
    domain : {"onnx", "hwgen"}
    slots : tuple of str
        Input names in order; those from ``min_inputs`` on are optional.
    min_inputs : int
    attrs : mapping of str to default
        :data:`REQUIRED` marks an attribute that must be given.
    infer : callable
        ``infer(call) -> tuple of TensorType``; raises :class:`GraphError`.
    const : frozenset of str
        Slots whose value must be an initializer (scales, zero points, shapes, biases).
    weights : frozenset of str
        Slots that hold weights when they are initializers (checked to be int8).
    summary : str
        One line of semantics.
    """

    name: str
    domain: str
    slots: tuple[str, ...]
    min_inputs: int
    attrs: Mapping[str, Any]
    infer: Callable[[Call], tuple[TensorType, ...]]
    const: frozenset[str] = field(default_factory=frozenset)
    weights: frozenset[str] = field(default_factory=frozenset)
    summary: str = ""


#: Every registered op by name; the catalogs fill it when they are imported, and
#: :mod:`fusion.ir.ops` imports both catalogs and looks ops up here.
SPECS: dict[str, OpSpec] = {}


def register(name: str, slots: str, min_inputs: int | None = None, *, const: str = "",
             weights: str = "", summary: str = "", **attrs: Any):
    """Decorator that registers an ``infer(call)`` function as the spec of op ``name``.

    Parameters
    ----------
    name : str
        The op name; lower case names are hwgen ops, CamelCase ones ONNX ops.
    slots : str
        Input names in order, separated by spaces.
    min_inputs : int, optional
        How many inputs are required (default: all of ``slots``).
    const, weights : str
        Space-separated slots (see :class:`OpSpec`).
    summary : str
        One line of semantics.
    **attrs
        Attribute defaults; :data:`REQUIRED` for those that must be given.

    Raises
    ------
    ValueError
        If ``name`` is already registered (two catalogs defining one op).
    """
    if name in SPECS:
        raise ValueError(f"op {name!r} is registered twice; keep one definition of it")

    def decorate(fn: Callable[[Call], tuple[TensorType, ...]]):
        names = tuple(slots.split())
        SPECS[name] = OpSpec(
            name=name, domain="hwgen" if name.islower() else "onnx", slots=names,
            min_inputs=len(names) if min_inputs is None else min_inputs, attrs=attrs,
            infer=fn, const=frozenset(const.split()), weights=frozenset(weights.split()),
            summary=summary)
        return fn
    return decorate
