"""Regions of external memory: where a kernel's operands, constants and output lie.

A kernel's regions are named, word-aligned spans of the external memory (word-addressed,
``config.port_bytes`` bytes a word): allocated first fit for a kernel built alone
(:class:`Allocator`), or at the word addresses a model's memory plan gives (:func:`place`).
What a region holds, and in which layout, is :mod:`fusion.kernels.layout`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from hwgen.config import VariantConfig

__all__ = ["Allocator", "Region", "place"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Region:
    """A named region of external memory: a word address and a size in bytes."""

    name: str
    addr: int
    nbytes: int

    def words(self, port_bytes: int) -> int:
        return _ceil_div(self.nbytes, port_bytes)


class Allocator:
    """Hands out word-aligned regions of the external memory, first fit from ``base``.

    Each region starts on a multiple of ``align_bytes`` (at least one word), so that regions
    start on round addresses in memory dumps and never share a word.
    """

    def __init__(self, config: VariantConfig, *, base: int = 0, align_bytes: int = 64) -> None:
        self._config = config
        self._align = max(1, align_bytes // config.port_bytes)
        self._next = base
        self.regions: dict[str, Region] = {}

    def alloc(self, name: str, nbytes: int) -> Region:
        """Reserve ``nbytes`` (rounded up to whole words) under a unique ``name``."""
        if name in self.regions:
            raise ValueError(f"memory region {name!r} is allocated twice")
        if nbytes < 1:
            raise ValueError(f"memory region {name!r} needs a positive size, not {nbytes}")
        addr = _ceil_div(self._next, self._align) * self._align
        region = Region(name, addr, nbytes)
        end = addr + region.words(self._config.port_bytes)
        if end > self._config.mem_words:
            raise ValueError(
                f"memory region {name!r} ({nbytes} bytes) ends at word {end}, beyond the "
                f"{self._config.mem_words} words of external memory "
                f"(mem_addr_bits={self._config.mem_addr_bits}); use a smaller problem or a "
                f"variant with more mem_addr_bits"
            )
        self._next = end
        self.regions[name] = region
        return region

    @property
    def used_words(self) -> int:
        return self._next


def place(config: VariantConfig, sizes: Mapping[str, int],
          placement: Mapping[str, int] | None = None, *, what: str = "kernel") -> dict[str, Region]:
    """The regions of a kernel: at the word addresses of ``placement``, or allocated.

    A model compiler plans memory across kernels and hands each kernel the addresses of its
    operands; a kernel built alone packs its regions first fit from word 0 (:class:`Allocator`).

    Parameters
    ----------
    config : VariantConfig
        The variant (its memory size and word width).
    sizes : mapping of str to int
        ``name -> bytes`` of each region, in allocation order.
    placement : mapping of str to int, optional
        ``name -> word address``; it must name exactly the regions of ``sizes``.
    what : str
        The kernel, for error messages.

    Returns
    -------
    dict of str to Region
        In the order of ``sizes``.

    Raises
    ------
    ValueError
        Naming the region: missing from or unknown to ``placement``, an address that is not
        a non-negative integer, a region running past the end of memory, or two regions that
        overlap.
    """
    if placement is None:
        alloc = Allocator(config)
        for name, nbytes in sizes.items():
            alloc.alloc(name, nbytes)
        return dict(alloc.regions)
    if not isinstance(placement, Mapping):
        raise ValueError(f"a placement maps region names to word addresses, not "
                         f"{type(placement).__name__}")
    missing = [name for name in sizes if name not in placement]
    unknown = [str(name) for name in placement if name not in sizes]
    if missing or unknown:
        detail = "; ".join(part for part in (
            f"missing {', '.join(missing)}" if missing else "",
            f"unknown {', '.join(unknown)}" if unknown else "") if part)
        raise ValueError(f"the placement must name exactly the {what}'s regions "
                         f"({', '.join(sizes)}): {detail}")
    regions = {}
    for name, nbytes in sizes.items():
        addr = placement[name]
        if not isinstance(addr, int | np.integer) or isinstance(addr, bool) or addr < 0:
            raise ValueError(f"memory region {name!r} is placed at {addr!r}; a placement gives "
                             f"each region a non-negative integer word address")
        if nbytes < 1:
            raise ValueError(f"memory region {name!r} needs a positive size, not {nbytes}")
        region = Region(name, int(addr), nbytes)
        end = region.addr + region.words(config.port_bytes)
        if end > config.mem_words:
            raise ValueError(
                f"memory region {name!r} ({nbytes} bytes) placed at word {region.addr} ends at "
                f"word {end}, beyond the {config.mem_words} words of external memory "
                f"(mem_addr_bits={config.mem_addr_bits}); place it lower or use a variant with "
                f"more mem_addr_bits")
        regions[name] = region
    # Sorted by address, a region overlaps another iff it starts before the furthest end so
    # far (a large region may cover several later ones).
    last: Region | None = None
    for region in sorted(regions.values(), key=lambda r: r.addr):
        if last is not None and region.addr < last.addr + last.words(config.port_bytes):
            raise ValueError(
                f"memory regions {last.name!r} (words {last.addr}.."
                f"{last.addr + last.words(config.port_bytes) - 1}) and {region.name!r} (words "
                f"{region.addr}..{region.addr + region.words(config.port_bytes) - 1}) overlap; "
                f"place them apart")
        if last is None or (region.addr + region.words(config.port_bytes)
                            > last.addr + last.words(config.port_bytes)):
            last = region
    return regions
