"""What the compiler may use: every technique by default; each one can be turned off to
measure what it brings (``make bench``'s with-and-without table, ``hwgen compile --without``).

A plan records its options (``plan.json``), and reading it back applies the same ones, so a
plan compiled without a technique stays a plan without it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CompileOptions:
    """Techniques the compiler may use.

    Parameters
    ----------
    window_conv : bool
        Convolutions gather their windows on the accelerator (the window-convolution kernel,
        :mod:`fusion.kernels.conv`) instead of the host's ``im2col``.
    kmajor_store : bool
        A kernel whose readers take its output K-major stores it so, and they read it where
        it lies (:mod:`fusion.compiler.store_layout`); off, the host repacks it.
    grouped_gemm : bool
        A grouped (depthwise) convolution runs as a grouped GEMM, each column block over its
        own rows of K (:func:`fusion.compiler.kernels.grouping`); off, as the dense GEMM of
        its block-diagonal weights.
    window_unit : bool
        A depthwise convolution runs on the window unit (:mod:`fusion.kernels.window`), when
        the variant has one; off, as a grouped GEMM of host-gathered windows.
    relayout : bool
        A tensor whose kernels read it in place in two layouts is copied into the second on
        the accelerator (a GEMM of the identity, :mod:`fusion.compiler.relayout`) when that
        is predicted cheaper than the host repacking it; off, the host repacks it.
    sparse_weights : bool
        A GEMM whose constant weights have all-zero blocks is also priced as the block-sparse
        program that never loads or multiplies them (:mod:`fusion.kernels.gemm.sparse`), and
        runs so when that is predicted faster; off, every GEMM runs dense.
    zero_skip : bool
        A GEMM whose A the host made from a model input, compiled knowing that input
        (:mod:`fusion.compiler.data_hints`), is also priced as the zero-skipping program,
        which jumps over the all-zero-point tiles of A at run time
        (:mod:`fusion.kernels.gemm.skip`); off, every GEMM runs dense whatever the data.
    """

    window_conv: bool = True
    kmajor_store: bool = True
    grouped_gemm: bool = True
    window_unit: bool = True
    relayout: bool = True
    sparse_weights: bool = True
    zero_skip: bool = True

    def to_dict(self) -> dict[str, bool]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> CompileOptions:
        """The options of a plan's ``options`` object; unknown or non-boolean entries raise
        ValueError naming them."""
        if not isinstance(data, dict):
            raise ValueError(f"options must be an object, not {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        for key, value in data.items():
            if key not in names:
                raise ValueError(f"unknown compile option {key!r} (known: "
                                 f"{', '.join(sorted(names))})")
            if not isinstance(value, bool):
                raise ValueError(f"compile option {key!r} must be true or false, not {value!r}")
        return cls(**data)

    @classmethod
    def without(cls, names: str) -> CompileOptions:
        """All options but the comma-separated ``names`` (``hwgen compile --without``)."""
        off = [n.strip().replace("-", "_") for n in names.split(",") if n.strip()]
        return cls.from_dict({n: False for n in off})

    @property
    def label(self) -> str:
        """``"all"`` or ``"without x, y"``."""
        off = [k for k, v in self.to_dict().items() if not v]
        return "all" if not off else "without " + ", ".join(off)


DEFAULT = CompileOptions()
