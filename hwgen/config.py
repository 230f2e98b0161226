"""The one frozen configuration object of an accelerator variant.

Every width, depth and size of a variant is decided here and nowhere else: the Amaranth
generators, the microcode templates, the simulator harness and the descriptor file all take a
:class:`VariantConfig` and read its fields and derived properties. Like a generated C header,
this module imports nothing else from the project but the names of the epilogue stages, which
:mod:`hwgen.stages` declares (one record per stage, so that a new stage is declared once).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwgen.stages import STAGE_NAMES

#: Epilogue stages the generator knows, in their canonical order (the order the compiler
#: fuses graph ops in). A variant chains any ordered subset of them, each at most once.
EPILOGUE_STAGES: tuple[str, ...] = STAGE_NAMES

#: Accumulator banks a variant may have (``acc_banks``): MATMUL's ``bank`` field has 3 bits.
ACC_BANK_CHOICES = (1, 2, 4, 8)

#: Bumped whenever the meaning of a field changes, so that old descriptors are refused.
DESCRIPTOR_VERSION = 1


def _is_pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def content_key(data: dict[str, Any]) -> str:
    """A stable content hash of plain JSON data (16 hex digits): the sha256 of its canonical
    JSON (sorted keys, no spaces), so that it does not depend on field order.

    Every frozen config of the contract (:class:`VariantConfig`,
    :class:`hwgen.platform.PlatformConfig`) names its build folders and cache entries by it.
    """
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_fields(cls: type, data: Any, what: str) -> None:
    """Refuse ``data`` for ``cls.from_dict`` unless it is a JSON object of known fields.

    Parameters
    ----------
    cls : dataclass type
        The config class whose fields are the known keys.
    data : object
        What was read.
    what : str
        The name of the config in the message, e.g. ``"variant config"``.

    Raises
    ------
    ValueError
        Naming the unknown field(s) and the known ones.
    """
    if not isinstance(data, dict):
        raise ValueError(f"a {what} must be a JSON object, not {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"unknown {what} field(s) {', '.join(unknown)}; "
            f"the known fields are {', '.join(sorted(known))}"
        )


@dataclass(frozen=True, kw_only=True)
class VariantConfig:
    """Every parameter of one accelerator variant (one "bitstream").

    Parameters
    ----------
    rows, cols : int
        Shape of the output-stationary PE array. Powers of two from 1 to 64, so that the DMA's
        width converters between the memory port and the scratchpads have whole ratios.
    operand_bits, acc_bits : int
        Operand and accumulator widths. The generator implements int8 x int8 -> int32.
    epilogue : tuple of str
        The fused epilogue chain, in order; any subset of :data:`EPILOGUE_STAGES`.
    spad_a_depth, spad_b_depth : int
        Depth, in array rows, of the A scratchpad (``rows`` bytes a row) and of the B
        scratchpad (``cols`` bytes a row).
    spad_e_depth : int
        Depth of the epilogue scratchpad, which holds bias vectors, residual tiles and the
        input of standalone epilogue passes: ``cols`` int32 lanes a row.
    port_bytes : int
        Width of the external memory port in bytes per cycle (a power of two).
    port_latency : int
        Read latency of the external memory, in cycles (the simulation memory model honours
        it exactly).
    mem_addr_bits : int
        Width of the memory port's word address. The simulation memory model has
        ``2 ** mem_addr_bits`` words.
    imem_depth : int
        Instruction memory depth, in 64-bit microcode words.
    window_unit : bool
        Add the window unit (``WINDOW``/``WCFG`` in :mod:`hwgen.isa`): depthwise
        convolutions and pools, one channel a lane, ``9 * cols`` multipliers beside the array.
        It needs ``port_bytes == rows == cols <= 16`` (an A row is one pixel's channels).
        Off, the unit adds nothing to the Verilog, and the key is the one the variant had
        before the option existed.
    epilogue_share : int
        Cycles the epilogue spends on one row: its stages have ``cols / epilogue_share``
        lanes (:attr:`epilogue_lanes`) and take a row's lanes in that many beats. Sharing
        divides the stages' multipliers and logic (the requantize and residual stages' four
        MULT18X18D a lane) by it, and slows only what drains faster than a row in that many
        cycles (tiles of a short K, passes, the window unit's tiles), which the cost model
        prices. A power of two dividing ``cols``; at 1 (no sharing) the key is the one the
        variant had before the option existed.
    acc_banks : int
        Accumulators per processing element (1, 2, 4 or 8): a MATMUL names its ``bank``, so a
        super tile of up to ``acc_banks`` output tiles can keep its partial sums in the array
        across k chunks. Without banks a chunked reduction (a K too deep for the
        scratchpads: a 3x3 convolution of 256 channels is 2,304 rows) runs one tile at a
        time, loading both operands for every tile; with them the operands of a chunk are
        loaded once for the super tile. One bank is the array as it always was (its key
        too).
    """

    rows: int = 4
    cols: int = 4
    operand_bits: int = 8
    acc_bits: int = 32
    epilogue: tuple[str, ...] = ("bias", "requant", "relu")
    spad_a_depth: int = 2048
    spad_b_depth: int = 2048
    spad_e_depth: int = 256
    port_bytes: int = 8
    port_latency: int = 4
    mem_addr_bits: int = 17
    imem_depth: int = 2048
    window_unit: bool = False
    epilogue_share: int = 1
    acc_banks: int = 1

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, not {value!r}")
            if not (1 <= value <= 64 and _is_pow2(value)):
                raise ValueError(
                    f"{name} must be a power of two from 1 to 64, not {value!r}: the DMA "
                    f"converts between the memory port and scratchpad rows in whole ratios"
                )
        if self.operand_bits != 8:
            raise ValueError(
                f"operand_bits must be 8 (int8 operands), not {self.operand_bits!r}: "
                f"the generator implements int8 x int8 -> int32"
            )
        if self.acc_bits != 32:
            raise ValueError(
                f"acc_bits must be 32, not {self.acc_bits!r}: "
                f"the generator implements int8 x int8 -> int32"
            )
        if isinstance(self.epilogue, str) or not isinstance(self.epilogue, tuple):
            raise ValueError(
                f"epilogue must be a tuple of stage names, not {self.epilogue!r}"
            )
        for stage in self.epilogue:
            if stage not in EPILOGUE_STAGES:
                raise ValueError(
                    f"unknown epilogue stage {stage!r}; "
                    f"the known stages are {', '.join(EPILOGUE_STAGES)}"
                )
        if len(set(self.epilogue)) != len(self.epilogue):
            raise ValueError(
                f"epilogue stages must each appear at most once, not {list(self.epilogue)}"
            )
        if not _is_pow2(self.port_bytes) or self.port_bytes > 64:
            raise ValueError(
                f"port_bytes must be a power of two from 1 to 64, not {self.port_bytes!r}"
            )
        if (self.rows * self.cols) % self.port_bytes:
            raise ValueError(
                f"an int8 output tile ({self.rows}x{self.cols} = {self.rows * self.cols} bytes) "
                f"must be a whole number of memory words; port_bytes={self.port_bytes} "
                f"does not divide it: use port_bytes <= {self.rows * self.cols}"
            )
        if not 1 <= self.port_latency <= 64:
            raise ValueError(f"port_latency must be from 1 to 64 cycles, not {self.port_latency!r}")
        if not 8 <= self.mem_addr_bits <= 24:
            raise ValueError(f"mem_addr_bits must be from 8 to 24, not {self.mem_addr_bits!r}")
        for name in ("spad_a_depth", "spad_b_depth", "spad_e_depth", "imem_depth"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 2 <= value <= 65536:
                raise ValueError(f"{name} must be an integer from 2 to 65536, not {value!r}")
        if not isinstance(self.window_unit, bool):
            raise ValueError(f"window_unit must be true or false, not {self.window_unit!r}")
        share = self.epilogue_share
        if (not isinstance(share, int) or isinstance(share, bool) or not _is_pow2(share)
                or self.cols % share):
            raise ValueError(
                f"epilogue_share must be a power of two dividing cols={self.cols} (the "
                f"epilogue's lanes are cols / epilogue_share), not {share!r}")
        banks = self.acc_banks
        if (not isinstance(banks, int) or isinstance(banks, bool)
                or banks not in ACC_BANK_CHOICES):
            raise ValueError(
                f"acc_banks must be one of {', '.join(map(str, ACC_BANK_CHOICES))} (the "
                f"accumulators each processing element holds), not {banks!r}")
        if self.window_unit and not (self.window_loads and self.rows == self.cols):
            raise ValueError(
                f"the window unit needs port_bytes == rows == cols <= 16 (one pixel's channels "
                f"a memory word and an A row), not a {self.rows}x{self.cols} array with "
                f"port_bytes={self.port_bytes}: use e.g. --rows 8 --cols 8 --port-bytes 8")

    def check_chain_order(self) -> None:
        """Refuse an epilogue chain that the tools cannot run whole: one out of the order of
        :data:`EPILOGUE_STAGES`.

        The gateware chains stages in any order, and the compiler's legality checks refuse
        what a chain cannot fuse; but graph ops form fused chains in the canonical order and
        the reference applies a kernel's stages in that order, so ``hwgen gemm`` and every
        fused kernel of ``hwgen run`` would be refused on a chain such as ``relu,bias``.
        ``hwgen generate`` (and reading a variant folder) calls this; tests of the gateware
        and of the refusals build such configs directly.

        Raises
        ------
        ValueError
            Naming the order that works, e.g. ``use --epilogue bias,relu``.
        """
        canonical = tuple(s for s in EPILOGUE_STAGES if s in self.epilogue)
        if self.epilogue != canonical:
            raise ValueError(
                f"epilogue {','.join(self.epilogue)} is out of order: stages chain in the "
                f"order {','.join(EPILOGUE_STAGES)} (the order the compiler fuses graph ops "
                f"and the reference applies them); use --epilogue {','.join(canonical)}"
            )

    # -- derived widths: computed here once, read everywhere else --------------------------

    @property
    def port_bits(self) -> int:
        """Width of one memory word in bits."""
        return self.port_bytes * 8

    @property
    def a_row_bytes(self) -> int:
        """Bytes of one A scratchpad row: one int8 operand per array row."""
        return self.rows

    @property
    def window_loads(self) -> bool:
        """The load engine runs LOADW (window loads, :mod:`hwgen.isa`): an A scratchpad row is
        one memory word (``port_bytes == rows``), and a row's lanes fit the 16-bit mask."""
        return self.port_bytes == self.rows and self.rows <= 16

    @property
    def b_row_bytes(self) -> int:
        """Bytes of one B scratchpad row: one int8 operand per array column."""
        return self.cols

    @property
    def e_row_bytes(self) -> int:
        """Bytes of one epilogue scratchpad row: ``cols`` int32 lanes."""
        return self.cols * 4

    @property
    def epilogue_lanes(self) -> int:
        """Lanes of the epilogue's stages and of each beat through them: a row of ``cols``
        lanes is ``epilogue_share`` beats."""
        return self.cols // self.epilogue_share

    @property
    def mem_words(self) -> int:
        """Words in the external memory address space."""
        return 1 << self.mem_addr_bits

    @property
    def mem_bytes(self) -> int:
        """Bytes in the external memory address space."""
        return self.mem_words * self.port_bytes

    @property
    def read_credits(self) -> int:
        """Words the load engine may have requested and not yet used: the depth of its read
        buffer. Memory with variable latency (a DRAM controller) may deliver words in bursts
        faster than the gearboxes take them; the buffer holds them, and a request needs a
        free entry. At least ``port_latency + 2`` so that credits never run out on the ideal
        memory (its cycle counts stay those of a fixed-latency port), and at least 32, above
        the 17 reads a LiteDRAM controller keeps in flight (``docs/memory.md``)."""
        return max(32, self.port_latency + 2)

    @property
    def k_align(self) -> int:
        """K is padded to a multiple of this, so that every operand block is whole words."""
        return max(1, self.port_bytes // min(self.rows, self.cols))

    def stage_bit(self, stage: str) -> int:
        """Bit of ``stage`` in the epilogue enable mask of a microcode instruction."""
        if stage not in self.epilogue:
            raise ValueError(
                f"epilogue stage {stage!r} is not in this variant's chain "
                f"({', '.join(self.epilogue) or 'empty'}); generate a variant that has it"
            )
        return 1 << self.epilogue.index(stage)

    # -- identity and the descriptor -----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The parameters as plain JSON types."""
        data = dataclasses.asdict(self)
        data["epilogue"] = list(self.epilogue)
        # a variant without these options keeps the key it always had
        if not self.window_unit:
            del data["window_unit"]
        if self.epilogue_share == 1:
            del data["epilogue_share"]
        if self.acc_banks == 1:
            del data["acc_banks"]
        return data

    def key(self) -> str:
        """A stable content hash of the parameters (16 hex digits).

        It names build folders and cache entries; it does not depend on field order.
        """
        return content_key(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VariantConfig:
        """Build a config from :meth:`to_dict` output, naming any unknown field."""
        check_fields(cls, data, "variant config")
        values = dict(data)
        if "epilogue" in values:
            if not isinstance(values["epilogue"], list | tuple):
                raise ValueError(
                    f"epilogue must be a list of stage names, not {values['epilogue']!r}")
            values["epilogue"] = tuple(values["epilogue"])
        return cls(**values)

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        """The JSON descriptor written beside the Verilog."""
        return {
            "format": "hwgen-variant",
            "version": DESCRIPTOR_VERSION,
            "key": self.key(),
            "config": self.to_dict(),
            **extra,
        }

    def write_descriptor(self, path: Path, **extra: Any) -> None:
        """Write :meth:`descriptor` to ``path`` as JSON."""
        Path(path).write_text(json.dumps(self.descriptor(**extra), indent=2) + "\n")

    @classmethod
    def read_descriptor(cls, path: Path) -> tuple[VariantConfig, dict[str, Any]]:
        """Read a descriptor written by :meth:`write_descriptor`.

        Returns
        -------
        config, descriptor : VariantConfig, dict
            The config, and the whole descriptor (with any extra entries).

        Raises
        ------
        ValueError
            If the file is not a valid descriptor, is of another version, or its recorded key
            does not match its parameters (it was edited or corrupted).
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(
                f"no variant descriptor at {path}; create one with 'hwgen generate -o DIR'"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"variant descriptor {path} is not valid JSON ({exc}); "
                             f"regenerate it with 'hwgen generate'") from None
        if not isinstance(data, dict) or data.get("format") != "hwgen-variant":
            raise ValueError(f"{path} is not an hwgen variant descriptor; "
                             f"regenerate it with 'hwgen generate'")
        if data.get("version") != DESCRIPTOR_VERSION:
            raise ValueError(
                f"{path} is descriptor version {data.get('version')!r}, this hwgen reads "
                f"version {DESCRIPTOR_VERSION}; regenerate it with 'hwgen generate'"
            )
        config = cls.from_dict(data.get("config"))
        if data.get("key") != config.key():
            raise ValueError(
                f"{path} records key {data.get('key')!r} but its parameters hash to "
                f"{config.key()!r}: the file was edited or corrupted; regenerate it"
            )
        return config, data
