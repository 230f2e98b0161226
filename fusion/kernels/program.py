"""A compiled kernel of any kind: its program through the kernel cache, and one metadata schema.

A kernel has two halves: the program (with its memory layout), which depends only on the
kind's params and the placement of its regions, and the memory image and expected result,
which depend on the operand *values*. Only the first half is worth caching: the same layer
runs with new activations every time, and the operand bytes are large. So the cache key
(:func:`key_parts`) is the signature, exactly what the program depends on:

- the kind and the variant (its ``key()``: array shape, port width, scratchpad and imem
  depths, chain);
- the kind's params (:meth:`KernelKind.key_params`: shapes, stages, quantization, the
  requested tiling...);
- the placement of the regions (``None``: allocated from word 0): addresses are immediates.

The value is a :class:`~fusion.kernels.cache.CacheEntry`: the words, the listing, and the
metadata below. The program is built from the params and the placed regions alone
(:meth:`KernelKind.build`), never from operand values. :class:`Kernel` packs operands into the
regions (checking them against the metadata first), computes their expected result, and
decodes the output.

The metadata has one schema for every kind, so that the runtime never guesses a format:

``kind``, ``variant``
    The kind's name and the variant's key.
``params``
    :meth:`KernelKind.key_params`: what the program was compiled for.
``dims``
    ``[M, K, N]`` of the tile geometry (``K`` is 1 without a reduction); the output is
    ``M x N``.
``stages``, ``quant``
    The epilogue stages the program runs and its control-register values
    (:class:`hwgen.reference.EpilogueParams` as a dict).
``operands``, ``out``
    ``{name: [dtype, shape]}`` of every operand, and ``[dtype, shape]`` of the output.
``regions``, ``reads``, ``placement``
    ``{name: [word address, bytes]}`` of every region, those read back (``out``), and the
    placement asked for (or None).
``chosen``
    What the builder chose that the params left open (the GEMM's tiling).
``bytes_loaded``, ``bytes_stored``, ``ideal_cycles``, ``program_words``
    Figures of the program.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion.kernels import layout
from fusion.kernels.cache import CacheEntry, KernelCache
from fusion.kernels.codegen import Program, load_bytes
from fusion.kernels.layout import GemmDims, Region
from fusion.kernels.protocol import Build, KernelKind, KernelRefused, Operand
from hwgen import isa
from hwgen.config import VariantConfig
from hwgen.reference import EpilogueParams


def placement_key(placement: Mapping[str, int] | None) -> dict[str, int] | None:
    """A placement as key/metadata JSON: ``{name: word address}`` sorted by name, or None.

    Check the placement against the kernel's regions first (:func:`fusion.kernels.layout.place`);
    this only normalizes it (numpy integers become ints).

    Raises
    ------
    ValueError
        If ``placement`` is not a mapping of names to integers.
    """
    if placement is None:
        return None
    if not isinstance(placement, Mapping):
        raise ValueError(f"a placement maps region names to word addresses, not "
                         f"{type(placement).__name__}")
    out = {}
    for name in sorted(placement, key=str):
        addr = placement[name]
        if not isinstance(name, str) or not isinstance(addr, int | np.integer) or \
                isinstance(addr, bool):
            raise ValueError(f"a placement maps region names to integer word addresses, not "
                             f"{name!r} -> {addr!r}")
        out[name] = int(addr)
    return out


def key_parts(kind: KernelKind, config: VariantConfig, params: Any,
              placement: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The cache key parts of a kernel's program (see the module docstring)."""
    return {"op": kind.name, "variant": config.key(), "params": kind.key_params(params),
            "placement": placement_key(placement)}


def check_value(name: str, value: Any, operand: Operand, what: str) -> np.ndarray:
    """``value`` as an array of the operand's dtype, refused with a message naming it.

    Raises
    ------
    ValueError
        A missing value, another shape, a non-integer array, or values outside the dtype.
    """
    dtype, shape = operand
    if value is None:
        raise ValueError(f"the {what} needs a {name} operand: {dtype} of shape {tuple(shape)}")
    x = np.asarray(value)
    if list(x.shape) != list(shape):
        raise ValueError(f"operand {name} has shape {x.shape}, the {what} was compiled for "
                         f"{tuple(shape)}")
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"operand {name} must be an integer array ({dtype}), not {x.dtype}")
    info = np.iinfo(dtype)
    if x.size and (x.min() < info.min or x.max() > info.max):
        raise ValueError(f"operand {name} has values outside {dtype} "
                         f"({int(x.min())}..{int(x.max())}); the {what} was compiled for "
                         f"{dtype}")
    return x.astype(dtype)


def figures(config: VariantConfig, program: Program, *, busy: int, stored: int,
            chosen: Mapping[str, Any] | None = None) -> Build:
    """A :class:`~fusion.kernels.protocol.Build` of ``program`` with its figures: the bytes
    its loads read (:func:`fusion.kernels.codegen.load_bytes`), ``stored`` bytes written, and
    the ideal cycles with ``busy`` cycles of array and epilogue work (a k step or an epilogue
    row a cycle), every unit at full rate with perfect overlap and a word a cycle on each
    memory channel."""
    loaded = load_bytes(config, program.instrs)
    w = config.port_bytes
    ideal = max(busy, -(-loaded // w), -(-stored // w))
    return Build(program, dict(chosen or {}), loaded, stored, ideal)


def tensor_bytes(dims: GemmDims, dtype: str) -> int:
    """Bytes of an ``M x N`` tensor of ``dtype`` in the tile-blocked layout."""
    return dims.Mb * dims.Nb * dims.tile_bytes(np.dtype(dtype).itemsize)


def rows_of(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``x`` flattened into ``rows`` x ``cols``, the tail padded with zeros (how the host
    lays a tensor over the array's columns)."""
    flat = np.asarray(x).reshape(-1)
    out = np.zeros(rows * cols, dtype=flat.dtype)
    out[:flat.size] = flat
    return out.reshape(rows, cols)


@dataclass(frozen=True, eq=False)
class Kernel:
    """A compiled kernel: a program from the kernel cache, its metadata, and how to run it.

    Each kind subclasses it for the names of its operands and what is particular to it; what
    is here reads the metadata (see the module docstring), the same for every kind.

    Attributes
    ----------
    config : VariantConfig
    kind : KernelKind
    signature : params
        The kind's params the kernel was compiled for.
    entry : CacheEntry
        The cache entry: words, listing, metadata.
    """

    config: VariantConfig
    kind: KernelKind
    signature: Any
    entry: CacheEntry

    @functools.cached_property
    def meta(self) -> dict[str, Any]:
        return self.entry.metadata

    @property
    def program(self) -> list[int]:
        return list(self.entry.words)

    @property
    def source(self) -> str:
        return self.entry.source

    @property
    def dims(self) -> GemmDims:
        m, k, n = self.meta["dims"]
        return GemmDims(self.config, m, k, n)

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(self.meta["stages"])

    @property
    def params(self) -> EpilogueParams:
        """The epilogue control-register values the program writes."""
        return EpilogueParams(**self.meta["quant"])

    @property
    def operands(self) -> dict[str, Operand]:
        """Every operand the kernel reads, in region order (the metadata's JSON objects keep
        no order: the kind gives it)."""
        meta = self.meta["operands"]
        return {name: Operand(meta[name][0], tuple(meta[name][1]))
                for name in self.kind.operands(self.config, self.signature)}

    @property
    def out_dtype(self) -> np.dtype:
        return np.dtype(self.meta["out"][0])

    @property
    def regions(self) -> dict[str, Region]:
        """The placed regions, in allocation order."""
        meta = self.meta["regions"]
        return {name: Region(name, int(meta[name][0]), int(meta[name][1]))
                for name in self.kind.regions(self.config, self.signature)}

    @property
    def reads(self) -> dict[str, tuple[int, int]]:
        return {name: (int(a), int(n)) for name, (a, n) in self.meta["reads"].items()}

    @property
    def placement(self) -> dict[str, int] | None:
        return self.meta["placement"]

    @property
    def bytes_loaded(self) -> int:
        return int(self.meta["bytes_loaded"])

    @property
    def bytes_stored(self) -> int:
        return int(self.meta["bytes_stored"])

    @property
    def ideal_cycles(self) -> int:
        return int(self.meta["ideal_cycles"])

    def with_program(self, words: Sequence[int], source: str = "") -> Kernel:
        """The same kernel (metadata, regions) running other program words: fault injection
        and tests of what a program left behind."""
        return dataclasses.replace(self, entry=CacheEntry.create(words, source, self.meta))

    # -- operands --------------------------------------------------------------------------

    def check(self, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The operands the kernel reads, checked against the metadata; others are ignored.

        Raises
        ------
        ValueError
            A missing operand, or one whose shape or values do not match (naming it and what
            the kernel was compiled for).
        """
        what = self.kind.describe(self.signature)
        return {name: check_value(name, values.get(name), op, what)
                for name, op in self.operands.items()}

    def write(self, values: Mapping[str, Any]) -> list[tuple[int, bytes]]:
        """``(word address, bytes)`` writes that put ``values`` where the program reads."""
        blobs = self.kind.pack(self.config, self.signature, self.check(values))
        writes = []
        for name, region in self.regions.items():
            if name not in blobs:
                continue
            if len(blobs[name]) != region.nbytes:  # the layout changed under the cached entry
                raise ValueError(f"operand {name} packs to {len(blobs[name])} bytes but its "
                                 f"region holds {region.nbytes}; clear the kernel cache")
            writes.append((region.addr, blobs[name]))
        return writes

    def result_of(self, values: Mapping[str, Any]) -> np.ndarray:
        """The reference result of ``values`` (numpy, no hardware), ``M x N``."""
        return self.kind.reference(self.signature, self.check(values))

    def memory(self, **values: Any) -> list[tuple[int, bytes]]:
        """``(word address, bytes)`` writes of the operands, by name (:meth:`write`)."""
        return self.write(values)

    def expected(self, **values: Any) -> np.ndarray:
        """The reference result of the operands, by name (:meth:`result_of`)."""
        return self.result_of(values)

    def decode(self, outputs: Mapping[str, Any] | bytes | np.ndarray) -> np.ndarray:
        """The ``M x N`` result from the bytes read back at :attr:`reads` (``"out"``).

        ``outputs`` maps ``"out"`` to its bytes (bytes, bytearray or a uint8 array), or is
        those bytes itself. A kernel that stored its output K-major (``kmajor_out``) is read
        back transposed.
        """
        return layout.unpack_output(self.dims, outputs, self.out_dtype,
                                    kmajor=bool(getattr(self.signature, "kmajor_out", False)))


def regions_of(kind: KernelKind, config: VariantConfig, params: Any) -> dict[str, int]:
    """The kernel's regions (name -> bytes), refusing params its kind cannot run.

    Raises
    ------
    KernelRefused
        A ``ValueError`` with the :class:`~fusion.kernels.protocol.Refusal`.
    """
    refusal = kind.legality(config, params)
    if refusal is not None:
        raise KernelRefused(refusal)
    return kind.regions(config, params)


#: The metadata keys a kind's builder decides (:class:`~fusion.kernels.protocol.Build`); every
#: other key follows from the kind, its params and the placed regions
#: (:func:`layout_metadata`).
BUILD_KEYS = ("chosen", "bytes_loaded", "bytes_stored", "ideal_cycles", "program_words")


def layout_metadata(kind: KernelKind, config: VariantConfig, params: Any,
                    regions: Mapping[str, Region],
                    placement: Mapping[str, int] | None) -> dict[str, Any]:
    """The metadata (see the module docstring) that needs no build: everything but
    :data:`BUILD_KEYS`, from the kind, its params and the placed ``regions``."""
    out = regions["out"]
    return {
        "kind": kind.name, "variant": config.key(), "params": kind.key_params(params),
        "dims": list(kind.dims(params)), "stages": list(kind.stages(params)),
        "quant": dataclasses.asdict(kind.epilogue(params)),
        "operands": {name: [op.dtype, list(op.shape)]
                     for name, op in kind.operands(config, params).items()},
        "out": [kind.output(params).dtype, list(kind.output(params).shape)],
        "regions": {name: [r.addr, r.nbytes] for name, r in regions.items()},
        "reads": {"out": [out.addr, out.nbytes]}, "placement": placement_key(placement),
    }


def restore_kernel(kind: KernelKind, config: VariantConfig, params: Any, entry: CacheEntry, *,
                   placement: Mapping[str, int] | None = None, what: str = "the kernel"
                   ) -> Kernel:
    """The kernel of ``params`` from a stored ``entry`` (a plan folder), without building it.

    The entry's metadata must be exactly what :func:`compile_kernel` would record for
    ``params`` at ``placement`` (:func:`layout_metadata`), with the builder's figures
    (:data:`BUILD_KEYS`) well formed and ``program_words`` the number of words; the program
    itself is taken as it is (its integrity is the caller's check: a plan's SHA-256).

    Raises
    ------
    ValueError
        Naming ``what`` and the first key that differs or is malformed.
    """
    sizes = regions_of(kind, config, params)
    regions = layout.place(config, sizes, placement, what=kind.describe(params))
    # as JSON data, the way the cache stores it (tuples become lists)
    want = CacheEntry.create((), "", layout_metadata(kind, config, params, regions,
                                                     placement)).metadata
    meta = entry.metadata
    extra = sorted(set(meta) - set(want) - set(BUILD_KEYS))
    if extra:
        raise ValueError(f"{what}: unknown metadata key {extra[0]!r}")
    for key, value in want.items():
        if json.dumps(meta.get(key), sort_keys=True) != json.dumps(value, sort_keys=True):
            # compared as JSON: Python's == takes true for 1 and 1.0 for 1
            raise ValueError(f"{what}: metadata {key!r} is {meta.get(key)!r}, but its kind and "
                             f"params give {value!r}")
    if not isinstance(meta.get("chosen"), dict):
        raise ValueError(f"{what}: metadata 'chosen' must be an object")
    for key in BUILD_KEYS[1:]:
        value = meta.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{what}: metadata {key!r} must be a non-negative integer, not "
                             f"{value!r}")
    if meta["program_words"] != len(entry.words):
        raise ValueError(f"{what}: metadata says {meta['program_words']} program words, the "
                         f"program has {len(entry.words)}")
    try:  # the one figure the words alone give: what the loads read
        loaded = load_bytes(config, [isa.decode(w) for w in entry.words])
    except ValueError as exc:  # IsaError is one
        raise ValueError(f"{what}: its program does not decode: {exc}") from None
    if meta["bytes_loaded"] != loaded:
        raise ValueError(f"{what}: metadata says the program loads {meta['bytes_loaded']} "
                         f"bytes, its loads read {loaded}")
    return kind.kernel_type(config, kind, params, entry)


def compile_kernel(kind: KernelKind, config: VariantConfig, params: Any, *,
                   placement: Mapping[str, int] | None = None,
                   cache: KernelCache | None = None) -> Kernel:
    """The kernel of ``params`` on ``config``, from ``cache`` when it has it.

    Parameters
    ----------
    kind : KernelKind
    config : VariantConfig
    params
        The kind's params.
    placement : mapping of str to int, optional
        The word address of every region (exactly those of :meth:`KernelKind.regions`); by
        default they are allocated first fit from word 0. Part of the key: the program's
        address immediates depend on it.
    cache : KernelCache, optional
        Where to look and store; without one the kernel is built every time.

    Raises
    ------
    KernelRefused
        When the kind's legality check refuses ``params`` on ``config`` (never cached).
    ValueError
        A bad placement, a problem too large for the memory, a program longer than the
        instruction memory (:class:`fusion.kernels.codegen.ProgramTooLong`).
    """
    sizes = regions_of(kind, config, params)
    regions = layout.place(config, sizes, placement, what=kind.describe(params))
    parts = key_parts(kind, config, params, placement)

    def build() -> CacheEntry:
        built = kind.build(config, params, regions)
        meta = {**layout_metadata(kind, config, params, regions, placement),
                "chosen": built.chosen, "bytes_loaded": built.bytes_loaded,
                "bytes_stored": built.bytes_stored, "ideal_cycles": built.ideal_cycles,
                "program_words": len(built.program)}
        return CacheEntry.create(built.program.words, built.program.text, meta)

    entry = build() if cache is None else cache.get_or_build(parts, build)
    return kernel_of(kind, config, params, entry)


def kernel_of(kind: KernelKind, config: VariantConfig, params: Any,
              entry: CacheEntry) -> Kernel:
    """The kernel of ``entry`` (built or read by :func:`compile_kernel`, here or in a
    forked worker), checked to be of ``config``."""
    if entry.metadata.get("variant") != config.key():
        raise ValueError(f"the cached kernel was compiled for variant "
                         f"{entry.metadata.get('variant')!r}, not {config.key()!r}")
    return kind.kernel_type(config, kind, params, entry)
