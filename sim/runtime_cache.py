"""Verilator's runtime objects, compiled once per machine instead of once per build.

Every Verilator build compiles the same runtime (``verilated.cpp``, ``verilated_vpi.cpp``,
the ``--timing`` scheduler, ...) with the same flags: about 16 CPU seconds of the 20 a small
variant's build takes. Nothing in them depends on the design, so a build takes them from this
cache and make compiles only the model.

An object is keyed by the exact command make would run for it (flags, defines, paths), the
compiler's identity and the bytes of Verilator's whole include folder (the source and every
header it may include): a change in any of them misses the cache.
Its file name ends with the digest of its bytes, checked before use; a damaged object is
deleted and compiled again. The cache is ``$HWGEN_RUNTIME_CACHE`` (empty turns it off), else
``hwgen/verilator-runtime`` in ``$XDG_CACHE_HOME`` or ``~/.cache``. It only saves time: a
cache that cannot be read or written leaves the build to compile everything, as without it.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CACHE_ENV", "RuntimeObjects", "cache_root"]

#: Where the cache is; set it empty to turn the cache off.
CACHE_ENV = "HWGEN_RUNTIME_CACHE"
#: Hex digits of an object's sha256 in its cached file name.
_DIGEST = 32


def cache_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """The cache folder, or None when ``$HWGEN_RUNTIME_CACHE`` is set empty."""
    environ = os.environ if environ is None else environ
    if CACHE_ENV in environ:
        return Path(environ[CACHE_ENV]) if environ[CACHE_ENV] else None
    base = environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hwgen" / "verilator-runtime"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _compiler(command: Sequence[str], env: Mapping[str, str]) -> str:
    try:
        proc = subprocess.run([command[0], "--version"], env=dict(env), capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def _folder_digest(folder: Path) -> str:
    """A digest of every file under Verilator's include folder (1.5 MB: the runtime's
    sources and the headers they include), or "" when it cannot be read."""
    digest = hashlib.sha256()
    try:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    except OSError:
        return ""
    return digest.hexdigest()


def _runtime_source(args: Sequence[str]) -> Path | None:
    """The one ``verilated*.cpp`` of Verilator's include folder a compile command builds."""
    sources = [Path(a) for a in args if a.endswith(".cpp")]
    if len(sources) != 1 or "-c" not in args or "-o" not in args:
        return None
    src = sources[0]
    if not (src.name.startswith("verilated") and (src.parent / "verilated.mk").is_file()):
        return None
    return src


@dataclass(frozen=True)
class RuntimeObjects:
    """The runtime objects one make run would compile, each with its cache key.

    Attributes
    ----------
    root : Path
        The cache folder.
    keys : dict
        Object file name (``verilated.o``) to its key.
    """

    root: Path
    keys: dict[str, str]

    @classmethod
    def of(cls, make: Sequence[str], env: Mapping[str, str]) -> RuntimeObjects | None:
        """Ask make (``-n``: nothing runs) what it would compile; None without a cache or
        when make cannot say."""
        root = cache_root(env)
        if root is None:
            return None
        try:
            proc = subprocess.run([*make, "-n"], env=dict(env), capture_output=True,
                                  text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0:
            return None
        keys: dict[str, str] = {}
        compilers: dict[str, str] = {}
        folders: dict[Path, str] = {}
        for line in proc.stdout.splitlines():
            try:
                args = shlex.split(line)
            except ValueError:
                continue
            src = _runtime_source(args)
            if src is None:
                continue
            if args[0] not in compilers:
                compilers[args[0]] = _compiler(args, env)
            if not compilers[args[0]]:
                return None  # a compiler we cannot name: its objects cannot be keyed
            if src.parent not in folders:
                folders[src.parent] = _folder_digest(src.parent)
            if not folders[src.parent]:
                continue
            key = _sha256("\0".join([line, compilers[args[0]], folders[src.parent]]).encode())
            keys[args[args.index("-o") + 1]] = key[:_DIGEST]
        return cls(root, keys)

    def restore(self, obj_dir: Path) -> set[str]:
        """Copy every cached object into ``obj_dir`` (newer than its source, so make keeps
        it); return their names. A cached file whose bytes do not match its name is
        deleted."""
        restored: set[str] = set()
        for name, key in self.keys.items():
            try:
                candidates = sorted(self.root.glob(f"{key}-*.o"))
            except OSError:
                return restored
            for cached in candidates:
                try:
                    data = cached.read_bytes()
                    if _sha256(data)[:_DIGEST] != cached.stem.split("-", 1)[1]:
                        cached.unlink(missing_ok=True)
                        continue
                    part = obj_dir / f"{name}.part"
                    part.write_bytes(data)
                    os.replace(part, obj_dir / name)
                except OSError:
                    continue
                restored.add(name)
                break
        return restored

    def save(self, obj_dir: Path, skip: set[str]) -> None:
        """Store the objects make compiled (not those in ``skip``) for the next build."""
        for name, key in self.keys.items():
            if name in skip:
                continue
            try:
                data = (obj_dir / name).read_bytes()
                self.root.mkdir(parents=True, exist_ok=True)
                target = self.root / f"{key}-{_sha256(data)[:_DIGEST]}.o"
                if target.exists():
                    continue
                part = self.root / f".{target.name}.{os.getpid()}.part"
                part.write_bytes(data)
                os.replace(part, target)  # whole or absent, for concurrent builds
            except OSError:
                continue
