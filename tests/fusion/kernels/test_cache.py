"""The kernel cache: memory and disk hits, LRU eviction, refusal of damaged entries, atomic
writes, and the codegen version in the key. No Verilator."""

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from fusion.kernels.cache import (
    CACHE_VERSION,
    CacheEntry,
    KernelCache,
    _codegen_files,
    cache_key,
    codegen_version,
    hash_sources,
)


def kernel(n: int = 0) -> CacheEntry:
    return CacheEntry.create([n, (1 << 64) - 1, 0x1234], f"# kernel {n}\nhalt\n",
                                 {"shape": [n, 2, 3], "stages": ["bias"], "n": n})


class Builder:
    """A build callable that counts its calls."""

    def __init__(self, n: int = 0):
        self.n, self.calls = n, 0

    def __call__(self) -> CacheEntry:
        self.calls += 1
        return kernel(self.n)


PARTS = {"op": "gemm", "variant": "abcd", "shape": [4, 5, 6], "stages": ("bias",)}


def test_second_lookup_is_served_from_memory(tmp_path):
    cache, build = KernelCache(tmp_path, capacity=4), Builder()
    first = cache.get_or_build(PARTS, build)
    second = cache.get_or_build(PARTS, build)
    assert build.calls == 1 and first is second
    s = cache.stats
    assert (s.misses, s.memory_hits, s.disk_hits, s.writes, s.corrupt) == (1, 1, 0, 1, 0)


def test_a_new_instance_serves_from_disk(tmp_path):
    KernelCache(tmp_path).get_or_build(PARTS, Builder())
    cache, build = KernelCache(tmp_path), Builder(n=99)
    got = cache.get_or_build(PARTS, build)
    assert build.calls == 0 and got == kernel(0)
    assert (cache.stats.disk_hits, cache.stats.misses) == (1, 0)
    cache.get_or_build(PARTS, build)
    assert cache.stats.memory_hits == 1


def test_key_parts_select_the_entry(tmp_path):
    cache = KernelCache(tmp_path)
    a = cache.get_or_build(PARTS, Builder(1))
    b = cache.get_or_build({**PARTS, "shape": [4, 5, 7]}, Builder(2))
    assert a != b and cache.stats.misses == 2
    # tuples and lists, numpy and Python ints, and key order name the same entry
    same = {"stages": ["bias"], "shape": np.array([4, 5, 6]), "variant": "abcd", "op": "gemm"}
    assert cache.get_or_build(same, Builder(3)) == a


def test_lru_evicts_the_least_recently_used_at_the_bound(tmp_path):
    cache = KernelCache(tmp_path, capacity=2, disk=False)
    for n in range(2):
        cache.get_or_build({"n": n}, Builder(n))
    cache.get_or_build({"n": 0}, Builder())  # touch 0: 1 is now the oldest
    cache.get_or_build({"n": 2}, Builder(2))
    assert len(cache) == 2 and cache.stats.evictions == 1
    again = Builder(1)
    cache.get_or_build({"n": 1}, again)  # evicted: rebuilt
    assert again.calls == 1
    cache.get_or_build({"n": 2}, again)  # still there
    assert again.calls == 1 and cache.stats.memory_hits == 2


def test_capacity_zero_goes_to_disk_every_time(tmp_path):
    cache = KernelCache(tmp_path, capacity=0)
    cache.get_or_build(PARTS, Builder())
    cache.get_or_build(PARTS, Builder())
    assert (cache.stats.misses, cache.stats.disk_hits, len(cache)) == (1, 1, 0)


def damage_truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def damage_flip_a_word_digit(path: Path) -> None:
    # Still valid JSON, a different program: only the checksum can catch it.
    entry = json.loads(path.read_text())
    entry["kernel"]["words"][2] ^= 1
    path.write_text(json.dumps(entry))


def damage_version(path: Path) -> None:
    entry = json.loads(path.read_text())
    entry["version"] = CACHE_VERSION + 1
    path.write_text(json.dumps(entry))


def damage_other_key(path: Path) -> None:
    entry = json.loads(path.read_text())
    entry["key_parts"]["shape"] = [1, 1, 1]
    path.write_text(json.dumps(entry))


def damage_empty(path: Path) -> None:
    path.write_bytes(b"")


def damage_fifo(path: Path) -> None:
    # a FIFO would block its reader forever: refused unopened, and replaced by the rebuild
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("damage, reason", [
    (damage_truncate, "not json"), (damage_flip_a_word_digit, "checksum"),
    (damage_version, "version"), (damage_other_key, "key mismatch"),
    (damage_empty, "not json"), (damage_fifo, "unreadable"),
], ids=lambda v: getattr(v, "__name__", v))
def test_a_damaged_entry_is_counted_and_rebuilt(tmp_path, damage, reason):
    KernelCache(tmp_path).get_or_build(PARTS, Builder())
    path = KernelCache(tmp_path).path(PARTS)
    damage(path)
    cache, build = KernelCache(tmp_path), Builder()
    assert cache.get_or_build(PARTS, build) == kernel(0)
    assert build.calls == 1
    assert (cache.stats.corrupt, cache.stats.misses, cache.stats.disk_hits) == (1, 1, 0)
    assert cache.stats.reasons == {reason: 1}
    assert str(path) in cache.stats.errors[0]
    # the rebuilt entry replaced the damaged one
    fresh = KernelCache(tmp_path)
    fresh.get_or_build(PARTS, Builder(5))
    assert (fresh.stats.disk_hits, fresh.stats.corrupt) == (1, 0)


def test_any_flipped_byte_is_refused_or_harmless(tmp_path):
    """Flip each byte of an entry in turn: it is refused, or still reads as the same kernel
    (a flip inside JSON whitespace or indentation); never a different kernel."""
    KernelCache(tmp_path).get_or_build(PARTS, Builder())
    path = KernelCache(tmp_path).path(PARTS)
    original = path.read_bytes()
    for offset in range(0, len(original), 7):
        data = bytearray(original)
        data[offset] ^= 0x01
        path.write_bytes(bytes(data))
        cache = KernelCache(tmp_path, capacity=0)
        got = cache.get_or_build(PARTS, Builder())
        assert got == kernel(0)
        assert cache.stats.disk_hits + cache.stats.corrupt == 1
        path.write_bytes(original)


def test_a_template_change_misses(tmp_path):
    KernelCache(tmp_path, version="templates-v1").get_or_build(PARTS, Builder())
    cache, build = KernelCache(tmp_path, version="templates-v2"), Builder()
    cache.get_or_build(PARTS, build)
    assert build.calls == 1 and cache.stats.corrupt == 0
    assert cache_key(PARTS, "templates-v1") != cache_key(PARTS, "templates-v2")


def test_codegen_version_hashes_the_sources():
    files = [("gemm.j2", b"matmul"), ("fusion.kernels.codegen", b"def f(): pass")]
    assert hash_sources(files) == hash_sources(list(files))
    assert hash_sources(files) != hash_sources([("gemm.j2", b"matmul "), files[1]])
    # names delimit contents: moving bytes between files changes the hash
    assert hash_sources(files) != hash_sources([("gemm.j2", b"matmuld"),
                                                ("fusion.kernels.codegen", b"ef f(): pass")])
    assert len(codegen_version()) == 16 and codegen_version() == codegen_version()


def test_codegen_version_covers_templates_and_kernel_builders():
    names = {name for name, _ in _codegen_files()}
    assert {"rtl_templates/microcode/gemm.j2", "rtl_templates/microcode/common.j2",
            "fusion/kernels/gemm/build.py", "fusion/kernels/codegen.py", "fusion/kernels/tiling.py",
            "fusion/kernels/program.py", "hwgen.asm", "hwgen.isa", "hwgen.config"} <= names


def test_concurrent_writers_leave_whole_files_only(tmp_path):
    caches = [KernelCache(tmp_path, capacity=0), KernelCache(tmp_path, capacity=0)]
    errors = []

    def hammer(cache):
        try:
            for n in range(40):
                cache.get_or_build({"n": n % 5}, Builder(n % 5))
                cache._write(cache.key({"n": n % 5}), {"n": n % 5}, kernel(n % 5))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(c,)) for c in caches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(c.stats.corrupt for c in caches) == 0
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) == 5 and all(f.endswith(".json") for f in files)  # no temporaries
    reader = KernelCache(tmp_path)
    for n in range(5):
        assert reader.get_or_build({"n": n}, Builder(99)) == kernel(n)
    assert reader.stats.disk_hits == 5


def test_a_leftover_temporary_file_is_ignored(tmp_path):
    cache = KernelCache(tmp_path)
    path = cache.path(PARTS)
    path.parent.mkdir(parents=True)
    (path.parent / f".{path.stem}.x.tmp").write_text('{"format": "hwgen-kernel-cache", "ver')
    cache.get_or_build(PARTS, Builder())
    assert (cache.stats.misses, cache.stats.corrupt) == (1, 0)


def test_a_failed_write_does_not_fail_the_lookup(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = KernelCache(blocker, capacity=1)
    assert cache.get_or_build(PARTS, Builder()) == kernel(0)
    assert (cache.stats.write_errors, cache.stats.writes) == (1, 0)


def test_errors_name_the_bad_value(tmp_path):
    with pytest.raises(ValueError, match="capacity must be a non-negative integer, not -1"):
        KernelCache(tmp_path, capacity=-1)
    with pytest.raises(ValueError, match=r"key_parts\.f = <object"):
        KernelCache(tmp_path).get_or_build({"f": object()}, Builder())
    with pytest.raises(ValueError, match="returned str, not a CacheEntry"):
        KernelCache(tmp_path).get_or_build(PARTS, lambda: "program")
    with pytest.raises(ValueError, match="program word 1 is -1"):
        CacheEntry.create([0, -1], "", {})


def test_metadata_cannot_be_changed_through_the_cache(tmp_path):
    cache = KernelCache(tmp_path)
    got = cache.get_or_build(PARTS, Builder())
    got.metadata["shape"].append(7)
    assert cache.get_or_build(PARTS, Builder()).metadata["shape"] == [0, 2, 3]


def test_entry_file_is_plain_json(tmp_path):
    cache = KernelCache(tmp_path)
    cache.get_or_build(PARTS, Builder())
    entry = json.loads(cache.path(PARTS).read_text())
    assert entry["format"] == "hwgen-kernel-cache" and entry["version"] == CACHE_VERSION
    assert entry["kernel"]["words"] == [0, (1 << 64) - 1, 0x1234]
    assert entry["key_parts"]["stages"] == ["bias"]


def test_what_a_forked_copy_counted_adds_up(tmp_path):
    # the compile's builds run on forked copies of the cache (fusion.compiler.builds)
    import copy

    cache = KernelCache(tmp_path)
    cache.get_or_build(PARTS, Builder())
    before = copy.deepcopy(cache.stats)
    cache.get_or_build({**PARTS, "shape": [9]}, Builder(1))
    cache.clear_memory()
    cache.get_or_build(PARTS, Builder())
    since = cache.stats.since(before)
    assert (since.misses, since.writes, since.disk_hits, since.memory_hits) == (1, 1, 1, 0)
    total = KernelCache(tmp_path / "other")
    total.stats.add(since)
    total.stats.add(since)
    assert (total.stats.misses, total.stats.disk_hits) == (2, 2)
    assert total.stats.lookups == 4
