"""Run GEMM kernels on Verilator and check them bit for bit against the numpy reference.

This sits above the low part of ``sim`` (it uses :mod:`fusion` to build kernels) and is what
``hwgen gemm``, the regression tests and the benchmarks call.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fusion.kernels.gemm.kind import GEMM, GemmKernel, compiled_gemm, gemm_regions
from fusion.kernels.gemm.params import GemmParams
from fusion.kernels.gemm.skip import tile_flags
from fusion.kernels.gemm.sparse import block_rows, sparse_blocks
from fusion.kernels.layout import GemmDims, place
from fusion.kernels.program import compile_kernel
from fusion.kernels.tiling import Tiling
from fusion.runtime.edge_cases import plant
from fusion.runtime.invariants import MemoryWords, check_counters, timing_floor
from hwgen.config import VariantConfig
from hwgen.energy import estimate
from hwgen.perf import memory_summary
from hwgen.platform import PlatformConfig
from hwgen.reference import EpilogueParams, gemm_epilogue
from sim.build import BuildInfo
from sim.run import Job, MemoryImage, RunResult, run_programs


@dataclass(frozen=True)
class Problem:
    """Operands and epilogue parameters of one GEMM."""

    a: np.ndarray
    b: np.ndarray
    bias: np.ndarray | None
    residual: np.ndarray | None
    params: EpilogueParams
    #: Per-channel requantize multipliers and shifts (``params.per_channel``), else None.
    mult: np.ndarray | None = None
    shift: np.ndarray | None = None
    #: A's zero point, for a zero-skipping GEMM (:func:`zero_tile_problem`).
    a_zp: int = 0

    @property
    def operands(self) -> dict[str, np.ndarray | None]:
        out = {"a": self.a, "b": self.b, "bias": self.bias, "residual": self.residual}
        if self.params.per_channel:
            out |= {"mult": self.mult, "shift": self.shift}
        return out


def random_problem(M: int, K: int, N: int, stages: Sequence[str], seed: int) -> Problem:  # noqa: N803
    """Full-range int8 operands and epilogue parameters that spread the int8 outputs, with
    every edge case of the stages planted (:func:`fusion.runtime.edge_cases.plant`).

    The requantize scale maps about three standard deviations of the accumulators onto the
    int8 range, so saturation and the ReLU see real traffic. Its multiplier is a small odd
    number shifted to full width, so that exact rounding ties exist within the int8 range;
    one row of B holds only -1 and 1, so that the planted rows of A can reach any accumulator
    exactly. Rows of A are then solved, one edge case each (as many as there are rows), and
    residual elements set, so that each reachable case occurs: negative and positive sums,
    saturation at both ends, ties of both signs, ReLU around 0 and at -1, each clamp bound.
    Where a case of one stage cannot be seen at the output through the stages after it (a
    saturation clamped anyway, a negative tie after a ReLU), the case still occurs but a
    fault there shows only with fewer stages (``--epilogue``).
    """
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    b[rng.integers(K)] = rng.choice(np.array([-1, 1], np.int8), N)
    # std of a sum of K products of uniform int8, or less when K is too small for the
    # planted rows to reach the saturation (each other row of B adds 64 * 128 on average)
    spread = min(math.sqrt(K) * 5500.0, 128.0 * (64 * (K - 1) + 1) / 5) + 1.0
    bias = rng.integers(-int(spread), int(spread) + 1, N).astype(np.int32)
    residual = rng.integers(-128, 128, (M, N), dtype=np.int8)
    # The clamp's bounds keep the planted cases visible at the output: its lower bound is
    # negative (above a ReLU's 0 it would hide a ReLU that lets -1 through), its upper bound
    # above the requantized ties (odd / 2 + zp <= 74) and below 127.
    lo = int(rng.integers(-120, -20))
    odd = int(rng.integers(32, 64)) * 2 + 1  # 65..127: ties at +-odd/2, inside int8
    half_steps = max(1, round(math.log2(odd * 3.0 * spread / 127.0)))
    params = EpilogueParams(mult=odd << 24, shift=24 + half_steps, zp=int(rng.integers(-10, 11)),
                            clamp_lo=lo, clamp_hi=int(rng.integers(80, 121)))
    problem = Problem(a=a, b=b, bias=bias if "bias" in stages else None,
                      residual=residual if "residual" in stages else None, params=params)
    plant(a, b, tuple(stages), params, problem.operands, rng)
    return problem


@dataclass(frozen=True)
class GemmReport:
    """The outcome of one checked GEMM run."""

    M: int
    K: int
    N: int
    stages: tuple[str, ...]
    fused: bool
    tiling: Tiling
    ok: bool
    mismatches: int
    first_mismatch: tuple[int, int, int, int] | None  # row, col, got, expected
    counters: dict[str, int]
    ideal_cycles: int
    bytes_loaded: int  # what the program's loads read, from the program itself
    wall_seconds: float
    program_words: int
    variant: str
    got: np.ndarray = field(repr=False, compare=False)
    #: Counter invariants the run broke (:func:`fusion.runtime.invariants.check_counters`).
    violations: tuple[str, ...] = ()
    #: The variant, and the memory it ran on (for the memory counters and the energy).
    config: VariantConfig | None = field(default=None, repr=False, compare=False)
    platform: PlatformConfig = field(default_factory=PlatformConfig)

    @property
    def port_bytes(self) -> int:
        return self.config.port_bytes if self.config is not None else 1

    @property
    def cycles(self) -> int:
        return self.counters["cycles"]

    @property
    def utilization(self) -> float:
        return self.ideal_cycles / self.cycles if self.cycles else 0.0

    @property
    def stall_cycles(self) -> int:
        return self.counters["stall_memory"] + self.counters["stall_epilogue"]

    def to_dict(self) -> dict:
        """The report as JSON types (the keys ``hwgen gemm --json`` promises and more)."""
        c = self.counters
        return {
            "ok": self.ok, "variant": self.variant, "m": self.M, "k": self.K, "n": self.N,
            "epilogue": list(self.stages), "fused": self.fused,
            "tiling": dataclasses.asdict(self.tiling),
            "cycles": self.cycles, "ideal_cycles": self.ideal_cycles,
            "utilization": round(self.utilization, 4),
            "bytes_read": c["bytes_read"], "bytes_written": c["bytes_written"],
            "stall_cycles": self.stall_cycles, "stall_memory": c["stall_memory"],
            "stall_epilogue": c["stall_epilogue"], "array_busy": c["array_busy"],
            "instret": c["instret"], "program_words": self.program_words,
            "mismatches": self.mismatches, "first_mismatch": self.first_mismatch,
            "counter_violations": list(self.violations),
            "platform": self.platform.to_dict(),
            "memory": memory_summary(c, self.port_bytes),
            **(estimate(c, self.config, self.platform).to_dict() if self.config else {}),
            "wall_seconds": round(self.wall_seconds, 4),
            "sim_cycles_per_s": round(self.cycles / self.wall_seconds) if self.wall_seconds else 0,
        }

    def summary(self) -> str:
        verdict = "bit-exact" if not self.mismatches else (
            f"MISMATCH in {self.mismatches} elements, first at {self.first_mismatch}")
        if self.violations:
            verdict += "; COUNTER VIOLATION: " + "; ".join(self.violations)
        return (f"gemm {self.M}x{self.K}x{self.N} epilogue={','.join(self.stages) or 'none'} "
                f"{'fused' if self.fused else 'unfused'}: {verdict}; {self.cycles} cycles "
                f"(ideal {self.ideal_cycles}, utilization {self.utilization:.3f}), "
                f"read {self.counters['bytes_read']} B, wrote {self.counters['bytes_written']} B, "
                f"{self.stall_cycles} stall cycles, simulated at "
                f"{self.to_dict()['sim_cycles_per_s']:,} cycles/s")


@dataclass(frozen=True)
class GemmCase:
    """One GEMM to check: shape, stages, fusion, tiling, and its operands.

    ``kgroup`` > 0 makes it a grouped GEMM (:class:`fusion.kernels.gemm.params.GemmParams`);
    give it a ``problem`` whose B is zero outside the diagonal blocks
    (:func:`grouped_problem`). ``kmajor_out`` stores the output transposed (MATMUL ``tr``).
    ``sparse`` runs the block-sparse program made for the zero blocks of the problem's B
    (:mod:`fusion.kernels.gemm.sparse`; give it a :func:`pruned_problem`). ``skip`` runs the
    zero-skipping program (:mod:`fusion.kernels.gemm.skip`; give it a
    :func:`zero_tile_problem`), storing the output's tile flags too when it is requantized.
    """

    M: int
    K: int
    N: int
    stages: tuple[str, ...] = ()
    fused: bool = True
    tiling: Tiling | None = None
    seed: int = 0
    problem: Problem | None = None
    kgroup: int = 0
    kmajor_out: bool = False
    #: Grouped only: column blocks per group (:class:`fusion.kernels.gemm.params.GemmParams`).
    kblocks: int = 1
    #: Where its regions lie (``(region, word address)`` pairs: a model's memory plan put
    #: them there); None: built alone, packed from word 0.
    placement: tuple[tuple[str, int], ...] | None = None
    sparse: bool = False
    skip: bool = False

    def operands(self) -> Problem:
        """The case's problem: the one given, or random operands from its seed (drawn once:
        the kernel, its memory image and its expected result all read them)."""
        return self.problem or self._random_problem

    @functools.cached_property
    def _random_problem(self) -> Problem:
        return random_problem(self.M, self.K, self.N, self.stages, self.seed)

    def kernel(self, config: VariantConfig) -> GemmKernel:
        """The compiled kernel (no operands: see :meth:`memory` and :meth:`expected`);
        compiled once per variant.

        Raises
        ------
        ValueError
            If the regions do not fit the variant's external memory: checked before any
            operand is drawn, since the operands of a 10**12-row GEMM would exhaust this
            machine first. Or as :func:`~fusion.kernels.gemm.kind.compiled_gemm` refuses.
        """
        if config not in self._kernels and self.skip:
            problem = self.operands()
            dims = GemmDims(config, self.M, self.K, self.N)
            flags = tile_flags(dims, problem.a, problem.a_zp)
            params = GemmParams(M=self.M, K=self.K, N=self.N, stages=self.stages,
                                fused=self.fused, epilogue=problem.params,
                                kmajor_out=self.kmajor_out, skip_zp=problem.a_zp,
                                flags=tuple(map(tuple, flags)), skip=True,
                                out_flags="requant" in self.stages)
            self._kernels[config] = compile_kernel(
                GEMM, config, params, placement=dict(self.placement) if self.placement else None)
        if config not in self._kernels and self.sparse:
            problem = self.operands()
            params = GemmParams(M=self.M, K=self.K, N=self.N, stages=self.stages,
                                fused=self.fused, epilogue=problem.params,
                                kmajor_out=self.kmajor_out, sparse=True,
                                blocks=sparse_blocks(config, problem.b))
            self._kernels[config] = compile_kernel(
                GEMM, config, params, placement=dict(self.placement) if self.placement else None)
        if config not in self._kernels:
            if self.problem is None:
                place(config, gemm_regions(config, self.M, self.K, self.N, stages=self.stages,
                                           fused=self.fused, kgroup=self.kgroup,
                                           kblocks=self.kblocks))
            self._kernels[config] = compiled_gemm(
                config, self.M, self.K, self.N, stages=self.stages, fused=self.fused,
                tiling=self.tiling, params=self.operands().params, kgroup=self.kgroup,
                kmajor_out=self.kmajor_out, kblocks=self.kblocks,
                placement=dict(self.placement) if self.placement else None)
        return self._kernels[config]

    @functools.cached_property
    def _kernels(self) -> dict[VariantConfig, GemmKernel]:
        return {}

    def memory(self, kernel: GemmKernel) -> list[tuple[int, bytes]]:
        """The memory image of the case's operands for ``kernel``."""
        return kernel.memory(**self.operands().operands)

    def expected(self, kernel: GemmKernel) -> np.ndarray:
        """The reference result of the case's operands."""
        return kernel.expected(**self.operands().operands)


def grouped_problem(config: VariantConfig, M: int, K: int, N: int, kgroup: int,  # noqa: N803
                    stages: Sequence[str], seed: int, kblocks: int = 1) -> Problem:
    """:func:`random_problem` with B zeroed outside the diagonal blocks of a grouped GEMM:
    column block ``j`` (``config.cols`` columns) keeps the rows ``[g*kgroup, (g+1)*kgroup)``
    of its group ``g = j // kblocks``. The planted edge cases assumed the full B, so they are
    not reached exactly."""
    problem = random_problem(M, K, N, stages, seed)
    rows = np.arange(K)[:, None] // kgroup
    cols = np.arange(N)[None, :] // config.cols // kblocks
    problem.b[rows != cols] = 0
    return problem


def pruned_problem(config: VariantConfig, M: int, K: int, N: int, fraction: float,  # noqa: N803
                   stages: Sequence[str], seed: int) -> Problem:
    """:func:`random_problem` with about ``fraction`` of B's weight blocks (the block-sparse
    program's, :func:`fusion.kernels.gemm.sparse.block_rows` K rows by one column block)
    set to zero, drawn from ``seed``."""
    problem = random_problem(M, K, N, stages, seed)
    kb, c = block_rows(config), config.cols
    rng = np.random.default_rng(seed + 1)
    for k in range(0, K, kb):
        for n in range(0, N, c):
            if rng.random() < fraction:
                problem.b[k:k + kb, n:n + c] = 0
    return problem


def zero_tile_problem(config: VariantConfig, M: int, K: int, N: int, share: float,  # noqa: N803
                      stages: Sequence[str], seed: int) -> Problem:
    """:func:`random_problem` with a zero point for A, and about ``share`` of A's tiles (one
    row block by :func:`fusion.kernels.gemm.sparse.block_rows` K rows: what the
    zero-skipping program skips) all that zero point, drawn from ``seed``.

    With ``share`` > 0 and at least two whole row blocks, the output's tile flags see
    traffic too: the last whole row block of A is all zero point and the first column
    block's bias (without A's zero-point share, which the bias holds folded as the lowering
    gives it) 0, so its output tile there is all the output zero point (stored after a tile
    that is not: a flag left from the tile before shows); in the second column block only
    the first column's is 0 (each row holds the zero point once: a flag that takes one
    zero-point byte for all of them shows). The output zero point is made non-negative, so
    that a ReLU keeps it. Some planted edge cases give way."""
    problem = random_problem(M, K, N, stages, seed)
    rng = np.random.default_rng(seed + 2)
    za = int(rng.integers(-20, 21))
    r, kb, c = config.rows, block_rows(config), config.cols
    for i in range(0, M, r):
        for j in range(0, K, kb):
            if rng.random() < share:
                problem.a[i:i + r, j:j + kb] = za
    params = problem.params
    if share > 0 and M // r >= 2 and problem.bias is not None:
        last = (M // r - 1) * r
        problem.a[last:last + r] = za
        unfolded = np.zeros(N, np.int64)
        if N > c:
            far = int(np.abs(problem.bias).max()) + 1
            unfolded[c:2 * c] = far * np.where(np.arange(c) % 2, 1, -1)[:min(c, N - c)]
            unfolded[c] = 0
        unfolded[2 * c:] = problem.bias[2 * c:]
        colsum = problem.b.astype(np.int64).sum(axis=0)
        problem.bias[:] = (unfolded - za * colsum).astype(np.int32)
        params = dataclasses.replace(params, zp=abs(params.zp))
    return dataclasses.replace(problem, a_zp=za, params=params)


def tile_flag_words(kernel: GemmKernel, problem: Problem) -> np.ndarray:
    """The output tile flags a zero-skipping kernel's store unit must write: 1 where every
    byte of the stored tile (padding included: its rows and columns are what the epilogue
    makes of zero A rows and zero weights and bias) is the output zero point."""
    d = kernel.dims
    mp, np_ = d.Mb * d.R, d.Nb * d.C
    a = np.zeros((mp, problem.a.shape[1]), np.int8)
    a[:problem.a.shape[0]] = problem.a
    b = np.zeros((problem.b.shape[0], np_), np.int8)
    b[:, :problem.b.shape[1]] = problem.b
    bias = np.zeros(np_, np.int32)
    if problem.bias is not None:
        bias[:problem.bias.shape[0]] = problem.bias
    out = gemm_epilogue(a, b, kernel.stages, problem.params,
                        **({"bias": bias} if problem.bias is not None else {}))
    same = out == np.int8(problem.params.zp)
    return same.reshape(d.Mb, d.R, d.Nb, d.C).all(axis=(1, 3))


def ideal_cycles(config: VariantConfig, M: int, K: int, N: int) -> int:  # noqa: N803
    """``ceil(M*N*K / (rows*cols))``: every PE busy every cycle."""
    return -(-M * N * K // (config.rows * config.cols))


def report(config: VariantConfig, case: GemmCase, kernel: GemmKernel, result: RunResult,
           expected: np.ndarray | None = None,
           platform: PlatformConfig | None = None,
           memory: MemoryImage | None = None) -> GemmReport:
    """Compare a run with the reference (or with ``expected``, for tests that must fail), and
    check its counters against the program (:func:`fusion.runtime.invariants.check_counters`,
    on the words of ``memory``, the job's image, for a program that branches on them): the
    report is ok only when both hold. A zero-skipping kernel's stored tile flags are checked
    against the stored tiles (:func:`tile_flag_words`)."""
    got = kernel.decode(bytes(result.outputs["out"]))
    want = case.expected(kernel) if expected is None else expected
    bad = np.argwhere(got != want)
    first = None
    if len(bad):
        r, c = (int(v) for v in bad[0])
        first = (r, c, int(got[r, c]), int(want[r, c]))
    features = kernel.kind.features(config, kernel.signature)
    # grouped: the blocks' MACs; zero-skipping: what it runs follows the data (the
    # interpreter's own ideal counts it)
    ideal = -(-features.macs // (config.rows * config.cols))
    fastest = kernel.kind.fastest_params(config, kernel.signature)
    predicted = kernel.kind.features(config, fastest).analytical_cycles()
    words = None if memory is None else MemoryWords(memory.writes, config.port_bytes)
    violations = tuple(str(v) for v in check_counters(
        config, kernel.program, result.counters, ideal_cycles=0 if case.skip else ideal,
        floor_cycles=timing_floor(config, kernel.program, predicted), memory=words))
    if "out_flags" in result.outputs:
        flags = np.frombuffer(bytes(result.outputs["out_flags"]), np.uint8).reshape(
            -1, config.port_bytes).any(axis=1)
        want_flags = tile_flag_words(kernel, case.operands()).reshape(-1)
        if not np.array_equal(flags, want_flags):
            tile = int(np.flatnonzero(flags != want_flags)[0])
            violations += (f"the store unit's zero flag of output tile {tile} reads "
                           f"{int(flags[tile])}, but that tile is "
                           f"{'' if want_flags[tile] else 'not '}all zero point",)
    return GemmReport(
        M=case.M, K=case.K, N=case.N, stages=tuple(case.stages), fused=case.fused,
        tiling=kernel.tiling, ok=not len(bad) and not violations, mismatches=len(bad),
        first_mismatch=first, counters=result.counters, ideal_cycles=ideal,
        bytes_loaded=kernel.bytes_loaded, wall_seconds=result.wall_seconds,
        program_words=len(kernel.program), variant=config.key(), got=got,
        violations=violations, config=config, platform=platform or PlatformConfig())


def run_gemms(config: VariantConfig, cases: Sequence[GemmCase], *,
              build: BuildInfo | None = None) -> list[GemmReport]:
    """Build and run every case in one simulator launch; one report per case, in order.

    ``build`` is the simulation to run on (:func:`sim.build.build_variant` of ``config`` by
    default)."""
    kernels = [case.kernel(config) for case in cases]
    jobs = [Job(program=k.program, memory=MemoryImage(writes=tuple(c.memory(k)),
                                                      reads=_reads(k)),
                name=f"gemm {c.M}x{c.K}x{c.N} {','.join(c.stages) or 'none'} "
                     f"{'fused' if c.fused else 'unfused'}")
            for c, k in zip(cases, kernels, strict=True)]
    results = run_programs(config, jobs, build=build)
    platform = build.platform if build is not None else None
    return [report(config, c, k, r, platform=platform, memory=j.memory)
            for c, k, r, j in zip(cases, kernels, results, jobs, strict=True)]


def _reads(kernel: GemmKernel) -> dict[str, tuple[int, int]]:
    """What to read back: the output, and a zero-skipping kernel's stored tile flags."""
    reads = dict(kernel.reads)
    if "out_flags" in kernel.regions:
        region = kernel.regions["out_flags"]
        reads["out_flags"] = (region.addr, region.nbytes)
    return reads


def run_gemm(config: VariantConfig, M: int, K: int, N: int, *,  # noqa: N803
             stages: Sequence[str] = (), fused: bool = True, seed: int = 0,
             tiling: Tiling | None = None, build: BuildInfo | None = None) -> GemmReport:
    """Run one random GEMM with ``stages`` on Verilator and check it bit for bit.

    Parameters
    ----------
    config : VariantConfig
        The variant (built once and cached).
    M, K, N : int
        The shape; any positive sizes (partial tiles are padded by the layout).
    stages : sequence of str
        An ordered subset of the variant's epilogue chain.
    fused : bool
        Fused epilogue, or one memory-to-memory pass per stage.
    seed : int
        Seed of the random operands and parameters.
    tiling : Tiling, optional
        Super tiles, loop order, double buffering; chosen automatically by default.
    build : BuildInfo, optional
        The simulation to run on; the variant's default build otherwise.

    Returns
    -------
    GemmReport
    """
    case = GemmCase(M=M, K=K, N=N, stages=tuple(stages), fused=fused, tiling=tiling, seed=seed)
    return run_gemms(config, [case], build=build)[0]

