"""The kernel cache: an in-memory LRU in front of an on-disk store of compiled kernels.

A cache entry (:class:`CacheEntry`) is what codegen produces and what does not depend
on operand values: the program words, the microcode listing and JSON metadata (shapes,
dtypes, quantization, memory regions, tiling). Entries are keyed by :func:`cache_key`: a hash
of the caller's key parts (op signature, shapes, dtypes, quantization, variant key) and of
:func:`codegen_version`, a hash of the templates and of the modules that build kernels, so
that editing a template or the code generator misses instead of serving an old program.

On disk an entry is one JSON file, ``<root>/<key[:2]>/<key>.json``: a format tag and version,
the key, the key parts, the codegen version, the kernel, and a SHA-256 of the kernel's
canonical JSON. No pickle: a cache folder shared or copied between machines cannot run code.
A write goes to a temporary file in the same folder that is then renamed over the entry
(``os.replace``, atomic on POSIX and Windows), so readers and concurrent writers only ever
see whole files. Every read is verified (parse, format, version, key, key parts, checksum,
word range); an entry that fails is counted in :attr:`CacheStats.corrupt` with the reason,
and rebuilt. A failed write (read-only or full disk) is counted and otherwise ignored: the
cache is an optimization, never a reason for a compile to fail.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.resources
import importlib.util
import json
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwgen.atomic import write_file
from hwgen.files import NotRegularFile, read_bytes

#: Format tag and version of an entry file; bump the version when the layout changes.
CACHE_FORMAT = "hwgen-kernel-cache"
CACHE_VERSION = 1

#: What decides a kernel's program besides the key parts: every module of the ``fusion``
#: package (codegen, layouts, tilers, and whatever builds kernels next; hashing them all
#: over-invalidates on purpose) and these modules of ``hwgen``, with every microcode
#: template. Their contents are hashed into :func:`codegen_version`.
CODEGEN_MODULES = ("hwgen.asm", "hwgen.config", "hwgen.isa", "hwgen.stages")

_WORD_LIMIT = 1 << 64
_MAX_ERRORS = 20  # messages kept in CacheStats.errors; the counters keep counting


def default_root() -> Path:
    """The on-disk cache: ``$HWGEN_KERNEL_CACHE`` if set, else ``build/kernel_cache`` in the
    working directory (never inside the installed package)."""
    env = os.environ.get("HWGEN_KERNEL_CACHE")
    if env:
        return Path(env)
    return Path.cwd() / "build" / "kernel_cache"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _jsonable(value: Any, where: str) -> Any:
    """``value`` as plain JSON types (tuples become lists, numpy scalars and arrays lists).

    Raises ``ValueError`` naming ``where`` for anything else, so that a key can never depend
    on ``repr`` or on object identity.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return value
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy scalars and arrays
        return _jsonable(value.tolist(), where)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value), where)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"cache key part {where} has a non-string key {k!r}")
            out[k] = _jsonable(v, f"{where}.{k}")
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{where}[{n}]") for n, v in enumerate(value)]
    raise ValueError(f"cache key part {where} = {value!r} ({type(value).__name__}) is not "
                     f"JSON data; pass numbers, strings, lists, dicts or dataclasses")


def _codegen_files() -> list[tuple[str, bytes]]:
    files = []
    templates = importlib.resources.files("rtl_templates") / "microcode"
    for item in sorted(templates.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".j2"):
            files.append((f"rtl_templates/microcode/{item.name}", item.read_bytes()))
    package = Path(__file__).resolve().parents[1]  # the whole fusion package
    for path in sorted(package.rglob("*.py")):
        files.append((f"fusion/{path.relative_to(package).as_posix()}", path.read_bytes()))
    for name in CODEGEN_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"cannot find the source of {name} to version the kernel cache")
        files.append((name, Path(spec.origin).read_bytes()))
    return files


def hash_sources(files: Iterable[tuple[str, bytes]]) -> str:
    """A 16-hex-digit hash of ``(name, content)`` pairs (names and lengths delimit them)."""
    h = hashlib.sha256(f"{CACHE_FORMAT} {CACHE_VERSION}\n".encode())
    for name, data in files:
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:16]


@functools.cache
def codegen_version() -> str:
    """Hash of the microcode templates, the ``fusion`` package and :data:`CODEGEN_MODULES`
    (computed once per process).

    Coarse on purpose: a comment edited in a template also misses. A stale program served
    from the cache would be a wrong result; a needless rebuild costs milliseconds.
    """
    return hash_sources(_codegen_files())


def cache_key(parts: Mapping[str, Any], version: str) -> str:
    """The entry name of ``parts`` under codegen ``version``: 32 hex digits of a SHA-256."""
    text = _canonical({"parts": _jsonable(dict(parts), "key_parts"), "codegen": version,
                       "format": CACHE_VERSION})
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, eq=True)
class CacheEntry:
    """A kernel as the cache stores it: everything but the operand bytes.

    Build one with :meth:`create`. ``metadata`` is returned as a fresh dict on every access,
    so that a caller editing it cannot change what the cache holds.

    Attributes
    ----------
    words : tuple of int
        The 64-bit microcode words, in instruction-memory order.
    source : str
        The microcode listing the words were assembled from.
    metadata_json : str
        The metadata, as canonical JSON.
    """

    words: tuple[int, ...]
    source: str
    metadata_json: str

    @classmethod
    def create(cls, words: Iterable[int], source: str,
               metadata: Mapping[str, Any]) -> CacheEntry:
        """Check and freeze a kernel; ``metadata`` must be JSON data.

        Raises
        ------
        ValueError
            A word that is not a 64-bit unsigned integer, a non-string source, or metadata
            that is not JSON data.
        """
        words = tuple(words)
        for n, w in enumerate(words):
            if not isinstance(w, int) or isinstance(w, bool) or not 0 <= w < _WORD_LIMIT:
                raise ValueError(f"program word {n} is {w!r}, not a 64-bit unsigned integer")
        if not isinstance(source, str):
            raise ValueError(f"a kernel's source must be text, not {type(source).__name__}")
        return cls(words, source, _canonical(_jsonable(dict(metadata), "metadata")))

    @property
    def metadata(self) -> dict[str, Any]:
        return json.loads(self.metadata_json)

    def to_json(self) -> dict[str, Any]:
        """The kernel as JSON data (words as integers)."""
        return {"words": list(self.words), "source": self.source, "metadata": self.metadata}

    @classmethod
    def from_json(cls, data: Any) -> CacheEntry:
        """Inverse of :meth:`to_json`; ``ValueError`` if ``data`` is malformed."""
        if not isinstance(data, dict) or set(data) != {"words", "source", "metadata"}:
            raise ValueError("the kernel must be an object with words, source and metadata")
        if not isinstance(data["words"], list) or not isinstance(data["metadata"], dict):
            raise ValueError("the kernel's words must be a list and its metadata an object")
        return cls.create(data["words"], data["source"], data["metadata"])


@dataclass
class CacheStats:
    """What a :class:`KernelCache` has done since it was made.

    ``corrupt`` counts entries found on disk but refused (truncated, edited, of another
    version, or under the wrong key); each was rebuilt, and ``reasons`` counts why.
    """

    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    corrupt: int = 0
    evictions: int = 0
    writes: int = 0
    write_errors: int = 0
    reasons: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    @property
    def hits(self) -> int:
        return self.memory_hits + self.disk_hits

    @property
    def lookups(self) -> int:
        """Every lookup is a memory hit, a disk hit or a miss (a corrupt entry is a miss)."""
        return self.hits + self.misses

    #: The counters, in the order :meth:`to_dict` gives them.
    _COUNTS = ("memory_hits", "disk_hits", "misses", "corrupt", "evictions", "writes",
               "write_errors")

    def to_dict(self) -> dict[str, Any]:
        return {**{n: getattr(self, n) for n in self._COUNTS}, "reasons": dict(self.reasons)}

    def since(self, before: CacheStats) -> CacheStats:
        """What was counted after ``before`` (a copy of these stats taken earlier)."""
        return CacheStats(**{n: getattr(self, n) - getattr(before, n) for n in self._COUNTS},
                          reasons=self.reasons - before.reasons,
                          errors=self.errors[len(before.errors):])

    def add(self, other: CacheStats) -> None:
        """Count what another copy of the cache counted (:meth:`since`, in a forked worker:
        :mod:`fusion.compiler.builds`)."""
        for name in self._COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.reasons.update(other.reasons)
        self.errors.extend(other.errors[:max(0, _MAX_ERRORS - len(self.errors))])

    def _refuse(self, reason: str, message: str) -> None:
        self.corrupt += 1
        self.reasons[reason] += 1
        if len(self.errors) < _MAX_ERRORS:
            self.errors.append(message)


class CorruptEntry(ValueError):
    """An entry file that cannot be trusted; ``reason`` is a short category."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class KernelCache:
    """Compiled kernels: ``capacity`` in memory (least recently used evicted) over a folder.

    Parameters
    ----------
    root : path, optional
        The on-disk cache folder; :func:`default_root` if omitted.
    capacity : int
        Kernels held in memory; 0 keeps none (every lookup goes to disk).
    version : str, optional
        The codegen version in the keys; :func:`codegen_version` by default. Tests pass
        their own to stand for a template change.
    disk : bool
        Use the on-disk store (``False``: memory only).
    """

    def __init__(self, root: Path | str | None = None, capacity: int = 256, *,
                 version: str | None = None, disk: bool = True) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
            raise ValueError(f"capacity must be a non-negative integer, not {capacity!r}")
        self.root = Path(root) if root is not None else default_root()
        self.capacity = capacity
        self.version = version if version is not None else codegen_version()
        self.disk = disk
        self.stats = CacheStats()
        self._memory: OrderedDict[str, CacheEntry] = OrderedDict()
        self._lock = threading.Lock()  # guards the LRU and the stats, not the build

    # -- public API ------------------------------------------------------------------------

    def key(self, key_parts: Mapping[str, Any]) -> str:
        return cache_key(key_parts, self.version)

    def path(self, key_parts: Mapping[str, Any]) -> Path:
        """Where the entry of ``key_parts`` lives on disk."""
        return self._path(self.key(key_parts))

    def get_or_build(self, key_parts: Mapping[str, Any],
                     build: Callable[[], CacheEntry]) -> CacheEntry:
        """The kernel of ``key_parts``: from memory, else from disk, else ``build()``.

        A built kernel is stored in memory and written to disk. ``build`` runs outside the
        cache's lock; two threads missing the same key both build it, and both writes are
        whole files with the same content.

        Raises
        ------
        ValueError
            If ``key_parts`` is not JSON data, or ``build`` returns something other than a
            :class:`CacheEntry`.
        """
        key = self.key(key_parts)
        parts = _jsonable(dict(key_parts), "key_parts")
        with self._lock:
            kernel = self._memory.get(key)
            if kernel is not None:
                self._memory.move_to_end(key)
                self.stats.memory_hits += 1
                return kernel
        kernel = self._read(key, parts) if self.disk else None
        if kernel is not None:
            with self._lock:
                self.stats.disk_hits += 1
                self._remember(key, kernel)
            return kernel
        with self._lock:
            self.stats.misses += 1
        kernel = build()
        if not isinstance(kernel, CacheEntry):
            raise ValueError(f"the kernel builder returned {type(kernel).__name__}, "
                             f"not a CacheEntry")
        if self.disk:
            self._write(key, parts, kernel)
        with self._lock:
            self._remember(key, kernel)
        return kernel

    def clear_memory(self) -> None:
        """Forget the in-memory entries (the disk entries stay)."""
        with self._lock:
            self._memory.clear()

    def __len__(self) -> int:
        return len(self._memory)

    # -- memory --------------------------------------------------------------------------

    def _remember(self, key: str, kernel: CacheEntry) -> None:
        if self.capacity == 0:
            return
        self._memory[key] = kernel
        self._memory.move_to_end(key)
        while len(self._memory) > self.capacity:
            self._memory.popitem(last=False)
            self.stats.evictions += 1

    # -- disk ----------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def _read(self, key: str, parts: Any) -> CacheEntry | None:
        path = self._path(key)
        try:
            raw = read_bytes(path)  # a FIFO planted there is refused, not waited on
        except FileNotFoundError:
            return None
        except (OSError, NotRegularFile) as exc:
            self._refuse(path, CorruptEntry("unreadable", f"cannot read: {exc}"))
            return None
        try:
            return self._verify(raw, key, parts)
        except CorruptEntry as exc:
            self._refuse(path, exc)
            return None

    def _refuse(self, path: Path, exc: CorruptEntry) -> None:
        with self._lock:
            self.stats._refuse(exc.reason, f"{path}: {exc}")

    def _verify(self, raw: bytes, key: str, parts: Any) -> CacheEntry:
        try:
            entry = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptEntry("not json",
                               f"not valid JSON ({exc}); truncated or damaged") from None
        if not isinstance(entry, dict) or entry.get("format") != CACHE_FORMAT:
            raise CorruptEntry("format", "not a kernel cache entry")
        if entry.get("version") != CACHE_VERSION:
            raise CorruptEntry("version", f"entry version {entry.get('version')!r}, this "
                                          f"hwgen reads version {CACHE_VERSION}")
        if entry.get("key") != key or entry.get("codegen") != self.version:
            raise CorruptEntry("key mismatch", f"entry records key {entry.get('key')!r} and "
                                               f"codegen {entry.get('codegen')!r}, expected "
                                               f"{key!r} and {self.version!r}")
        if entry.get("key_parts") != parts:
            raise CorruptEntry("key mismatch", "the entry's key parts differ from the lookup's")
        kernel_json = entry.get("kernel")
        digest = hashlib.sha256(_canonical(kernel_json).encode()).hexdigest()
        if entry.get("sha256") != digest:
            raise CorruptEntry("checksum", "the kernel does not match its recorded SHA-256")
        try:
            return CacheEntry.from_json(kernel_json)
        except ValueError as exc:
            raise CorruptEntry("malformed", str(exc)) from None

    def _write(self, key: str, parts: Any, kernel: CacheEntry) -> None:
        path = self._path(key)
        kernel_json = kernel.to_json()
        entry = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "key": key,
                 "codegen": self.version, "key_parts": parts, "kernel": kernel_json,
                 "sha256": hashlib.sha256(_canonical(kernel_json).encode()).hexdigest()}
        data = (json.dumps(entry, sort_keys=True, indent=1) + "\n").encode()
        try:
            write_file(path, data)
            with self._lock:
                self.stats.writes += 1
        except OSError as exc:
            with self._lock:
                self.stats.write_errors += 1
                if len(self.stats.errors) < _MAX_ERRORS:
                    self.stats.errors.append(f"{path}: cannot write: {exc}")
