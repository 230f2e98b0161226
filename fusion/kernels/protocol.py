"""The protocol every kernel kind implements, and the structured reason a kind refuses.

A *kind* (a GEMM with its fused epilogue, a standalone epilogue pass, an element-wise max...)
is one folder of :mod:`fusion.kernels` holding a :class:`KernelKind`: an object that, given the
variant and the kind's frozen *params* (what the program depends on: shapes, stages,
quantization, tiling...), answers every question the compiler, the runtime and the cost
models ask of a kernel, without branching on the kind anywhere else:

- *legality*: may it run on this variant at all? :meth:`KernelKind.legality` returns a
  :class:`Refusal` (a record made where the decision is made, never parsed back out of an
  exception's text) or ``None``. Only this check refuses: an exception from a builder is a
  bug, and surfaces as one;
- its operands, its output and its memory regions, before anything is built;
- its program (:meth:`KernelKind.build`, from the regions alone: no operand values), which
  :func:`fusion.kernels.program.compile_kernel` looks up in the kernel cache first;
- the memory image of given operand values (:meth:`KernelKind.pack`) and their expected
  result (:meth:`KernelKind.reference`);
- its cost-model features (:meth:`KernelKind.features`), whose ``analytical_cycles`` is the
  kind's walk through :mod:`fusion.cost.analytical`;
- for the compiler: the variants worth pricing (tilings), a one-line description, and how the
  host makes its operands from the graph tensors' values.

The registry of kinds is :mod:`fusion.kernels.kinds`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from fusion.kernels.codegen import Program
from fusion.kernels.layout import ROWS, Region
from hwgen.config import VariantConfig
from hwgen.lanes import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN
from hwgen.reference import EpilogueParams
from hwgen.stages import check_inputs


class Operand(NamedTuple):
    """An operand (or the output) of a kernel: its element type and its shape."""

    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, init=False)
class Refusal:
    """Why a kernel kind cannot run some params on a variant (Inductor's ``WhyNoFuse``).

    Made by the legality check where it decides, and read as data: ``reason`` is a short
    name (``"stage_missing"``, ``"no_tiling"`` ...), ``details`` the values it was decided
    on, ``text`` the sentence for people (naming the values and the fix).

    ``Refusal("gemm", "stage_missing", "...", stage="relu", chain=("bias",))``
    """

    kind: str
    reason: str
    text: str
    details: tuple[tuple[str, Any], ...]

    def __init__(self, kind: str, reason: str, text: str, **details: Any) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "details", tuple(sorted(details.items())))

    def detail(self, name: str) -> Any:
        """The value of one detail (``KeyError`` if the refusal has none of that name)."""
        return dict(self.details)[name]

    def __str__(self) -> str:
        return self.text


class KernelRefused(ValueError):
    """A kernel asked for although its kind refuses it on the variant; ``refusal`` says why.

    The engine never builds what the legality check refused; a direct caller (a test, the
    ``hwgen gemm`` command) gets this, with the refusal's text as the message.
    """

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.text)
        self.refusal = refusal


def stage_refusal(kind: str, stages: Sequence[str], chain: Sequence[str]) -> Refusal | None:
    """Why ``stages`` cannot run on a variant whose epilogue chain is ``chain``, or None.

    The stages must be an ordered subset of the chain (the rule of
    :func:`hwgen.reference.check_stages`, as a record).
    """
    last = -1
    for stage in stages:
        if stage not in chain:
            return Refusal(kind, "stage_missing",
                           f"epilogue stage {stage!r} is not in the chain "
                           f"({', '.join(chain) or 'empty'}); use a variant whose epilogue "
                           f"has it", stage=stage, chain=tuple(chain))
        index = list(chain).index(stage)
        if index <= last:
            return Refusal(kind, "stage_order",
                           f"stages {list(stages)} are not an ordered subset of the chain "
                           f"{list(chain)}: {stage!r} is repeated or out of order",
                           stage=stage, chain=tuple(chain))
        last = index
    return None


def check_sizes(**sizes: Any) -> None:
    """Refuse a size that is not a positive integer, naming it (params validation).

    Raises
    ------
    ValueError
        ``"M must be a positive integer, not 0"``.
    """
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")


def check_epilogue(stages: Sequence[str], params: EpilogueParams,
                   src_dtype: str = "int32") -> None:
    """Refuse per-channel requantize without the requant stage (its vectors would be unused),
    and a chain whose stage can get inputs its gateware does not take
    (:func:`hwgen.stages.check_inputs`, for a ``src_dtype`` input): a malformed params
    object, not a refusal.

    Raises
    ------
    ValueError
        Naming the stages and the fix.
    """
    lo, hi = (INT8_MIN, INT8_MAX) if src_dtype == "int8" else (INT32_MIN, INT32_MAX)
    check_inputs(tuple(stages), params, lo, hi)
    if params.per_channel and "requant" not in stages:
        raise ValueError(f"per-channel requantize (params.per_channel) needs the requant stage, "
                         f"but the stages are ({', '.join(stages) or 'none'}); add requant or "
                         f"use per_channel=False")


class Build(NamedTuple):
    """What a kind's builder makes from the params and the placed regions.

    ``chosen`` holds what the params left open and the builder decided (the GEMM's tiling),
    as JSON data; ``bytes_loaded``/``bytes_stored`` are what the program's loads read and its
    stores write, ``ideal_cycles`` every unit at full rate with perfect overlap.
    """

    program: Program
    chosen: dict[str, Any]
    bytes_loaded: int
    bytes_stored: int
    ideal_cycles: int


class KernelKind(abc.ABC):
    """One kind of kernel (see the module docstring). Kinds are stateless singletons.

    Attributes
    ----------
    name : str
        The kind's name in cache keys, metadata and plans.
    template : str
        The microcode template its programs are rendered from.
    params_type : type
        Its frozen params class.
    kernel_type : type
        Its compiled kernel class (a :class:`fusion.kernels.program.Kernel`).
    features_type : type
        Its cost-model features class (a :class:`fusion.cost.model.Features`).
    const_regions : frozenset of str
        Regions holding constants (weights, bias groups): they live for a whole model.
    variants_label : str
        What :meth:`variants` enumerates (``"tilings"``), for ``--explain``; empty when a
        kind has one way to run.
    """

    name: ClassVar[str]
    template: ClassVar[str]
    params_type: ClassVar[type]
    kernel_type: ClassVar[type]
    features_type: ClassVar[type]
    const_regions: ClassVar[frozenset[str]] = frozenset()
    variants_label: ClassVar[str] = ""

    def __repr__(self) -> str:
        return f"<kernel kind {self.name}>"

    # -- the signature ---------------------------------------------------------------------

    @abc.abstractmethod
    def legality(self, config: VariantConfig, params: Any) -> Refusal | None:
        """Why ``params`` cannot run on ``config`` (a record), or None when they can. It
        starts with :meth:`variant_refusal`."""

    def variant_refusal(self, config: VariantConfig) -> Refusal | None:
        """Why no params of this kind can run on ``config`` (a unit or a stage the variant
        lacks), or None: what a variant's capabilities record
        (:mod:`fusion.kernels.capabilities`). None by default."""
        return None

    @abc.abstractmethod
    def dims(self, params: Any) -> tuple[int, int, int]:
        """``(M, K, N)`` of the tile geometry (:class:`fusion.kernels.layout.GemmDims`);
        ``K`` is 1 for kinds without a reduction. The output is ``M x N``."""

    @abc.abstractmethod
    def stages(self, params: Any) -> tuple[str, ...]:
        """The epilogue stages the program runs."""

    @abc.abstractmethod
    def epilogue(self, params: Any) -> EpilogueParams:
        """The epilogue control-register values the program writes."""

    @abc.abstractmethod
    def operands(self, config: VariantConfig, params: Any) -> dict[str, Operand]:
        """Every operand the kernel reads, by name, in region order."""

    @abc.abstractmethod
    def output(self, params: Any) -> Operand:
        """The output (always ``M x N`` in the tile-blocked layout, region ``out``)."""

    @abc.abstractmethod
    def regions(self, config: VariantConfig, params: Any) -> dict[str, int]:
        """Region name -> bytes, in allocation order, before any program is built."""

    @abc.abstractmethod
    def key_params(self, params: Any) -> dict[str, Any]:
        """What the program depends on, as JSON data (part of the cache key and metadata)."""

    def region_role(self, region: str) -> str:
        """``const`` (:attr:`const_regions`), ``output``, ``scratch`` or ``input``."""
        if region in self.const_regions:
            return "const"
        if region == "out":
            return "output"
        if region.startswith("tmp"):
            return "scratch"
        return "input"

    # -- building and running ----------------------------------------------------------------

    @abc.abstractmethod
    def build(self, config: VariantConfig, params: Any, regions: Mapping[str, Region]) -> Build:
        """The program at the placed ``regions``; it never needs operand values."""

    @abc.abstractmethod
    def pack(self, config: VariantConfig, params: Any,
             values: Mapping[str, np.ndarray]) -> dict[str, bytes]:
        """Region name -> bytes of checked operand ``values`` (those of :meth:`operands`)."""

    @abc.abstractmethod
    def reference(self, params: Any, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """The expected ``M x N`` result of checked operand ``values`` (numpy, no hardware)."""

    # -- cost ------------------------------------------------------------------------------

    @abc.abstractmethod
    def features(self, config: VariantConfig, params: Any) -> Any:
        """What a cost model predicts this kernel from (a :class:`fusion.cost.model.Features`
        whose ``analytical_cycles`` is the analytical estimate)."""

    # -- the compiler's questions ------------------------------------------------------------

    def variants(self, config: VariantConfig, params: Any) -> list[Any]:
        """The params worth pricing for these (legal) params, best guess first: one by
        default; the GEMM's tilings."""
        return [params]

    def data_variants(self, config: VariantConfig, params: Any) -> list[Any]:
        """Variants a compile that knew the data may have chosen and :meth:`variants` offers
        only with it (a plan read back without its data offers them too): none by default;
        the GEMM's zero-skipping program."""
        return []

    def fastest_params(self, config: VariantConfig, params: Any) -> Any:
        """``params`` priced at their fastest on any data (the floor a run's cycles cannot go
        below): themselves by default; a zero-skipping GEMM with every tile flagged."""
        return params

    def variant_label(self, params: Any) -> str:
        """How ``--explain`` names one variant (``tm=2 tn=1 ...``)."""
        return ""

    def explain_notes(self, params: Any) -> list[str]:
        """Extra ``--explain`` lines about choices the kind makes by design."""
        return []

    @abc.abstractmethod
    def describe(self, params: Any, ops: str = "") -> str:
        """One line: the kind, its shape and stages; ``ops`` names the graph nodes."""

    @abc.abstractmethod
    def host_operands(self, config: VariantConfig, params: Any,
                      inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """The operands the host makes from the kernel's input tensors (lane values, in the
        order of the kernel's graph inputs); constants are added by the caller."""

    def tensor_of(self, params: Any, out: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """The graph tensor of ``shape`` from the kernel's ``M x N`` output lanes (trimmed to
        the tensor's size): the lanes in row-major order unless the kind says otherwise (a
        pool's pixel rows are an NCHW tensor transposed)."""
        return np.asarray(out).reshape(shape)

    def region_layout(self, config: VariantConfig, params: Any, region: str) -> str:
        """How ``region`` (an input, or ``"out"``) lays its tensor out in memory, by
        :func:`fusion.kernels.layout.layout_name`: ``"tiles"`` unless the kind says otherwise.
        A region may read a producer's output in place only when their layouts agree."""
        return "tiles"

    def region_view(self, params: Any, region: str, shape: tuple[int, ...]) -> str:
        """How ``region`` (an input, or ``"out"``) holds a graph tensor of ``shape`` as its
        ``M x N`` matrix: :data:`fusion.kernels.layout.ROWS` (the tensor's elements in
        row-major order, as :meth:`tensor_of` and the kinds' ``host_operands`` reshape it)
        unless the kind says otherwise (:data:`~fusion.kernels.layout.PIXELS`: an NCHW
        tensor's pixel rows). Equal operands in equal layouts may still order a tensor's
        elements two ways (a ``72 x 8`` matrix of a ``2 x 8 x 6 x 6`` tensor): a region may
        read a producer's output in place only when their views agree too."""
        return ROWS

    def inputs_in_place(self, params: Any) -> dict[str, int]:
        """Input regions that hold graph input ``i`` exactly as a producer's output leaves
        it (tile-blocked ``M x N``): region -> ``i``. The memory planner lets such a region
        share the producer's buffer when their :class:`Operand`, layouts
        (:meth:`region_layout`) and views (:meth:`region_view`) agree."""
        return {}
