"""The last stage of a compile: each kernel's program, built at its placement through the
kernel cache, as the first of its candidates (:func:`fusion.compiler.placed_choice.ranked`)
whose program fits the instruction memory.

The builds are tasks (:func:`fusion.compiler.scheduler.run_tasks`), kernels built from the
same parameters at other placements (a network's repeated blocks) one task, so that one
process derives what they share once. A build renders and assembles a program (tens of
milliseconds for a convolution) and writes its cache entry; reading one back takes about a
millisecond, so a warm compile's builds stay here (the scheduler prices a stage before it
forks). They never go to a Dask cluster: the kernel cache is this machine's folder (and a
process connected to one does not fork: they stay here). A fork hands back the cache entry
and what its copy of the cache counted; the kernel is made here
(:func:`fusion.kernels.program.kernel_of`), so the plan is the serial compile's.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fusion.compiler.kernels import KernelSpec
from fusion.compiler.lower import CompileError
from fusion.compiler.placed_choice import Candidate
from fusion.compiler.scheduler import CompileTimes, Workers, run_tasks
from fusion.kernels.cache import CacheEntry, CacheStats, KernelCache
from fusion.kernels.codegen import ProgramTooLong
from fusion.kernels.program import Kernel, kernel_of
from hwgen.config import VariantConfig

#: What one kernel's build gives: the candidate built, its kernel, and the plan's note.
Built = tuple[Candidate, Kernel, str]


def build_all(config: VariantConfig, specs: Sequence[KernelSpec],
              placements: Sequence[Mapping[str, int]],
              candidates: Sequence[Sequence[Candidate]], cache: KernelCache | None, *,
              workers: Workers, times: CompileTimes | None = None) -> list[Built]:
    """Build every kernel: ``specs[i]`` (the engine's choice) at ``placements[i]``, as the
    first of ``candidates[i]`` that fits.

    Raises
    ------
    CompileError
        A kernel none of whose candidates gives a program that fits the instruction memory.
    """
    jobs = list(zip(specs, placements, candidates, strict=True))
    groups = _alike(jobs)
    here = os.getpid()

    def task(group: list[int]) -> list[tuple[int, CacheEntry, str, CacheStats | None]]:
        out = []
        forked = cache is not None and os.getpid() != here
        for i in group:
            before = copy.deepcopy(cache.stats) if forked else None
            n, kernel, note = _first_fitting(config, *jobs[i], cache)
            # what a fork's copy of the cache counted, which this process's copy did not
            out.append((n, kernel.entry, note, cache.stats.since(before) if forked else None))
        return out

    done = run_tasks(task, groups, workers=dataclasses.replace(workers, scheduler=""),
                     sizes=[len(g) for g in groups], stage="builds", times=times,
                     names=[specs[g[0]].name + (f" (+{len(g) - 1} alike)" if len(g) > 1 else "")
                            for g in groups])
    results: list[Any] = [None] * len(jobs)
    for group, outs in zip(groups, done, strict=True):
        for i, result in zip(group, outs, strict=True):
            results[i] = result
    out = []
    for (_, _, cands), (n, entry, note, counted) in zip(jobs, results, strict=True):
        c = cands[n]
        if counted is not None:
            cache.stats.add(counted)
        out.append((c, kernel_of(c.spec.kind, config, c.spec.params, entry), note))
    return out


def _alike(jobs: Sequence[tuple]) -> list[list[int]]:
    """The kernels grouped by what their programs are built from but the placement (a
    network's repeated blocks): one worker builds each group, reusing what the first build
    derived (the schedule, the code generator's memos)."""
    groups: dict[str, list[int]] = {}
    for i, (_, _, cands) in enumerate(jobs):
        key = json.dumps([[c.spec.kind.name, c.spec.kind.key_params(c.spec.params)]
                          for c in cands], sort_keys=True)
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _first_fitting(config: VariantConfig, spec: KernelSpec, placement: Mapping[str, int],
                   candidates: Sequence[Candidate], cache: KernelCache | None
                   ) -> tuple[int, Kernel, str]:
    """The index of the first of ``candidates`` whose program fits, its kernel and the
    plan's note on it. Any error but a program too long is a bug and propagates."""
    note, error = "", None
    for n, c in enumerate(candidates):
        try:
            compiled = c.spec.compile(config, placement, cache)
        except ProgramTooLong as exc:
            error = exc
            note += (f"{c.spec.kind.variant_label(c.spec.params)} does not fit the "
                     f"instruction memory ({exc}); ")
            continue
        if n:
            note += "built with the next-best variant"
        elif c.placed and c.spec.params != spec.params:
            label = c.spec.kind.variant_label
            note += (f"at its placement {label(c.spec.params)} is predicted fastest "
                     f"({c.cycles:,.0f} cycles), not {label(spec.params)}")
        return n, compiled, note
    raise CompileError(f"kernel {spec.name!r} ({spec.describe()}): no variant gives a program "
                       f"that fits the instruction memory ({error}); generate a variant with "
                       f"a larger --imem-depth")

